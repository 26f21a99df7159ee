//! `meshbench run URL`: the flags become [`LoadOptions`] (units and signs checked here, the rest
//! by [`LoadOptions::resolve`], all before any traffic), the runner measures it with a live
//! progress line, and the summary and JSON are written.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use meshbench_engine::{LoadSpec, Stop, StopAt};
use meshbench_live::Done;
use meshbench_results::{LoadPoint, RunResult};
use meshbench_runner::{LoadOptions, LoadSource, TargetSource};

use super::common::faces::{run_step, Faces};
use super::common::fleet;
use super::common::load_flags::{apply_pacing_flags, apply_request_flags, positive, resolve};
use super::common::progress::ProgressLine;
use super::common::signals::Signals;
use super::common::thresholds::{check_headline, parse_thresholds};
use super::common::units::parse_duration;
use crate::cli::RunArgs;
use crate::{exit, usage};

pub fn execute(args: RunArgs) -> Result<u8> {
    let options = load_options(&args)?;
    let spec = resolve(&options)?;
    let thresholds = parse_thresholds(&args.thresholds)?;
    let faces = Faces::start(&args.live)?;
    let signals = Signals::install()?;
    let fleet = fleet::gather(&args.agents, None, &signals)?.map(Mutex::new);
    let load_source = match &fleet {
        Some(fleet) => LoadSource::Agents {
            fleet,
            options: &options,
        },
        None => LoadSource::Local,
    };
    let live = !args.quiet && std::io::stderr().is_terminal();
    let result = measure(
        load_source,
        &spec,
        signals.stop.clone(),
        live,
        faces.as_ref(),
    );
    if let Some(fleet) = &fleet {
        for note in fleet.lock().expect("the run is over").take_notes() {
            errln!("meshbench: {note}");
        }
    }
    let linger = faces.map(|faces| {
        let outcome = match &result {
            Ok(r) if r.partial => "interrupted".to_string(),
            Ok(_) => "done".to_string(),
            Err(e) => format!("failed: {e}"),
        };
        faces.finish(Done {
            report: None,
            outcome,
        })
    });
    let result = result?;
    if let Some(path) = &args.json {
        write_json(path, &result)?;
    }
    out!("{}", meshbench_report::summary(&result));
    // Every request failed (or none finished): the summary's first finding says what failed;
    // the figures are kept in the JSON, but the run measured nothing (exit 1).
    let measured_nothing = result.generator.check.measured_nothing();
    let mut passed = true;
    if !thresholds.is_empty() {
        let run = meshbench_analysis::Run::from_result("run", result)
            .map_err(|e| anyhow::anyhow!("the result's histogram: {e}"))?;
        let h = meshbench_analysis::Headline::of(meshbench_analysis::group(vec![run]));
        passed = check_headline(&thresholds, &h);
    }
    let _ = std::io::stdout().flush();
    // Read before lingering: a Ctrl-C that ends the linger does not change how the run went.
    let code = signals.exit_code();
    // A signal that stopped the run asked to leave: the page does not linger then.
    if let Some(linger) = linger.filter(|_| code.is_none()) {
        linger.wait();
    }
    Ok(code.unwrap_or(if passed && !measured_nothing {
        exit::OK
    } else {
        exit::FAILED
    }))
}

/// Measures a spec with no system under test watched, optionally drawing a progress line and
/// feeding live faces.
fn measure(
    load_source: LoadSource,
    spec: &LoadSpec,
    stop: Stop,
    live: bool,
    faces: Option<&Faces>,
) -> Result<RunResult> {
    let mut line = ProgressLine::new(live);
    let step = faces.map(|f| {
        // Named as every load is (a run's target chooses its response size).
        let load = LoadPoint {
            offer: spec.offer,
            connections: u32::try_from(spec.connections).unwrap_or(u32::MAX),
            in_flight: spec.in_flight.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            response_bytes: None,
        };
        let info = run_step(load.rate_rps(), load.to_string(), spec.planned_secs());
        f.hub.step_started(info.clone());
        info.scope
    });
    let measured = meshbench_runner::measure(
        load_source,
        spec,
        Default::default(),
        Default::default(),
        stop,
        |l, roles| {
            line.draw(l);
            if let (Some(f), Some(scope)) = (faces, &step) {
                f.hub
                    .seconds(scope, l, roles, meshbench_lab::sampler::now_ms());
            }
        },
    );
    if let (Some(f), Some(scope)) = (faces, &step) {
        f.hub.step_finished(scope);
    }
    line.clear();
    Ok(measured?.result)
}

pub fn write_json(path: &Path, result: &RunResult) -> Result<()> {
    let text = serde_json::to_string_pretty(result)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// `meshbench run`'s flags as load options. Units and signs are checked here; everything
/// else when the options are resolved.
pub fn load_options(a: &RunArgs) -> Result<LoadOptions> {
    let source = match &a.targets {
        Some(path) => TargetSource::File(path.clone()),
        None => TargetSource::Url(a.url.clone().unwrap_or_default()),
    };
    let mut o = LoadOptions::new(source);
    apply_request_flags(&mut o, &a.request)?;
    o.connections = a.connections;
    if a.concurrency.is_some() {
        errln!(
            "note: --concurrency is an old name, read as --in-flight: write --in-flight instead"
        );
    }
    let in_flight = match (a.in_flight, a.concurrency) {
        (Some(n), None) => Some(("--in-flight", n)),
        (None, Some(n)) => Some(("--concurrency", n)),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(usage(
                "give --in-flight only (--concurrency is its old name)",
            ))
        }
    };
    o.pace.in_flight = in_flight
        .map(|(flag, n)| positive(flag, n).map(|n| n as usize))
        .transpose()?;
    o.pace.rate_rps = a.rate;
    apply_pacing_flags(&mut o, &a.pacing)?;
    o.window.stop = match (&a.duration, a.requests) {
        (Some(_), Some(_)) => return Err(usage("give --duration or --requests, not both")),
        (_, Some(n)) => StopAt::Requests(positive("--requests", n)?),
        (d, None) => StopAt::Duration(parse_duration("--duration", d.as_deref().unwrap_or("10s"))?),
    };
    o.window.warmup = parse_duration("--warmup", &a.warmup)?;
    Ok(o)
}
