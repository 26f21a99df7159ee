//! What a change costs the traffic, read from the changes pairs of an experiment: each gateway
//! step with changes against the same step without them (repeats merged as histograms, the
//! added tail tested as every other difference is, `crate::headline::delta`), and per kind of
//! change its errors per change and how long it took to be served.

use std::collections::BTreeMap;

use meshbench_results::change::{ChangeRecord, ErrorsByKind};
use meshbench_results::{ChangeKind, LoadPoint};
use meshbench_store::StoredStep;

use crate::headline::{delta, Delta};
use crate::invalid::Invalid;
use crate::runs::{group, Group, Run};
use crate::verdict::Margin;

/// The percentiles whose added latency a change is judged by.
pub const TAIL: [f64; 2] = [0.99, 0.999];

/// One gateway's changes at one load, against itself without them.
#[derive(Debug, Clone)]
pub struct ChangeCost {
    /// The variant without changes (`gateway nginx`).
    pub variant: String,
    pub load: LoadPoint,
    /// How the gateway was told (`nginx -s reload`).
    pub told_by: String,
    /// Per kind of change, in the kinds' order.
    pub kinds: Vec<KindCost>,
    /// Added p99 and p99.9 with the changes, over the paired steps without them.
    pub added: Vec<Delta>,
    /// Added maximum (merged histograms; no test: one request is no distribution).
    pub added_max_ms: f64,
    /// The self-check against the runs of both sides.
    pub invalid: Option<Invalid>,
    /// Connections the load opened per second in the steps without changes (their mean):
    /// what a change's seconds open anyway (a load with fewer free connections than names
    /// re-aims some every second).
    pub still_connections_per_sec: Option<f64>,
}

impl ChangeCost {
    /// Connections opened per change of kind `k` beyond what its seconds open without changes:
    /// those the gateway closed (or refused) and the load opened again. `None` without the
    /// steps' connection rate.
    pub fn extra_connections_per_change(&self, k: &KindCost) -> Option<f64> {
        let still = self.still_connections_per_sec?;
        let extra = k.connections_opened as f64 - still * k.seconds as f64;
        Some(extra / k.read.max(1) as f64)
    }

    /// Failed requests per change, every kind of change together: what the ranking orders by.
    pub fn errors_per_change(&self) -> f64 {
        let errors: u64 = self.kinds.iter().map(KindCost::error_count).sum();
        let changes: usize = self.kinds.iter().map(|k| k.changes).sum();
        errors as f64 / changes.max(1) as f64
    }
}

/// The changes of one kind, over every repeat of a pair.
#[derive(Debug, Clone, PartialEq)]
pub struct KindCost {
    pub kind: ChangeKind,
    pub changes: usize,
    /// Failed requests in the changes' seconds, by kind, summed over the changes.
    pub errors: ErrorsByKind,
    /// From written to served, ms, of each change served.
    pub served_ms: Vec<f64>,
    /// Changes the probe never saw served before the next one (or its bound).
    pub never_served: usize,
    /// Changes that could not be told (or probed).
    pub failed: usize,
    /// Connections the load opened in the seconds of the changes read (those whose seconds
    /// had requests), how many seconds those were and how many changes.
    pub connections_opened: u64,
    pub seconds: u64,
    pub read: usize,
}

impl KindCost {
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn errors_per_change(&self) -> f64 {
        self.error_count() as f64 / self.changes.max(1) as f64
    }

    /// The q-quantile of the time to served, ms (`None`: none was served).
    pub fn served_at(&self, q: f64) -> Option<f64> {
        let mut v = self.served_ms.clone();
        v.sort_by(f64::total_cmp);
        meshbench_stats::quantile(&v, q)
    }
}

/// Every changes pair of `steps`, in the order the variants ran.
pub fn by_pair(steps: &[StoredStep], margin: Margin) -> Vec<ChangeCost> {
    let changed =
        |s: &StoredStep, yes: bool| s.step.changes.as_ref().is_some_and(|c| c.changed() == yes);
    let side = |yes: bool| -> Vec<Group> {
        group(
            steps
                .iter()
                .filter(|s| changed(s, yes))
                .filter_map(Run::from_step)
                .collect(),
        )
    };
    let (still, with) = (side(false), side(true));
    with.into_iter()
        .filter_map(|b| {
            let base = meshbench_results::change::still_variant(&b.variant)?;
            let a = still
                .iter()
                .find(|a| a.variant == base && a.load == b.load && a.cpu == b.cpu)?;
            let records: Vec<(&str, &ChangeRecord)> = steps
                .iter()
                .filter(|s| b.runs.iter().any(|r| r.step_id == Some(s.id)))
                .filter_map(|s| s.step.changes.as_ref())
                .flat_map(|c| c.changes.iter().map(move |r| (c.told_by.as_str(), r)))
                .collect();
            let told_by = records.first().map_or("", |(t, _)| t).to_string();
            let rates: Vec<f64> = (steps.iter())
                .filter(|s| a.runs.iter().any(|r| r.step_id == Some(s.id)))
                .filter_map(|s| s.step.result.as_ref())
                .map(|r| r.connections.rate_per_sec)
                .collect();
            let still_connections_per_sec =
                (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64);
            Some(ChangeCost {
                variant: base.to_string(),
                load: b.load,
                told_by,
                kinds: kinds(records.iter().map(|(_, r)| *r)),
                added: TAIL.iter().map(|&q| delta(a, &b, q, margin)).collect(),
                added_max_ms: (b.merged.max() as f64 - a.merged.max() as f64) / 1000.0,
                invalid: Invalid::of_groups([a, &b]),
                still_connections_per_sec,
            })
        })
        .collect()
}

/// The records gathered per kind, in the kinds' order.
fn kinds<'a>(records: impl Iterator<Item = &'a ChangeRecord>) -> Vec<KindCost> {
    let mut by: BTreeMap<ChangeKind, KindCost> = BTreeMap::new();
    for r in records {
        let k = by.entry(r.kind).or_insert_with(|| KindCost {
            kind: r.kind,
            changes: 0,
            errors: ErrorsByKind::new(),
            served_ms: Vec::new(),
            never_served: 0,
            failed: 0,
            connections_opened: 0,
            seconds: 0,
            read: 0,
        });
        k.changes += 1;
        // Seconds past the window's end (a change pushed there by the one before) read nothing.
        if r.requests > 0 {
            k.read += 1;
            k.connections_opened += r.connections_opened;
            k.seconds += u64::from(r.seconds.1.saturating_sub(r.seconds.0)) + 1;
        }
        for (kind, n) in &r.errors {
            *k.errors.entry(kind.clone()).or_default() += n;
        }
        match (r.served_ms, &r.failed) {
            (_, Some(_)) => k.failed += 1,
            (Some(ms), None) => k.served_ms.push(ms),
            (None, None) => k.never_served += 1,
        }
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_results::change::ChangeFigures;
    use meshbench_results::histogram::{encode_histogram, new_histogram};
    use meshbench_results::{Protocol, StepKind, StepParams, Topology};
    use meshbench_store::StepRecord;

    fn step(id: i64, variant: &str, changes: Vec<ChangeRecord>) -> StoredStep {
        let mut r = meshbench_results::fixtures::run_result();
        let mut h = new_histogram();
        h.record_n(1000, 1000).unwrap();
        r.histogram.latency_us = encode_histogram(&h);
        // Without changes the load opens 10 connections a second.
        r.connections.rate_per_sec = 10.0;
        let mut s = StepRecord::new(id as u32, StepParams::open(100.0, 4, Protocol::Http1));
        s.set_result(r);
        s.kind = Some(StepKind::Chain(Topology::Gateway));
        s.variant = variant.into();
        s.changes = Some(ChangeFigures {
            told_by: "nginx -s reload".into(),
            changes,
        });
        StoredStep { id, step: s }
    }

    fn route(seconds: (u32, u32), requests: u64, connections_opened: u64) -> ChangeRecord {
        ChangeRecord {
            kind: ChangeKind::Route,
            what: "route".into(),
            written_ms: f64::from(seconds.0) * 1000.0,
            told_ms: 1.0,
            served_ms: Some(50.0),
            failed: None,
            seconds,
            requests,
            errors: ErrorsByKind::new(),
            p99_us: 0,
            p999_us: 0,
            max_us: 0,
            connections_opened,
            connections_failed: 0,
            probes: 0,
            gateway_cpu_peak_millicores: None,
            gateway_memory_peak_mib: None,
        }
    }

    #[test]
    fn a_kinds_extra_connections_are_those_above_what_its_seconds_open_without_changes() {
        // Two changes of 2 s each open 36 and 28 where 4 s without changes open 40: 24 more,
        // 12 per change; one pushed past the window's end read no request and counts nothing.
        let steps = [
            step(1, "gateway nginx", Vec::new()),
            step(
                2,
                "gateway nginx changes",
                vec![
                    route((2, 3), 200, 36),
                    route((4, 5), 200, 28),
                    route((6, 6), 0, 0),
                ],
            ),
        ];
        let costs = by_pair(&steps, Margin::DEFAULT);
        assert_eq!(costs.len(), 1, "{costs:?}");
        let c = &costs[0];
        assert_eq!(c.still_connections_per_sec, Some(10.0));
        let k = &c.kinds[0];
        assert_eq!(
            (k.changes, k.read, k.seconds, k.connections_opened),
            (3, 2, 4, 64)
        );
        let extra = c.extra_connections_per_change(k).unwrap();
        assert!((extra - 12.0).abs() < 1e-9, "{extra}");
    }
}
