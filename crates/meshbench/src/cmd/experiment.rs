//! `meshbench experiment FILE`: reads and checks the file (every mistake at once), prints the
//! plan with `--dry-run`, else hands it to the runner ([`meshbench_runner::run_experiment`])
//! and prints: a progress line while it runs, the step table, the headline, the thresholds.

use std::io::{IsTerminal, Write};
use std::path::Path;

use anyhow::Result;
use meshbench_engine::Live;
use meshbench_experiment::{Experiment, Plan};
use meshbench_live::{Done, Scope, StepInfo};
use meshbench_results::{Role, Sample, StepFailure};
use meshbench_runner::agents::Fleet;
use meshbench_runner::setup::Provision;
use meshbench_runner::{Finished, Observer, Site, StepAt};
use meshbench_store::{StepRecord, Store};

use super::live::Faces;
use super::results::tables;
use super::signals::Signals;
use crate::cli::ExperimentArgs;
use crate::{exit, usage};

pub fn execute(args: ExperimentArgs) -> Result<u8> {
    let provision = match args.dry_run {
        true => Provision::Plan,
        false => Provision::Install,
    };
    let mut e = load(&args.file, &args.set, provision)?;
    if args.installed_only {
        for line in meshbench_runner::setup::leave_out_missing_gateways(&mut e) {
            errln!("note: {line}");
        }
    }
    if args.detach {
        return super::detached::detach(&e, &args);
    }
    if args.dry_run {
        out!("{}", describe_plan(&e, &Plan::compile(&e)));
        if let Some(section) = &e.cluster {
            let store_path = args
                .store
                .clone()
                .unwrap_or_else(meshbench_store::default_path);
            return super::cluster::dry_run(&e, section, &store_path);
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
    let thresholds = super::answers::parse_thresholds(&args.thresholds)?;
    let store_path = args
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    let faces = super::live::Faces::start(&args.live)?;
    let (done, code) = match &e.cluster {
        Some(_) => super::cluster::run(&e, &args, &store_path, faces.as_ref())?,
        None => {
            let signals = Signals::install()?;
            let fleet = super::agents::gather(&args.agents, e.agents.as_ref(), &signals)?;
            run(
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
    let h = super::answers::headline(&store, done.id)?;
    out!("{}", meshbench_report::answers::headline_text(&h));
    let passed = super::answers::check_headline(&thresholds, &h);
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

/// Reads an experiment file with its `--set` overrides; every mistake is bad input (exit 2),
/// including external requests that cannot be built (a `.proto` that does not compile, a body
/// that is not its message). A missing Envoy is installed or stood in for as `provision` says.
pub fn load(file: &Path, set: &[String], provision: Provision) -> Result<Experiment> {
    let mut e = meshbench_experiment::load(file, set).map_err(|err| usage(err.to_string()))?;
    for note in &e.old_words {
        // A note is one line: tests and scripts collect the `note:` lines.
        eprintln!("note: {}: {note}", file.display());
    }
    announce_stand_ins(&mut e, provision);
    let problems = meshbench_runner::external::request_problems(&e);
    if problems.is_empty() {
        return Ok(e);
    }
    let file = file.display();
    Err(usage(format!(
        "{file}: {}",
        problems.join(&format!("\n{file}: "))
    )))
}

/// One line when the steps are too short for any verdict on a difference: each needs
/// [`verdict::needed`](meshbench_analysis::verdict::needed) one-second intervals a side, or as
/// many repeats (the verdict's own rule, `verdict::enough_for`).
pub fn short_steps(e: &Experiment) -> Option<String> {
    use meshbench_analysis::verdict::{enough_for, needed};
    if enough_for(e.duration_secs, e.repeats) {
        return None;
    }
    let n = needed();
    let seconds = e.duration_secs.max(0.0).floor();
    Some(format!(
        "duration_secs={} gives each step {seconds} whole one-second interval{} and there {} {} repeat{}: a verdict on a difference (the latency added over the baseline, `compare`) needs {n} a side, so every one will say \"too short\"; set duration_secs={n} or more, or repeats={n}",
        e.duration_secs,
        if seconds == 1.0 { "" } else { "s" },
        if e.repeats == 1 { "is" } else { "are" },
        e.repeats,
        if e.repeats == 1 { "" } else { "s" },
    ))
}

/// Installs a missing Envoy (`Provision::Install`) and puts the file's fallbacks in place of
/// programs that still cannot run here, saying so, one line each (the presets name Envoy, with
/// nginx where it cannot be installed).
pub fn announce_stand_ins(e: &mut Experiment, provision: Provision) {
    for note in meshbench_runner::setup::stand_ins(e, provision) {
        eprintln!("note: {note}");
    }
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
        .and_then(|store| super::report::write(&store, &id.to_string(), None, &dir));
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

/// Runs every step of `e` into `store_path` with a progress line, prints the step table and
/// a closing line; returns what was stored and the exit code (a signal's, or 1 if a step
/// failed). Live faces, if any, see every step; `site` says where the steps are realised and
/// `fleet` who sends their load (this process when there is none).
#[allow(clippy::too_many_arguments)]
pub fn run(
    e: &Experiment,
    store_path: &Path,
    quiet: bool,
    faces: Option<&Faces>,
    site: Site,
    fleet: Option<Fleet>,
    signals: &Signals,
) -> Result<(Finished, u8)> {
    // What the dry run says, said again before anything starts: too short for a verdict,
    // and a program missing (its steps will fail; the others still run). Not for a store that
    // cannot be opened: the run stops at once with that store's one line.
    if Store::open(store_path).is_ok() {
        if let Some(w) = short_steps(e) {
            errln!("warning: {w}");
        }
        for missing in meshbench_runner::setup::missing_programs(e) {
            errln!("warning: {missing}; the steps that need it will fail");
        }
    }
    let mut progress = Progress::new(quiet, &e.name, store_path);
    progress.faces = faces;
    let done = meshbench_runner::run_experiment(
        e,
        store_path,
        site,
        fleet,
        signals.stop.clone(),
        &mut progress,
    )?;
    let code = exit_code(signals, &done);
    print_finished(&done);
    Ok((done, code))
}

/// A finished experiment's exit code: the signal's that stopped it, else 1 if a step failed.
pub fn exit_code(signals: &Signals, done: &Finished) -> u8 {
    signals.exit_code().unwrap_or(if done.failed() > 0 {
        exit::FAILED
    } else {
        exit::OK
    })
}

/// The step table on stdout and one closing line on stderr, ending with the command that
/// shows the experiment again from the store it is in.
pub fn print_finished(done: &Finished) {
    let records: Vec<&StepRecord> = done.steps.iter().collect();
    out!("{}", tables(&records));
    let _ = std::io::stdout().flush();
    let stopped = match done.stopped_before_load() {
        0 => String::new(),
        n => format!(", {n} not measured (set up when the stop came)"),
    };
    errln!(
        "experiment {} {} in {}: {} steps stored, {} failed{stopped}; `{}`",
        done.id,
        done.status,
        human_secs(done.elapsed.as_secs_f64()),
        done.steps.len(),
        done.failed(),
        super::results::show_command(done.id, &done.store)
    );
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

/// A part of a step in seconds, as a person writes it: `3s`, `0.5s`, `6.4s` (one decimal at
/// most, never a float's every digit), and `human_secs` from a minute up.
pub fn step_secs(s: f64) -> String {
    if !s.is_finite() || s >= 60.0 {
        return human_secs(s);
    }
    let tenths = (s * 10.0).round() / 10.0;
    if tenths == tenths.trunc() {
        format!("{tenths:.0}s")
    } else {
        format!("{tenths:.1}s")
    }
}

/// A duration in seconds for a person: `42s`, `3m05s`, `1h02m`.
pub fn human_secs(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The experiment's progress on stderr: a line redrawn four times a second on a terminal,
/// warnings and failed steps always; and every second to the live faces, if any.
pub struct Progress<'a> {
    live: bool,
    name: &'a str,
    store: &'a Path,
    last_draw: std::time::Instant,
    pub faces: Option<&'a Faces>,
}

impl<'a> Progress<'a> {
    pub fn new(quiet: bool, name: &'a str, store: &'a Path) -> Progress<'a> {
        Progress {
            live: !quiet && std::io::stderr().is_terminal(),
            name,
            store,
            last_draw: std::time::Instant::now(),
            faces: None,
        }
    }

    fn draw(&self, at: &StepAt, elapsed: f64, rps: u64) {
        if !self.live {
            return;
        }
        let left = (at.step_secs - elapsed).max(0.0);
        let done = (elapsed / at.step_secs).clamp(0.0, 1.0);
        let filled = (done * 20.0) as usize;
        eprint!(
            "\r\x1b[2K[{}{}] step {}/{} {} · {} · {} req/s · {} left in step, {} in all",
            "#".repeat(filled),
            ".".repeat(20 - filled),
            at.step.index + 1,
            at.steps,
            at.step.variant(),
            at.step.asks(),
            meshbench_report::thousands(rps),
            human_secs(left),
            human_secs(left + at.left_after_secs)
        );
    }

    fn scope(&self, at: &StepAt) -> Scope {
        Scope {
            experiment: self.name.to_string(),
            step: at.step.index as u32,
            variant: at.step.variant(),
        }
    }

    fn step_info(&self, at: &StepAt) -> StepInfo {
        StepInfo {
            scope: self.scope(at),
            load: at.step.asks(),
            target_rps: at.step.load().and_then(|l| l.rate_rps()),
            steps: at.steps,
            step_secs: at.step_secs,
            left_after_secs: at.left_after_secs,
            started_ms: meshbench_lab::sampler::now_ms(),
        }
    }

    fn clear(&self) {
        if self.live {
            eprint!("\r\x1b[2K");
        }
    }
}

impl Observer for Progress<'_> {
    fn experiment_started(&mut self, id: i64, steps: usize, secs: f64) {
        errln!(
            "experiment {id} '{}': {steps} steps, about {}; results in {}",
            self.name,
            human_secs(secs),
            self.store.display()
        );
    }

    fn step_started(&mut self, at: &StepAt) {
        self.draw(at, 0.0, 0);
        if let Some(f) = self.faces {
            f.hub.step_started(self.step_info(at));
        }
    }

    fn live(&mut self, at: &StepAt, l: &Live, roles: &[(Role, Sample)]) {
        if self.last_draw.elapsed() >= std::time::Duration::from_millis(250) {
            self.last_draw = std::time::Instant::now();
            self.draw(at, l.elapsed_secs, l.last_second_rps);
        }
        // The scope is built only when a second came (every 200 ms otherwise).
        if let Some(f) = self.faces.filter(|_| !l.seconds.is_empty()) {
            f.live(&self.scope(at), l, roles);
        }
    }

    fn warning(&mut self, text: &str) {
        self.clear();
        errln!("warning: {text}");
    }

    fn note(&mut self, text: &str) {
        self.clear();
        errln!("{text}");
    }

    fn step_finished(&mut self, at: &StepAt, record: &StepRecord) {
        self.clear();
        if let Some(f) = self.faces {
            f.hub.step_finished(&self.scope(at));
        }
        if record.error == Some(StepFailure::StoppedBeforeLoad) {
            // A stop is not the target's failure: said as what happened, once.
            errln!(
                "step {}/{} ({}, {}) stopped before its load: nothing measured",
                at.step.index + 1,
                at.steps,
                at.step.variant(),
                at.step.asks(),
            );
        } else if record.failed() {
            errln!(
                "step {}/{} ({}, {}) failed: {}",
                at.step.index + 1,
                at.steps,
                at.step.variant(),
                at.step.asks(),
                record
                    .error
                    .as_ref()
                    .map_or_else(|| "unknown".into(), StepFailure::to_string)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_parts_read_as_a_person_writes_them() {
        // Issue 33: an Istio gateway's setup estimate was printed as "~6.357142857142857s".
        assert_eq!(step_secs(6.357142857142857), "6.4s");
        assert_eq!(step_secs(1.0), "1s");
        assert_eq!(step_secs(0.5), "0.5s");
        assert_eq!(step_secs(15.0), "15s");
        assert_eq!(step_secs(0.0), "0s");
        assert_eq!(step_secs(90.0), "1m30s");
    }

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
