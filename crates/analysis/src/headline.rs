//! The headline figures of an experiment: what each proxy costs (vCPU per 1000 RPS, MiB,
//! bandwidth per 1000 RPS, RPS per core, at each load and fitted across loads), the latency it
//! adds over the baseline per percentile with a 95 % interval, and where each curve bends: the
//! knee of latency against throughput and the load at which a proxy used 90 % of its CPU.

use meshbench_stats::{knee, linear_fit, one_sample, welch, Line};

use crate::runs::{distinct, Group, LoadKey, RoleUse, PERCENTILES};

/// Confidence level of every interval.
pub const LEVEL: f64 = 0.95;

/// A proxy role's cost in one group.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    pub variant: String,
    pub load: LoadKey,
    pub throughput_rps: f64,
    pub usage: RoleUse,
}

impl Cost {
    /// vCPU per 1000 requests per second.
    pub fn vcpu_per_1k_rps(&self) -> f64 {
        if self.throughput_rps > 0.0 {
            self.usage.cpu_millicores / self.throughput_rps
        } else {
            f64::NAN
        }
    }

    /// Requests per second one full core carries at this load's efficiency.
    pub fn rps_per_core(&self) -> f64 {
        if self.usage.cpu_millicores > 0.0 {
            self.throughput_rps / (self.usage.cpu_millicores / 1000.0)
        } else {
            f64::NAN
        }
    }

    /// MiB moved (in plus out) per 1000 requests.
    pub fn mib_per_1k_requests(&self) -> f64 {
        if self.throughput_rps > 0.0 {
            self.usage.bytes_per_sec / self.throughput_rps * 1000.0 / (1024.0 * 1024.0)
        } else {
            f64::NAN
        }
    }

    /// CPU used over CPU allotted (when limited).
    pub fn cpu_utilization(&self) -> Option<f64> {
        self.usage
            .cpu_limit
            .filter(|l| *l > 0.0)
            .map(|l| self.usage.cpu_millicores / (l * 1000.0))
    }
}

/// A role's cost fitted across the loads of a variant: CPU and memory as lines in RPS.
#[derive(Debug, Clone, PartialEq)]
pub struct CostFit {
    pub variant: String,
    pub role: String,
    /// Millicores = intercept + slope x RPS: slope is vCPU per 1000 RPS.
    pub cpu: Line,
    /// MiB = intercept + slope x RPS.
    pub memory: Line,
}

/// How an interval was obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Basis {
    /// From the spread of this many repeats (paired by repeat when the sides match).
    Repeats(usize),
    /// From per-second values of a single run (batch means), this many seconds a side.
    Seconds(usize),
    /// Too little data for an interval.
    None,
}

impl std::fmt::Display for Basis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Basis::Repeats(n) => write!(f, "{n} repeats"),
            Basis::Seconds(n) => write!(f, "{n} one-second intervals"),
            Basis::None => f.write_str("no interval"),
        }
    }
}

/// A difference in milliseconds with its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delta {
    pub q: f64,
    /// Merged percentile of B minus merged percentile of A.
    pub ms: f64,
    /// 95 % interval of the difference (equal bounds without one).
    pub ci: (f64, f64),
    /// Two-sided p-value of "no difference" (Welch), when there is an interval.
    pub p: Option<f64>,
    pub basis: Basis,
}

impl Delta {
    /// Whether the interval excludes zero.
    pub fn significant(&self) -> bool {
        self.basis != Basis::None && (self.ci.0 > 0.0 || self.ci.1 < 0.0)
    }
}

/// The difference of group `b` over group `a` at percentile `q`.
///
/// The point is the difference of the merged histograms' percentiles. Its interval comes from
/// the spread of the runs' own percentiles when both sides have two runs or more (the
/// per-repeat differences when the repeats pair up, else Welch), and otherwise from the
/// one-second values of the runs (Welch over the seconds of each side).
pub fn delta(a: &Group, b: &Group, q: f64) -> Delta {
    let ms = b.latency_ms(q) - a.latency_ms(q);
    // The interval's half-width, placed around the point.
    let around = |t: Option<meshbench_stats::Welch>, basis: Basis| match t {
        Some(t) => {
            let half = (t.ci.1 - t.ci.0) / 2.0;
            Delta {
                q,
                ms,
                ci: (ms - half, ms + half),
                p: Some(t.p),
                basis,
            }
        }
        None => Delta {
            q,
            ms,
            ci: (ms, ms),
            p: None,
            basis: Basis::None,
        },
    };
    let pct = |g: &Group| -> Vec<(u32, f64)> {
        g.runs
            .iter()
            .map(|r| (r.repeat, r.latency.value_at_quantile(q) as f64 / 1000.0))
            .collect()
    };
    let (ra, rb) = (pct(a), pct(b));
    if ra.len() >= 2 && rb.len() >= 2 {
        let mut pairs: Vec<f64> = Vec::new();
        for (rep, vb) in &rb {
            if let Some((_, va)) = ra.iter().find(|(r, _)| r == rep) {
                pairs.push(vb - va);
            }
        }
        let paired = pairs.len() == ra.len() && pairs.len() == rb.len();
        if let Some(t) = paired.then(|| one_sample(&pairs, LEVEL)).flatten() {
            return around(Some(t), Basis::Repeats(pairs.len()));
        }
        let va: Vec<f64> = ra.iter().map(|p| p.1).collect();
        let vb: Vec<f64> = rb.iter().map(|p| p.1).collect();
        return around(
            welch(&va, &vb, LEVEL),
            Basis::Repeats(va.len().min(vb.len())),
        );
    }
    let secs = |g: &Group| -> Vec<f64> { g.runs.iter().flat_map(|r| r.per_second_ms(q)).collect() };
    let (sa, sb) = (secs(a), secs(b));
    around(
        welch(&sa, &sb, LEVEL),
        Basis::Seconds(sa.len().min(sb.len())),
    )
}

/// Latency a variant adds over the baseline at one load point.
#[derive(Debug, Clone, PartialEq)]
pub struct Added {
    pub variant: String,
    pub load: LoadKey,
    pub deltas: Vec<Delta>,
}

/// Where a variant's latency/throughput curve bends.
#[derive(Debug, Clone, PartialEq)]
pub struct Knee {
    pub variant: String,
    pub connections: u32,
    /// Throughput and p99 (ms) at the knee.
    pub throughput_rps: f64,
    pub p99_ms: f64,
}

/// The lowest load at which a proxy used 90 % or more of its CPU allotment.
#[derive(Debug, Clone, PartialEq)]
pub struct Saturation {
    pub variant: String,
    pub role: String,
    pub load: LoadKey,
    pub throughput_rps: f64,
    pub utilization: f64,
}

/// Throughput against a role's CPU allotment: the RPS one core carries.
#[derive(Debug, Clone, PartialEq)]
pub struct PerCore {
    pub topology: String,
    pub role: String,
    pub load: LoadKey,
    /// RPS = intercept + slope x cores.
    pub fit: Line,
    /// (cores, RPS) measured.
    pub points: Vec<(f64, f64)>,
}

/// Everything the headline table and the report say about an experiment.
#[derive(Debug, Clone)]
pub struct Headline {
    pub groups: Vec<Group>,
    pub costs: Vec<Cost>,
    pub fits: Vec<CostFit>,
    pub added: Vec<Added>,
    pub knees: Vec<Knee>,
    pub saturation: Vec<Saturation>,
    pub per_core: Vec<PerCore>,
}

/// The share of its allotment at which a proxy counts as saturated.
pub const SATURATED_AT: f64 = 0.9;

impl Headline {
    pub fn of(groups: Vec<Group>) -> Headline {
        let mut costs = Vec::new();
        for g in &groups {
            let rps = g.throughput();
            for u in g.proxies() {
                costs.push(Cost {
                    variant: g.variant.clone(),
                    load: g.load.clone(),
                    throughput_rps: rps,
                    usage: u,
                });
            }
        }
        let fits = fits(&costs);
        let added = added(&groups);
        let knees = knees(&groups);
        let saturation = saturation(&costs);
        let per_core = per_core(&groups);
        Headline {
            groups,
            costs,
            fits,
            added,
            knees,
            saturation,
            per_core,
        }
    }

    /// Variants in order of first appearance.
    pub fn variants(&self) -> Vec<String> {
        distinct(self.groups.iter().map(|g| g.variant.clone()))
    }
}

fn fits(costs: &[Cost]) -> Vec<CostFit> {
    distinct(
        costs
            .iter()
            .map(|c| (c.variant.clone(), c.usage.role.clone())),
    )
    .into_iter()
    .filter_map(|(variant, role)| {
        let pts: Vec<&Cost> = costs
            .iter()
            .filter(|c| c.variant == variant && c.usage.role == role)
            .collect();
        let cpu = linear_fit(
            &pts.iter()
                .map(|c| (c.throughput_rps, c.usage.cpu_millicores))
                .collect::<Vec<_>>(),
        )?;
        let memory = linear_fit(
            &pts.iter()
                .map(|c| (c.throughput_rps, c.usage.memory_mib))
                .collect::<Vec<_>>(),
        )?;
        Some(CostFit {
            variant,
            role,
            cpu,
            memory,
        })
    })
    .collect()
}

/// The baseline group that `g` is compared with: the same load, and the same CPU allotment
/// when the baseline was swept too.
pub fn baseline_for<'a>(groups: &'a [Group], g: &Group) -> Option<&'a Group> {
    let same_load = |b: &&Group| b.topology == "baseline" && b.load == g.load;
    groups
        .iter()
        .filter(same_load)
        .find(|b| b.cpu == g.cpu)
        .or_else(|| groups.iter().filter(same_load).find(|b| b.cpu.is_none()))
        .or_else(|| groups.iter().find(same_load))
}

fn added(groups: &[Group]) -> Vec<Added> {
    groups
        .iter()
        .filter(|g| g.topology != "baseline")
        .filter_map(|g| {
            let base = baseline_for(groups, g)?;
            Some(Added {
                variant: g.variant.clone(),
                load: g.load.clone(),
                deltas: PERCENTILES.iter().map(|&q| delta(base, g, q)).collect(),
            })
        })
        .collect()
}

fn knees(groups: &[Group]) -> Vec<Knee> {
    distinct(
        groups
            .iter()
            .map(|g| (g.variant.clone(), g.load.connections)),
    )
    .into_iter()
    .filter_map(|(variant, connections)| {
        let mut pts: Vec<(f64, f64)> = groups
            .iter()
            .filter(|g| g.variant == variant && g.load.connections == connections)
            .map(|g| (g.throughput(), g.latency_ms(0.99)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let i = knee(&pts)?;
        Some(Knee {
            variant,
            connections,
            throughput_rps: pts[i].0,
            p99_ms: pts[i].1,
        })
    })
    .collect()
}

fn saturation(costs: &[Cost]) -> Vec<Saturation> {
    let mut out: Vec<Saturation> = Vec::new();
    let mut sorted: Vec<&Cost> = costs.iter().collect();
    sorted.sort_by(|a, b| a.throughput_rps.total_cmp(&b.throughput_rps));
    for c in sorted {
        let Some(u) = c.cpu_utilization() else {
            continue;
        };
        if u < SATURATED_AT
            || out
                .iter()
                .any(|s| s.variant == c.variant && s.role == c.usage.role)
        {
            continue;
        }
        out.push(Saturation {
            variant: c.variant.clone(),
            role: c.usage.role.clone(),
            load: c.load.clone(),
            throughput_rps: c.throughput_rps,
            utilization: u,
        });
    }
    out
}

fn per_core(groups: &[Group]) -> Vec<PerCore> {
    distinct(groups.iter().filter_map(|g| {
        let (role, _) = g.cpu.as_ref()?;
        Some((g.topology.clone(), role.clone(), g.load.clone()))
    }))
    .into_iter()
    .filter_map(|(topology, role, load)| {
        let points: Vec<(f64, f64)> = groups
            .iter()
            .filter(|g| g.topology == topology && g.load == load)
            .filter_map(|g| {
                let (r, cores) = g.cpu.as_ref()?;
                (*r == role).then_some((*cores, g.throughput()))
            })
            .collect();
        let fit = linear_fit(&points)?;
        Some(PerCore {
            topology,
            role,
            load,
            fit,
            points,
        })
    })
    .collect()
}

/// What an experiment measured of `metric`, one value per group (or per compared pair), each
/// with where it was measured; the input of [`crate::threshold::check`].
pub fn observe(h: &Headline, metric: crate::threshold::Metric) -> Vec<(String, f64)> {
    use crate::threshold::Metric;
    let single = h.groups.len() == 1;
    let at = |g: &Group| {
        if single {
            String::new()
        } else {
            format!("{} @ {}", g.variant, g.load)
        }
    };
    let proxies_of = |g: &Group| -> Vec<&Cost> {
        h.costs
            .iter()
            .filter(|c| c.variant == g.variant && c.load == g.load)
            .collect()
    };
    match metric {
        Metric::Latency(q) => h.groups.iter().map(|g| (at(g), g.latency_ms(q))).collect(),
        Metric::Max => h
            .groups
            .iter()
            .map(|g| (at(g), g.merged.max() as f64 / 1000.0))
            .collect(),
        Metric::Mean => h
            .groups
            .iter()
            .map(|g| (at(g), g.merged.mean() / 1000.0))
            .collect(),
        Metric::Errors => h.groups.iter().map(|g| (at(g), g.error_ratio())).collect(),
        Metric::Rps => h.groups.iter().map(|g| (at(g), g.throughput())).collect(),
        Metric::ProxyCpuPer1kRps | Metric::ProxyCpuMillicores | Metric::ProxyMemMib => h
            .groups
            .iter()
            .filter_map(|g| {
                let p = proxies_of(g);
                if p.is_empty() {
                    return None;
                }
                let mc: f64 = p.iter().map(|c| c.usage.cpu_millicores).sum();
                let v = match metric {
                    Metric::ProxyCpuPer1kRps => mc / g.throughput(),
                    Metric::ProxyCpuMillicores => mc,
                    _ => p.iter().map(|c| c.usage.memory_mib).sum(),
                };
                Some((at(g), v))
            })
            .collect(),
        Metric::Added(q) => h
            .groups
            .iter()
            .filter(|g| g.topology != "baseline")
            .filter_map(|g| {
                let base = baseline_for(&h.groups, g)?;
                Some((at(g), g.latency_ms(q) - base.latency_ms(q)))
            })
            .collect(),
        Metric::Delta(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::{group, Run};
    use meshbench_engine::recorder::new_histogram;
    use meshbench_engine::result::{encode_histogram, RunResult, TimelinePoint};

    /// A run whose every request took `us`, with these per-second p50s (ms).
    fn run(variant: &str, repeat: u32, us: u64, seconds_ms: &[f64]) -> Run {
        let mut r: RunResult = serde_json::from_str(include_str!("fixture-run.json")).unwrap();
        let mut h = new_histogram();
        h.record_n(us, 1000).unwrap();
        r.histogram.latency_us = encode_histogram(&h);
        r.timeline = seconds_ms
            .iter()
            .enumerate()
            .map(|(i, ms)| TimelinePoint {
                second: i as u32,
                requests: 100,
                errors: 0,
                p50_us: (ms * 1000.0) as u64,
                p90_us: 0,
                p99_us: 0,
                p999_us: 0,
            })
            .collect();
        let mut run = Run::from_result(variant, r).unwrap();
        run.topology = variant.into();
        run.repeat = repeat;
        run
    }

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b}");
    }

    #[test]
    fn added_latency_from_paired_repeats_matches_scipy() {
        // Per-repeat p50 differences 0.3, 0.4, 0.3 ms: st.ttest_1samp gives p 0.009852 and
        // t(0.975, 2) x sem = 0.143422.
        let mut runs = Vec::new();
        for (rep, (b, v)) in [(1000, 1300), (1100, 1500), (1200, 1500)]
            .into_iter()
            .enumerate()
        {
            runs.push(run("baseline", rep as u32, b, &[]));
            runs.push(run("both", rep as u32, v, &[]));
        }
        let h = Headline::of(group(runs));
        let d = h.added[0].deltas[0];
        assert_eq!(d.basis, Basis::Repeats(3));
        // The point is the merged histograms' p50 difference: 1.5 - 1.1 ms.
        close(d.ms, 0.4, 1e-9);
        close(d.ci.1 - d.ms, 0.14342175765831544, 1e-6);
        close(d.p.unwrap(), 0.009852457023325694, 1e-6);
        assert!(d.significant());
    }

    #[test]
    fn added_latency_of_single_runs_uses_seconds_and_matches_scipy() {
        // st.ttest_ind(b, a, equal_var=False): p 0.000130707, CI half-width 0.141273.
        let runs = vec![
            run("baseline", 0, 1000, &[1.0, 1.1, 0.9, 1.0]),
            run("both", 0, 1500, &[1.5, 1.4, 1.6, 1.5]),
        ];
        let h = Headline::of(group(runs));
        let d = h.added[0].deltas[0];
        assert_eq!(d.basis, Basis::Seconds(4));
        close(d.ms, 0.5, 1e-9);
        close(d.ci.1 - d.ms, 0.14127252159418394, 1e-6);
        close(d.p.unwrap(), 0.0001307066503394685, 1e-6);
        // p90 has no per-second values here: no interval, said so.
        assert_eq!(h.added[0].deltas[1].basis, Basis::None);
        assert!(!h.added[0].deltas[1].significant());
    }
}
