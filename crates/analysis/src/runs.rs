//! The input of every answer: measured runs (a stored step, or a `meshbench run --json` file)
//! with their full latency histogram, per-second points and per-role resource use, grouped by
//! what was measured (variant x load point) so that repeats are merged, never averaged.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use meshbench_results::{
    histogram::{decode_histogram, new_histogram, DecodeError},
    CpuAllotment, LoadPoint, Offer, PlayedBy, Role, RoleUsage, RunResult, Subject,
};
use meshbench_store::StoredStep;

use crate::invalid::{self, Invalid};

/// The four percentiles every answer is given at.
pub const PERCENTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

/// `p50`, `p90`, `p99`, `p99.9`.
pub fn percentile_name(q: f64) -> String {
    let p = q * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("p{}", p.round())
    } else {
        format!("p{}", (p * 1000.0).round() / 1000.0)
    }
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct Run {
    pub step_id: Option<i64>,
    pub repeat: u32,
    /// What it is compared as: its topology, or an external variant's or a file's name.
    pub topology: Subject,
    /// Topology plus the CPU allotment when swept (`both server_proxy=0.5cpu`).
    pub variant: String,
    pub load: LoadPoint,
    /// The swept class and its cores.
    pub cpu: Option<CpuAllotment>,
    pub result: RunResult,
    pub latency: Histogram<u64>,
    pub usage: Vec<RoleUsage>,
}

impl Run {
    /// A stored step; `None` when it failed before measuring (its error is in the store).
    pub fn from_step(stored: &StoredStep) -> Option<Run> {
        let s = &stored.step;
        if s.failed() {
            return None;
        }
        let result = s.result.clone()?;
        Some(Run {
            step_id: Some(stored.id),
            repeat: s.repeat,
            // An external variant plays its own topology: the one named `baseline` is what
            // the others are compared with, as a lab baseline is.
            topology: Subject::of_step(s.kind, &s.variant),
            variant: s.variant.clone(),
            load: s.load_point(),
            cpu: s.params.cpu,
            latency: decode_histogram(&result.histogram.latency_us).ok()?,
            result,
            usage: s.usage.clone(),
        })
    }

    /// A `meshbench run --json` document, named `name`; an error when its latency histogram
    /// does not decode.
    pub fn from_result(name: &str, result: RunResult) -> Result<Run, DecodeError> {
        let latency = decode_histogram(&result.histogram.latency_us)?;
        let s = &result.settings;
        Ok(Run {
            step_id: None,
            repeat: 0,
            topology: Subject::File(name.to_string()),
            variant: name.to_string(),
            load: LoadPoint {
                offer: s.rate_rps.map_or(Offer::Closed, Offer::open),
                connections: s.connections as u32,
                in_flight: s.in_flight.map(|n| n as u32),
                // A run's result does not record the size of the responses it got.
                response_bytes: None,
            },
            cpu: None,
            latency,
            usage: Vec::new(),
            result,
        })
    }

    /// Why the generator's self-check calls this run's figures unfit, if it does.
    pub fn invalid(&self) -> Option<meshbench_results::Cause> {
        invalid::of_result(&self.result)
    }

    /// The per-second values of a percentile, one sample per second of the timeline. Seconds
    /// without requests are left out, and so is a last second holding fewer than half the
    /// requests of the median second: the few responses that close a run are not a second's
    /// percentile (the p99.9 of two requests is their maximum), so they are not a sample of the
    /// same thing as the others.
    pub fn per_second_ms(&self, q: f64) -> Vec<f64> {
        let t = &self.result.timeline;
        let mut counts: Vec<u64> = t.iter().map(|p| p.requests).filter(|&n| n > 0).collect();
        counts.sort_unstable();
        let median = counts.get(counts.len() / 2).copied().unwrap_or(0);
        let partial = t.len() > 1 && t.last().is_some_and(|p| p.requests * 2 < median);
        t[..t.len() - usize::from(partial)]
            .iter()
            .filter(|p| p.requests > 0)
            .filter_map(|p| {
                let us = [
                    (0.5, p.p50_us),
                    (0.9, p.p90_us),
                    (0.99, p.p99_us),
                    (0.999, p.p999_us),
                ]
                .into_iter()
                .find(|(at, _)| (at - q).abs() < 1e-9)?
                .1;
                // Timelines stored before p90/p99.9 were kept have zeros there.
                (us > 0).then_some(us as f64 / 1000.0)
            })
            .collect()
    }
}

/// The distinct items in order of first appearance.
pub fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = Vec::new();
    for i in items {
        if !v.contains(&i) {
            v.push(i);
        }
    }
    v
}

/// One role's resource use in a group: medians over the repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleUse {
    pub role: Role,
    pub program: PlayedBy,
    /// NaN when not measured in any repeat (so are the two below).
    pub cpu_millicores: f64,
    /// Working set where the cgroup reports one, else RSS.
    pub memory_mib: f64,
    /// Received plus sent, bytes per second.
    pub bytes_per_sec: f64,
    pub cpu_limit: Option<f64>,
}

/// Repeats of one measurement (a variant under a load point), merged.
#[derive(Debug, Clone)]
pub struct Group {
    /// What it is compared as (the runs' [`Run::topology`]).
    pub topology: Subject,
    pub variant: String,
    pub load: LoadPoint,
    pub cpu: Option<CpuAllotment>,
    pub runs: Vec<Run>,
    /// Every run's latency histogram added together.
    pub merged: Histogram<u64>,
}

/// The median of the values measured; NaN (printed `-`, left out of fits) when none was: an
/// external role whose query failed in every repeat.
fn median_known(values: impl Iterator<Item = Option<f64>>) -> f64 {
    let known: Vec<f64> = values.flatten().collect();
    if known.is_empty() {
        f64::NAN
    } else {
        median(known)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    meshbench_stats::quantile(&v, 0.5).unwrap_or(0.0)
}

impl Group {
    /// The q-quantile of the merged latency, in milliseconds.
    pub fn latency_ms(&self, q: f64) -> f64 {
        self.merged.value_at_quantile(q) as f64 / 1000.0
    }

    /// Median throughput of the runs (requests per second).
    pub fn throughput(&self) -> f64 {
        median(self.runs.iter().map(|r| r.result.throughput_rps).collect())
    }

    /// Failed requests over all requests of all runs (a fraction).
    pub fn error_ratio(&self) -> f64 {
        let total: u64 = self.runs.iter().map(|r| r.result.requests.total).sum();
        let errors: u64 = self.runs.iter().map(|r| r.result.requests.errors).sum();
        if total == 0 {
            0.0
        } else {
            errors as f64 / total as f64
        }
    }

    /// Whether the generator may have limited any run.
    pub fn generator_saturated(&self) -> bool {
        self.runs.iter().any(|r| r.result.generator.saturated)
    }

    /// What the generator's self-check says against the group's runs: `None` when it calls
    /// none INVALID.
    pub fn invalid(&self) -> Option<Invalid> {
        Invalid::of_groups([self])
    }

    /// The proxies' resource use, medians over the repeats, in the order first seen.
    pub fn proxies(&self) -> Vec<RoleUse> {
        let mut order: Vec<Role> = Vec::new();
        let mut by_role: BTreeMap<Role, Vec<&RoleUsage>> = BTreeMap::new();
        for r in &self.runs {
            for u in r.usage.iter().filter(|u| u.role.is_on_path()) {
                if !order.contains(&u.role) {
                    order.push(u.role.clone());
                }
                by_role.entry(u.role.clone()).or_default().push(u);
            }
        }
        order
            .into_iter()
            .map(|role| {
                let rows = &by_role[&role];
                RoleUse {
                    program: rows[0].program.clone(),
                    cpu_millicores: median_known(rows.iter().map(|u| u.cpu_millicores())),
                    memory_mib: median_known(rows.iter().map(|u| u.memory_mib())),
                    bytes_per_sec: median_known(rows.iter().map(|u| u.bytes_per_sec())),
                    cpu_limit: rows[0].cpu_limit,
                    role,
                }
            })
            .collect()
    }
}

/// Groups runs by variant and load point, in the order of the variants' first appearance and
/// then by load.
pub fn group(runs: Vec<Run>) -> Vec<Group> {
    let mut variants: Vec<String> = Vec::new();
    let mut map: BTreeMap<(usize, LoadPoint), Vec<Run>> = BTreeMap::new();
    for r in runs {
        let v = match variants.iter().position(|v| *v == r.variant) {
            Some(i) => i,
            None => {
                variants.push(r.variant.clone());
                variants.len() - 1
            }
        };
        map.entry((v, r.load)).or_default().push(r);
    }
    map.into_values()
        .map(|runs| {
            let mut merged = new_histogram();
            for r in &runs {
                // Histograms from this tool share their bounds; a foreign one is resized.
                let _ = merged.add(&r.latency);
            }
            Group {
                topology: runs[0].topology.clone(),
                variant: runs[0].variant.clone(),
                load: runs[0].load,
                cpu: runs[0].cpu,
                merged,
                runs,
            }
        })
        .collect()
}

impl Invalid {
    /// The verdict on an answer built on every run of `groups`; `None` when the check calls
    /// none INVALID.
    pub fn of_groups<'a>(groups: impl IntoIterator<Item = &'a Group>) -> Option<Invalid> {
        Invalid::of_results(
            groups
                .into_iter()
                .flat_map(|g| g.runs.iter().map(|r| &r.result)),
        )
    }
}
