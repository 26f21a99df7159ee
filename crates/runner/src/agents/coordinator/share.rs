//! One step's bookkeeping per agent ([`AgentShare`]: its segment, clock, seconds, part, loss) and
//! the step's result merged from the shares, exactly as `engine::run` merges its threads.

use std::time::SystemTime;

use meshbench_engine::recorder::Recorder;
use meshbench_engine::{Gathered, LoadSpec, Part, Segment};
use meshbench_results::{
    run::{AgentPart, Agents, Lost},
    RunResult,
};

use super::Member;
use crate::LoadOptions;

/// What the step's agents have been told so far: to stop (and drain), and to hurry.
#[derive(Default)]
pub(super) struct Told {
    pub(super) stop: bool,
    pub(super) hurry: bool,
}

/// One agent's place in a step: its segment, its clock, what it reported, whether it was lost.
pub(super) struct AgentShare {
    pub(super) index: usize,
    pub(super) name: String,
    pub(super) address: String,
    pub(super) segment: Segment,
    pub(super) connections: usize,
    pub(super) offset_ns: i64,
    pub(super) round_trip_ns: u64,
    /// What its seconds added up to (all that is known of it if it is lost).
    pub(super) seen: Recorder,
    pub(super) part: Option<Part>,
    /// Why and when (`after_secs`: seconds after the start) it was lost.
    pub(super) lost: Option<Lost>,
}

impl AgentShare {
    pub(super) fn new(
        m: &Member,
        segment: Segment,
        (offset_ns, round_trip_ns): (i64, u64),
        o: &LoadOptions,
    ) -> AgentShare {
        AgentShare {
            index: segment.index as usize,
            name: m.name.clone(),
            address: m.address.clone(),
            segment,
            connections: segment.share(o.connections as u64) as usize,
            offset_ns,
            round_trip_ns,
            seen: Recorder::new(),
            part: None,
            lost: None,
        }
    }

    /// It is lost, for `reason`, `after_secs` seconds after the start.
    pub(super) fn lose(&mut self, reason: String, after_secs: f64) {
        self.lost = Some(Lost { after_secs, reason });
    }
}

/// The step's result from its shares: the parts that came (and for lost agents, their seconds)
/// merged by the engine, with each agent's share and the start's skew.
pub(super) fn merge(
    spec: &LoadSpec,
    shares: Vec<AgentShare>,
    gathered: Gathered,
    start: u64,
    wall_start: SystemTime,
    interrupted: bool,
) -> RunResult {
    let firsts = first_sends(&shares);
    let earliest = firsts.iter().flatten().min().copied();
    let latest = firsts.iter().flatten().max().copied();
    let mut reports = Vec::new();
    let mut parts = Vec::new();
    let mut any_lost = false;
    for (s, began) in shares.into_iter().zip(&firsts) {
        any_lost |= s.lost.is_some();
        let (report, part) = report_and_part(spec, s, (start, wall_start), began.zip(earliest));
        reports.push(report);
        parts.push(part);
    }
    let mut result = meshbench_engine::merge(
        spec,
        &parts,
        gathered.into_timeline(),
        wall_start,
        interrupted,
    );
    result.partial |= any_lost;
    for p in &reports {
        if let Some(l) = &p.lost {
            result.generator.warnings.push(format!(
                "agent {} was lost {:.1} s after the start ({}): what it reported before is counted, the rest of its segment was not sent",
                p.name, l.after_secs, l.reason
            ));
        }
    }
    result.agents = Some(Agents {
        start_skew_us: earliest
            .zip(latest)
            .map_or(0.0, |(e, l)| ((l - e) as f64 / 100.0).round() / 10.0),
        clock_error_us: reports
            .iter()
            .map(|r| r.round_trip_us / 2.0)
            .fold(0.0, f64::max),
        agents: reports,
    });
    result
}

/// When each agent's schedule really began (its clock's zero plus how late its first send
/// was), on the coordinator's clock: an open loop's segments start at their own first
/// arrivals, which is the plan, not skew. `None` for an agent that sent nothing it reported.
fn first_sends(shares: &[AgentShare]) -> Vec<Option<i64>> {
    shares
        .iter()
        .map(|s| {
            let p = s.part.as_ref()?;
            let late = p.first_send_late_ns?;
            Some((p.start_monotonic_ns + late) as i64 - s.offset_ns)
        })
        .collect()
}

/// One place's line in the step's agents and the part it adds to the merge (for a lost agent,
/// [`lost_part`]). `(start, wall_start)`: the step's start on the monotonic and the wall clock;
/// `began`: when its schedule began and when the earliest one did, both on the coordinator's
/// clock.
fn report_and_part(
    spec: &LoadSpec,
    s: AgentShare,
    (start, wall_start): (u64, SystemTime),
    began: Option<(i64, i64)>,
) -> (AgentPart, Part) {
    let threads = s.part.as_ref().map_or(0, |p| p.workers.len());
    let part = s
        .part
        .unwrap_or_else(|| lost_part(spec, &s.seen, s.lost.as_ref(), start, wall_start));
    let rec = &part.recorder;
    let report = AgentPart {
        name: s.name,
        address: s.address,
        segment: s.segment.index,
        of: s.segment.count,
        connections: s.connections,
        threads,
        requests: rec.counts.total(),
        errors: rec.counts.failed(),
        p50_us: rec.latency.value_at_quantile(0.5),
        p99_us: rec.latency.value_at_quantile(0.99),
        cpu_secs: (part.cpu_secs * 1000.0).round() / 1000.0,
        clock_offset_us: (s.offset_ns as f64 / 100.0).round() / 10.0,
        round_trip_us: (s.round_trip_ns as f64 / 100.0).round() / 10.0,
        start_us: began.map(|(f, e)| ((f - e) as f64 / 100.0).round() / 10.0),
        lost: s.lost.map(|l| Lost {
            after_secs: (l.after_secs * 1000.0).round() / 1000.0,
            reason: l.reason,
        }),
    };
    (report, part)
}

/// The part of an agent that never sent its own: the seconds it was `seen` to add up to, as
/// one worker whose window ran from the warm-up's end until it was `lost`, so that a step
/// whose every agent was lost (a route cut) still spans the seconds they sent.
fn lost_part(
    spec: &LoadSpec,
    seen: &Recorder,
    lost: Option<&Lost>,
    start: u64,
    wall_start: SystemTime,
) -> Part {
    let measured_ns = lost.map_or(0, |l| {
        ((l.after_secs - spec.warmup.as_secs_f64()).max(0.0) * 1e9) as u64
    });
    Part {
        recorder: seen.clone(),
        workers: vec![meshbench_engine::WorkerFigures {
            window_ns: measured_ns,
            cpu_ns: 0,
            run_delay_ns: None,
            spin_ns: 0,
            slack_ns: 0,
            ahead_ns: 0,
            wake_cost_ns: 0,
        }],
        cpu_secs: 0.0,
        rss_max_bytes: 0,
        start_monotonic_ns: start,
        first_send_late_ns: None,
        wall_start,
        // Lost, not stopped: the warning in `merge` says so.
        interrupted: false,
        timeline: Vec::new(),
        cpu_quota: None,
    }
}
