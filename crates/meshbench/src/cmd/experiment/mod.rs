//! `meshbench experiment FILE`: reads and checks the file (every mistake at once), prints the
//! plan with `--dry-run`, else hands it to the runner ([`meshbench_runner::run_experiment`]),
//! here or on a cluster ([`on_cluster`]), and prints: a progress line while it runs, the step
//! table, the headline, the thresholds. (`--detach` is `detached`'s: the dispatch sends it there.)

mod on_cluster;

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use meshbench_experiment::{Experiment, Plan};
use meshbench_live::Done;
use meshbench_runner::Site;
use meshbench_store::Store;

use super::common::experiment_file;
use super::common::faces::Faces;
use super::common::fleet;
use super::common::html_report;
use super::common::progress::{human_secs, step_secs};
use super::common::session::{self, short_steps};
use super::common::signals::Signals;
use super::common::stored::{changes_text, headline};
use super::common::thresholds::{check_headline, parse_thresholds};
use crate::cli::ExperimentArgs;
use crate::exit;

pub fn execute(args: ExperimentArgs) -> Result<u8> {
    let e = experiment_file::load_args(&args)?;
    if args.dry_run {
        out!("{}", describe_plan(&e, &Plan::compile(&e)));
        if let Some(section) = &e.cluster {
            let store_path = args
                .store
                .clone()
                .unwrap_or_else(meshbench_store::default_path);
            return on_cluster::dry_run(&e, section, &store_path);
        }
        if let Some(w) = short_steps(&e) {
            errln!("warning: {w}");
        }
        // A program the plan needs that is missing, with no fallback: the run would fail
        // those steps, so the plan cannot run here.
        let missing = meshbench_runner::setup::missing_programs(&e);
        if !missing.is_empty() {
            return Err(anyhow::anyhow!(
                "the plan cannot run here: {}",
                missing.join("; and ")
            ));
        }
        return Ok(exit::OK);
    }
    let thresholds = parse_thresholds(&args.thresholds)?;
    let store_path = args
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    let faces = Faces::start(&args.live)?;
    let (done, code) = match &e.cluster {
        Some(_) => on_cluster::run(&e, &args, &store_path, faces.as_ref())?,
        None => {
            let signals = Signals::install()?;
            let fleet = fleet::gather(&args.agents, e.agents.as_ref(), &signals)?;
            session::run(
                &e,
                &store_path,
                args.quiet,
                faces.as_ref(),
                Site::Here,
                fleet,
                &signals,
            )?
        }
    };
    let linger = faces.map(|faces| {
        let report = if faces.has_web() {
            live_report(&store_path, done.id)
        } else {
            None
        };
        faces.finish(Done {
            report,
            outcome: done.status.to_string(),
        })
    });
    let store = Store::open(&store_path)?;
    let h = headline(&store, done.id)?;
    out!("{}", meshbench_report::answers::headline_text(&h));
    out!("{}", changes_text(&store.steps(done.id)?));
    let passed = check_headline(&thresholds, &h);
    let _ = std::io::stdout().flush();
    // A signal that stopped the run asked to leave: the page does not linger then.
    if let Some(linger) = linger.filter(|_| code != exit::SIGINT && code != exit::SIGTERM) {
        linger.wait();
    }
    Ok(match code {
        exit::OK if !passed => exit::FAILED,
        code => code,
    })
}

/// Where `--web` writes the report of experiment `id`: beside the store, in
/// `STORE-NAME-reports/ID/` (`results.db` -> `results-reports/7/report.html`).
pub fn live_report_dir(store_path: &Path, id: i64) -> std::path::PathBuf {
    let stem = store_path
        .file_stem()
        .map_or_else(|| "results".into(), |s| s.to_string_lossy());
    store_path
        .parent()
        .unwrap_or(Path::new(""))
        .join(format!("{stem}-reports"))
        .join(id.to_string())
}

/// Writes the experiment's HTML report for the live page's link; a report that cannot be
/// written (no measured step, no font, a full disk) is a warning, not a failed run.
fn live_report(store_path: &Path, id: i64) -> Option<String> {
    let dir = live_report_dir(store_path, id);
    let written = Store::open(store_path)
        .map_err(anyhow::Error::from)
        .and_then(|store| html_report::write(&store, &id.to_string(), None, &dir));
    match written {
        Ok(w) => {
            errln!("report: {}", w.html.display());
            Some(w.html.display().to_string())
        }
        Err(e) => {
            errln!("warning: no HTML report for the live page: {e:#}");
            None
        }
    }
}

/// What `--dry-run` prints.
pub fn describe_plan(e: &Experiment, plan: &Plan) -> String {
    let mut out = format!(
        "experiment '{}': {} steps x ({} warm-up + {} + {} cool-down + ~{} setup) = about {}\n",
        e.name,
        plan.steps.len(),
        step_secs(e.warmup_secs),
        step_secs(e.duration_secs),
        step_secs(e.cooldown_secs),
        step_secs(plan.setup_secs),
        human_secs(plan.total_secs(e))
    );
    // A cluster's and an external system's needs are their own (docs/kubernetes.md,
    // docs/external.md): what the lab starts here is said.
    if e.cluster.is_none() && e.external.is_none() {
        out.push_str(&meshbench_runner::setup::needs(e));
        out.push('\n');
        out.push_str(&fits(
            e,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ));
        out.push('\n');
    }
    for s in &plan.steps {
        out.push_str(&format!(
            "{:>4}  repeat {}  {:<28} {:<34} {}\n",
            s.index + 1,
            s.repeat + 1,
            s.variant(),
            s.asks(),
            s.istio_label(&e.name, e.load.protocol)
        ));
    }
    if let Some(x) = &e.external {
        out.push_str(&describe_external(e, x));
    }
    if let Some(a) = &e.attribution {
        out.push_str(&format!(
            "attribution: 1 in {} measured requests carries an x-meshbench-id; each L7 Envoy on the path logs it, and each step says where its latency went, hop by hop\n",
            a.every()
        ));
    }
    out
}

/// `--dry-run`'s `fits:` line: the smallest machine for the plan's largest CPU limit (one core
/// beside it for the load and the backend) and, on a machine with fewer cores than `cores`,
/// the `--set` that keeps the limits that fit.
fn fits(e: &Experiment, cores: usize) -> String {
    let l = &e.limits;
    let roles = [
        ("proxy", &l.proxy),
        ("tunnel", &l.tunnel),
        ("backend", &l.backend),
        ("control_plane", &l.control_plane),
    ];
    let largest = roles
        .iter()
        .flat_map(|(_, r)| r.cpus.iter().copied())
        .fold(0.0_f64, f64::max);
    if largest == 0.0 {
        return "fits: any machine (no CPU limit; the roles share its cores)".into();
    }
    let smallest = largest.ceil() as usize + 1;
    let mut line = format!(
        "fits: {smallest} cores or more (its largest CPU limit is {largest} beside the load)"
    );
    if cores < smallest {
        let room = (cores.saturating_sub(1)).max(1) as f64;
        let keep: Vec<String> = roles
            .iter()
            .filter(|(_, r)| r.cpus.iter().any(|c| *c > room))
            .map(|(name, r)| {
                let fit: Vec<String> = r
                    .cpus
                    .iter()
                    .filter(|c| **c <= room)
                    .map(|c| c.to_string())
                    .collect();
                let fit = if fit.is_empty() {
                    vec![room.to_string()]
                } else {
                    fit
                };
                format!("--set 'limits.{name}.cpus=[{}]'", fit.join(", "))
            })
            .collect();
        line.push_str(&format!("; this machine has {cores}: {}", keep.join(" ")));
    }
    line
}

/// The external variants of `--dry-run`: each URL, and every query each role will make (the
/// rate window filled in), or why a figure has none.
fn describe_external(e: &Experiment, x: &meshbench_experiment::external::External) -> String {
    use meshbench_experiment::external::promql::with_window;
    use meshbench_results::Figure;
    let window = x.window_ms(e.sample_interval_ms);
    let mut out = format!(
        "external variants: roles read from {} after each step's load, a point every {} ms over the steady window, rates over {} ms
",
        x.prometheus_url, e.sample_interval_ms, window
    );
    for v in &x.variants {
        out.push_str(&format!(
            "  {}  {}
",
            v.name, v.url
        ));
        for r in &v.roles {
            out.push_str(&format!(
                "    role {} ({})
",
                r.name,
                r.program()
            ));
            let q = r.queries();
            for f in Figure::ALL {
                match q.query(f) {
                    Ok(q) => out.push_str(&format!(
                        "      {:<12} {}\n",
                        f.name(),
                        with_window(&q.expr, window)
                    )),
                    Err(why) => out.push_str(&format!("      {:<12} missing: {why}\n", f.name())),
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_machine_is_the_largest_limit_and_a_core_and_a_small_one_gets_a_set() {
        let file = "name: t\ntopologies: [gateway]\nlimits:\n  proxy:\n    cpus: [1, 2, 4, 6]\n";
        let e = meshbench_experiment::config::parse("t.yaml", file, &[]).unwrap();
        let line = "fits: 7 cores or more (its largest CPU limit is 6 beside the load)";
        assert_eq!(fits(&e, 8), line);
        assert_eq!(
            fits(&e, 2),
            format!("{line}; this machine has 2: --set 'limits.proxy.cpus=[1]'")
        );
        let free =
            meshbench_experiment::config::parse("t.yaml", "name: t\ntopologies: [baseline]\n", &[])
                .unwrap();
        assert!(fits(&free, 1).starts_with("fits: any machine"));
    }
}
