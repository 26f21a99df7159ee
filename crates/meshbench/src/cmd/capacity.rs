//! `meshbench capacity URL|--experiment FILE --slo ...`: runs the capacity search of
//! [`meshbench_analysis::capacity`] with real open-loop steps, against a URL (each step is what
//! `meshbench run --rate R` measures) or against an experiment's rig (each step is a lab step:
//! fresh rig, limits, sampling). Every step is stored as a step of a `capacity` experiment, so
//! the search can be read back, compared and reported like any other.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use meshbench_analysis::capacity::{Answer, Settings};
use meshbench_analysis::threshold::{self, Threshold};
use meshbench_engine::StopAt;
use meshbench_experiment::{Experiment, Plan};
use meshbench_results::self_check::Cause;
use meshbench_results::{LoopMode, StepFailure, StepKind};
use meshbench_runner::capacity;
use meshbench_runner::{
    new_experiment, now_rfc3339, LoadOptions, RunnerError, Session, Site, StepRunner,
};
use meshbench_store::{NewExperiment, StepRecord};

use super::common::experiment_file;
use super::common::load_flags::{apply_pacing_flags, apply_request_flags, resolve};
use super::common::progress::{Progress, ProgressLine};
use super::common::session::{exit_code, print_finished};
use super::common::signals::Signals;
use super::common::units::{parse_duration, parse_percent};
use crate::cli::{CapacityArgs, PassedRequestFlags};
use crate::{exit, usage};

pub fn execute(args: CapacityArgs) -> Result<u8> {
    let (slo, settings) = parse_goal(&args)?;
    let store_path = args
        .store
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    let signals = Signals::install()?;
    let goal = Goal {
        settings,
        slo: &slo,
        signals: &signals,
    };
    match &args.experiment {
        Some(file) => search_experiment(&args, file, &goal, &store_path),
        None => search_url(&args, &goal, &store_path),
    }
}

/// The SLO and the search's settings from the flags, each checked before anything starts.
fn parse_goal(args: &CapacityArgs) -> Result<(Vec<Threshold>, Settings)> {
    let mut slo = threshold::parse_list(args.slo.as_deref().unwrap_or_default())
        .map_err(|e| usage(e.to_string()))?;
    if let Some(percent) = args.cpu_under {
        if args.experiment.is_none() {
            return Err(usage(
                "--cpu-under needs --experiment FILE: a URL's proxies are not measured",
            ));
        }
        if !(percent > 0.0 && percent <= 100.0) {
            return Err(usage(format!(
                "--cpu-under {percent}: give a percentage of the CPU limit above 0 and at most 100, like 90"
            )));
        }
        slo.push(
            format!("proxy_cpu_share<{percent}%")
                .parse()
                .map_err(|e: threshold::ThresholdError| usage(e.to_string()))?,
        );
    }
    if slo.is_empty() {
        return Err(usage(
            "--slo is empty; give what a rate must meet, like 'p99<10ms,errors<0.1%'",
        ));
    }
    let precision = parse_percent("--precision", &args.precision)?;
    if !(0.001..=0.5).contains(&precision) {
        return Err(usage("--precision must be from 0.1% to 50%"));
    }
    if !(args.start > 0.0 && args.max_rps >= args.start) {
        return Err(usage(
            "--start must be above 0 and --max-rps at least --start",
        ));
    }
    let settings = Settings {
        start: args.start,
        ceiling: args.max_rps,
        floor: (args.start / 1024.0).max(1.0),
        precision,
        confirmations: 2,
    };
    Ok((slo, settings))
}

/// The search against an experiment's rig: each step a lab step of its one topology.
fn search_experiment(
    args: &CapacityArgs,
    file: &Path,
    goal: &Goal,
    store_path: &Path,
) -> Result<u8> {
    let mut e =
        experiment_file::load(file, &args.set, meshbench_runner::setup::Provision::Install)?;
    let topology = pick_topology(&e, args.topology)?;
    e.load.mode = LoopMode::Open;
    e.topologies = vec![topology];
    e.name = format!("capacity {}", e.name);
    if args.cpu_under.is_some() {
        cpu_limited(&e, topology)?;
    }
    e.description = format!(
        "capacity search for {} ({})",
        goal.slo_text(),
        topology.name()
    );
    let template = Plan::compile(&e)
        .steps
        .into_iter()
        .next()
        .context("the experiment has no step")?;
    let mut session = Session::begin(store_path, &new_experiment(&e), goal.signals.stop.clone())?;
    let lab = StepRunner::new(&e, Site::Here)?;
    let mut progress = Progress::new(args.quiet, &e.name, store_path);
    let found = goal.search(&mut session, |session, rate, n, lower| {
        capacity::lab_step(session, &lab, &e, &template, rate, n, lower, &mut progress)
    });
    conclude(session, goal.signals, found)
}

/// `--cpu-under`'s rig: a proxy on the path, under a CPU limit.
fn cpu_limited(e: &Experiment, topology: StepKind) -> Result<()> {
    if topology == StepKind::Chain(meshbench_results::Topology::Baseline) {
        return Err(usage(
            "--cpu-under: the baseline has no proxy on its path; pick another --topology",
        ));
    }
    if e.limits.proxy.cpus.is_empty() && e.limits.tunnel.cpus.is_empty() {
        return Err(usage(
            "--cpu-under needs a CPU limit on the proxies: set limits.proxy.cpus (the gateway, the sidecars, the waypoint) or limits.tunnel.cpus, e.g. --set 'limits.proxy.cpus=[1]'",
        ));
    }
    // A CPU figure is the difference of two samples: a step with one has none (it would read
    // as an idle proxy and pass).
    if e.duration_secs * 1000.0 < 2.0 * e.sample_interval_ms as f64 {
        return Err(usage(format!(
            "--cpu-under: a step of duration_secs {} takes fewer than two CPU samples {} ms apart; lengthen the step or lower sample_interval_ms",
            e.duration_secs, e.sample_interval_ms
        )));
    }
    Ok(())
}

/// The topology `--topology` names, or the experiment's first.
fn pick_topology(e: &Experiment, wanted: Option<StepKind>) -> Result<StepKind> {
    Ok(match wanted {
        Some(t) => *e.topologies.iter().find(|x| **x == t).ok_or_else(|| {
            usage(format!(
                "--topology {t}: the experiment has {}",
                e.topologies
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?,
        None => e.topologies[0],
    })
}

/// The search against a URL: each step what `meshbench run --rate R` measures.
fn search_url(args: &CapacityArgs, goal: &Goal, store_path: &Path) -> Result<u8> {
    let url = args.url.clone().unwrap_or_default();
    let base = url_load(args, &url)?;
    let new = url_experiment(args, &url, &base, goal.settings.precision);
    let mut session = Session::begin(store_path, &new, goal.signals.stop.clone())?;
    let live = !args.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let found = goal.search(&mut session, |session, rate, n, lower| {
        let mut line = ProgressLine::new(live);
        let stored = capacity::url_step(session, &base, rate, n, lower, |l| line.draw(l))?;
        line.clear();
        if stored.failed() {
            errln!(
                "step {} ({rate} req/s) failed: {}",
                n + 1,
                stored
                    .error
                    .as_ref()
                    .map_or_else(|| "unknown".into(), StepFailure::to_string)
            );
        }
        Ok(stored)
    });
    conclude(session, goal.signals, found)
}

/// Every step's load against `url` but its rate, from the flags after `--` and the step's
/// window; checked once (at the starting rate) before any traffic.
fn url_load(args: &CapacityArgs, url: &str) -> Result<LoadOptions> {
    let passed = PassedRequestFlags::try_parse_from(&args.run_args).map_err(|err| {
        usage(format!(
            "flags after --: {}",
            err.to_string()
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
        ))
    })?;
    let mut base = LoadOptions::new(meshbench_runner::TargetSource::Url(url.to_string()));
    apply_request_flags(&mut base, &passed.request)?;
    apply_pacing_flags(&mut base, &passed.pacing)?;
    base.connections = args.connections;
    base.window.stop = StopAt::Duration(parse_duration("--step-duration", &args.step_duration)?);
    base.window.warmup = parse_duration("--warmup", &args.warmup)?;
    // Every step's options are checked once before any traffic.
    let mut first = base.clone();
    first.pace.rate_rps = Some(args.start);
    resolve(&first)?;
    Ok(base)
}

/// The stored `capacity` experiment of a search against `url`, its settings as its config.
fn url_experiment(
    args: &CapacityArgs,
    url: &str,
    base: &LoadOptions,
    precision: f64,
) -> NewExperiment {
    let duration = match base.window.stop {
        StopAt::Duration(d) => d,
        StopAt::Requests(_) => Duration::ZERO,
    };
    NewExperiment {
        name: "capacity".into(),
        description: format!(
            "capacity search of {url} for {}",
            args.slo.as_deref().unwrap_or_default()
        ),
        labels: BTreeMap::new(),
        config: serde_json::json!({
            "url": url,
            "slo": args.slo.as_deref().unwrap_or_default(),
            "start": args.start,
            "max_rps": args.max_rps,
            "precision": precision,
            "step_duration_secs": duration.as_secs_f64(),
            "warmup_secs": base.window.warmup.as_secs_f64(),
            "load": base,
        }),
        started_at: now_rfc3339(),
        meshbench_version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// Closes the stored experiment (printing its steps), then the answer.
fn conclude(session: Session, signals: &Signals, found: Result<(u8, String)>) -> Result<u8> {
    let finished = session.finish()?;
    print_finished(&finished);
    let (code, line) = found?;
    outln!("{line}");
    Ok(if code == exit::OK {
        exit_code(signals, &finished)
    } else {
        code
    })
}

/// What the search is for: its settings, the SLO a rate must meet, and the signals that may
/// stop it.
struct Goal<'a> {
    settings: Settings,
    slo: &'a [Threshold],
    signals: &'a Signals,
}

impl Goal<'_> {
    /// What a rate must meet, as the thresholds were written.
    fn slo_text(&self) -> String {
        args_text(self.slo)
    }

    /// Runs the search with `run_at` measuring each rate, printing each step; returns the exit
    /// code and the answer's line.
    fn search(
        &self,
        session: &mut Session,
        run_at: impl FnMut(&mut Session, f64, usize, Option<u64>) -> Result<StepRecord, RunnerError>,
    ) -> Result<(u8, String)> {
        let (slo, signals) = (self.slo, self.signals);
        let outcome = capacity::search(self.settings.clone(), slo, session, run_at, |n, p| {
            errln!(
                "step {:>2} {:>10.1} req/s offered, {:>10.1} carried: {}{}{}",
                n + 1,
                p.rate,
                p.achieved_rps,
                if p.confirmation { "confirmation " } else { "" },
                if p.passed() { "pass" } else { "fail" },
                if p.passed() {
                    String::new()
                } else if let Some(cause) = p.generator_limit {
                    format!(" (the load generator's own check: {})", cause.name())
                } else if !p.failures.is_empty() {
                    format!(" ({})", p.failures.join("; "))
                } else {
                    format!(
                        " (carried less than {:.0} % of the offered rate)",
                        meshbench_analysis::capacity::CARRIED * 100.0
                    )
                }
            );
        })?;
        let id = session.id;
        let steps = outcome.probes.len();
        let best = outcome.best();
        let (code, line) = match outcome.answer {
        None => {
            (
                signals.exit_code().unwrap_or(exit::FAILED),
                format!(
                    "capacity: interrupted after {steps} steps; highest passing rate so far: {}",
                    best.map_or("none".into(), |b| format!("{b} req/s"))
                ),
            )
        }
        Some(Answer::Found {
            rate,
            confirmed,
            refinement_stopped_at,
        }) => (
            exit::OK,
            format!(
                "capacity: {rate} req/s meets {} ({} steps{}{}; experiment {id})",
                args_text(slo),
                steps,
                if confirmed {
                    ", confirmed by a second run"
                } else {
                    "; NOT confirmed: the rate passed once and failed on its confirmation, the boundary is noisy at this precision"
                },
                match refinement_stopped_at {
                    Some(stopped) => format!(
                        "; refined no further than {stopped} req/s, where the load generator limited two runs: the capacity may lie between the two"
                    ),
                    None => String::new(),
                }
            ),
        ),
        Some(Answer::GeneratorLimited { rate, cause }) => (
            exit::FAILED,
            format!(
                "capacity: refused: the load generator itself limited two runs at {rate} req/s ({}), so the target was not what limited them; {} (experiment {id})",
                cause.name(),
                generator_advice(cause)
            ),
        ),
        Some(Answer::BelowFloor { floor }) => (
            exit::FAILED,
            format!(
                "capacity: no rate down to {floor} req/s meets {} (experiment {id})",
                args_text(slo)
            ),
        ),
        Some(Answer::AboveCeiling { ceiling }) => (
            exit::OK,
            format!(
                "capacity: every rate up to --max-rps {ceiling} req/s meets {}; raise --max-rps (experiment {id})",
                args_text(slo)
            ),
        ),
    };
        Ok((code, line))
    }
}

/// What to change when the generator's own `cause` limited a search.
fn generator_advice(cause: Cause) -> &'static str {
    match cause {
        Cause::TimerLateness => {
            "this machine's sleeps end late: pass `-- --idle-strategy hybrid` (or spin), or use a machine with a steadier clock"
        }
        Cause::CpuContention => {
            "other processes took its CPU: pin the generator and the target to CPUs of their own (taskset), or quiet the machine"
        }
        Cause::CpuThrottled => "its CPU quota stopped it: raise the generator's CPU limit",
        _ => "give the generator more cores (-- --threads N), or run agents on more machines",
    }
}

fn args_text(slo: &[Threshold]) -> String {
    slo.iter()
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
