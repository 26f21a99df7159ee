//! The capacity search with real steps. [`meshbench_analysis::capacity::Search`] decides which
//! rate to try next; each rate is a step the caller runs and stores (a URL step or a lab step:
//! `run_at`), and the stored step becomes a [`Probe`]: the SLO checked on the step's own
//! headline, the carried rate, whether the generator saturated. [`url_step`] and [`lab_step`]
//! are the two kinds of step. Each step is also handed the fastest answer the target gave at a
//! lower rate: a step past the target's limit starts (after its warm-up) with the target's
//! queue full, so only the earlier steps show the target's own speed, and the step's
//! self-check needs it to tell the target's limit from too few connections.

use meshbench_analysis::capacity::{Answer, Next, Probe, Search, Settings};
use meshbench_analysis::headline::observe;
use meshbench_analysis::threshold::{self, Threshold};
use meshbench_analysis::{group, Headline, Run};
use meshbench_engine::{Live, LoadSpec};
use meshbench_experiment::{Experiment, Step};
use meshbench_results::{StepFailure, StepParams};
use meshbench_store::StepRecord;

use crate::{
    measure, now_rfc3339, Beside, LoadOptions, LoadSource, Observer, RunnerError, Session, StepAt,
    StepRunner,
};

/// How a search ended.
#[derive(Debug)]
pub struct Outcome {
    /// `None` when it was stopped (Ctrl-C, SIGTERM) before an answer.
    pub answer: Option<Answer>,
    /// Every step it measured, in order.
    pub probes: Vec<Probe>,
}

impl Outcome {
    /// The highest rate that passed so far.
    pub fn best(&self) -> Option<f64> {
        self.probes
            .iter()
            .filter(|p| p.passed())
            .map(|p| p.rate)
            .reduce(f64::max)
    }
}

/// Runs the search: `run_at(session, rate, step number, fastest answer at a lower rate)`
/// measures and stores one step and returns it; `on_probe` sees each step's verdict as it
/// comes.
pub fn search(
    settings: Settings,
    slo: &[Threshold],
    session: &mut Session,
    mut run_at: impl FnMut(&mut Session, f64, usize, Option<u64>) -> Result<StepRecord, RunnerError>,
    mut on_probe: impl FnMut(usize, &Probe),
) -> Result<Outcome, RunnerError> {
    let mut s = Search::new(settings);
    // (rate, fastest answer) of every step that had one.
    let mut fastest: Vec<(f64, u64)> = Vec::new();
    let answer = loop {
        let (rate, confirmation) = match s.next() {
            Next::Done(a) => break Some(a),
            Next::Run { rate, confirmation } => (rate, confirmation),
        };
        let n = s.probes.len();
        let lower = fastest
            .iter()
            .filter(|&&(at, _)| at < rate)
            .map(|&(_, us)| us)
            .min();
        let record = run_at(session, rate, n, lower)?;
        if let Some(r) = record
            .result
            .as_ref()
            .filter(|r| r.service_time_us.count > 0)
        {
            fastest.push((rate, r.service_time_us.min));
        }
        if session.stopped() {
            break None;
        }
        let p = probe(rate, confirmation, &record, slo).ok_or_else(|| RunnerError::Unmeasured {
            step: n + 1,
            rate,
            why: record
                .error
                .as_ref()
                .map_or_else(|| "no result".into(), StepFailure::to_string),
        })?;
        on_probe(n, &p);
        s.observe(p);
    };
    Ok(Outcome {
        answer,
        probes: s.probes,
    })
}

/// What a stored step showed the search; `None` when it measured nothing.
pub fn probe(
    rate: f64,
    confirmation: bool,
    record: &StepRecord,
    slo: &[Threshold],
) -> Option<Probe> {
    let result = record.result.clone()?;
    let generator_limit = result.generator.check.generator_limit();
    let achieved = result.throughput_rps;
    let mut run = Run::from_result("step", result).ok()?;
    run.usage = record.usage.clone();
    let h = Headline::of(group(vec![run]));
    let failures: Vec<String> = slo
        .iter()
        .map(|t| threshold::check(t, observe(&h, t.metric)))
        .filter(|o| !o.passed)
        .map(|o| o.to_string())
        .collect();
    Some(Probe {
        rate,
        achieved_rps: achieved,
        slo_met: failures.is_empty() && !record.failed(),
        generator_limit,
        failures,
        confirmation,
    })
}

/// One step of a search against a URL: `options` at `rate`, measured with no rig, stored as
/// step `n` (topology `url`, variant `capacity`); `lower` is the fastest answer of an earlier
/// step at a lower rate.
pub fn url_step(
    session: &mut Session,
    options: &LoadOptions,
    rate: f64,
    n: usize,
    lower: Option<u64>,
    mut on_live: impl FnMut(&Live),
) -> Result<StepRecord, RunnerError> {
    let mut options = options.clone();
    options.pace.rate_rps = Some(rate);
    let params = StepParams::open(rate, options.connections as u32, options.connect.protocol);
    let mut record = StepRecord::new(n as u32, params);
    record.variant = "capacity".into();
    record.label = format!("capacity_rps_{rate}_c_{}", options.connections);
    record.started_at = now_rfc3339();
    match options.resolve() {
        Ok(spec) => match measure(
            LoadSource::Local,
            &LoadSpec {
                service_at_lower_load_us: lower,
                ..spec
            },
            Beside::default(),
            crate::LoadOrigin::default(),
            session.stop.clone(),
            |l, _| on_live(l),
        ) {
            Ok(m) => record.set_result(m.result),
            Err(err) => record.fail(StepFailure::LoadGeneratorFailed(err.to_string())),
        },
        Err(err) => record.fail(StepFailure::LoadNotSetUp(err.to_string())),
    }
    Ok(session.record(record)?.clone())
}

/// One step of a search on an experiment's rig: the plan's first step (`template`) at `rate`,
/// as a lab step (fresh rig, limits, sampling), stored as step `n`; `lower` as for
/// [`url_step`].
#[allow(clippy::too_many_arguments)]
pub fn lab_step(
    session: &mut Session,
    lab: &StepRunner,
    e: &Experiment,
    template: &Step,
    rate: f64,
    n: usize,
    lower: Option<u64>,
    observer: &mut dyn Observer,
) -> Result<StepRecord, RunnerError> {
    let step = template.at_rate(n, rate);
    let at = StepAt {
        step: &step,
        steps: n + 1,
        step_secs: e.warmup_secs + e.duration_secs,
        left_after_secs: 0.0,
        service_at_lower_load_us: lower,
    };
    Ok(lab.step(session, e, &at, observer)?.clone())
}
