//! The headline figures of an experiment: what each proxy costs (vCPU per 1000 RPS, MiB,
//! bandwidth per 1000 RPS, at each load and as a trend across loads where one is defined), the
//! RPS one core carries where a proxy ran at its CPU limit (and only a lower bound below it),
//! the latency it adds over the baseline per percentile with a 95 % interval, and where each
//! curve bends: the knee of latency against throughput and the load at which a proxy used
//! 90 % of its CPU; and where one file ran several gateway programs, the gateways ranked by
//! CPU per 1,000 RPS. Each answer carries what the generator's self-check says against the
//! runs it rests on (`invalid`: `None` when it calls none INVALID).

use meshbench_results::{ChainRole, Class, Role, Subject};
use meshbench_stats::{knee, linear_fit, Line};

use crate::invalid::Invalid;

use crate::runs::{distinct, Group, RoleUse, PERCENTILES};
use crate::trend::{Trend, MIN_LOADS};
use crate::verdict::{decide, enough, margin_for, Margin, Test, Unit, Verdict};
use meshbench_results::LoadPoint;

/// A proxy role's cost in one group.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    /// The group's topology: the variants of a CPU sweep share it.
    pub topology: Subject,
    pub variant: String,
    pub load: LoadPoint,
    pub throughput_rps: f64,
    pub usage: RoleUse,
    /// The self-check against the group's runs.
    pub invalid: Option<Invalid>,
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

    /// Whether the role used [`SATURATED_AT`] of its CPU allotment or more: the load found
    /// its limit, so what it carried is what its cores carry.
    pub fn at_limit(&self) -> bool {
        self.cpu_utilization().is_some_and(|u| u >= SATURATED_AT)
    }

    /// What one core of this role carries, as far as this load shows: the RPS its allotted
    /// cores carried, per core. At its CPU limit that is its capacity, measured (what the
    /// allotment carried, not a projection of the last few percent). Below it, the load set
    /// the rate, not the cores: its cores carry at least that much. Without an allotment,
    /// nothing.
    pub fn per_core(&self) -> Option<PerCoreFigure> {
        let limit = self.usage.cpu_limit.filter(|l| *l > 0.0)?;
        if !self.throughput_rps.is_finite() || !self.usage.cpu_millicores.is_finite() {
            return None;
        }
        let per_core = self.throughput_rps / limit;
        Some(if self.at_limit() {
            PerCoreFigure::AtLimit(per_core)
        } else {
            PerCoreFigure::AtLeast(per_core)
        })
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

/// RPS one core carries, as one load shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PerCoreFigure {
    /// Measured at the CPU limit: the role's capacity per core.
    AtLimit(f64),
    /// Below the limit: its allotted cores each carried this much, and could carry more.
    AtLeast(f64),
}

/// A role's cost across the loads of a variant: CPU and memory against RPS, each a line only
/// where one is defined ([`Trend`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CostFit {
    pub variant: String,
    pub role: Role,
    /// Millicores against RPS: a rising line's slope is vCPU per 1000 RPS.
    pub cpu: Trend,
    /// MiB against RPS.
    pub memory: Trend,
    /// The self-check against the variant's runs at every load the trends are over.
    pub invalid: Option<Invalid>,
}

/// The difference of B over A at one percentile, with the one test's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delta {
    pub q: f64,
    /// Merged percentile of B minus merged percentile of A: the difference of the pooled
    /// traffic, shown (and gated on) only when there are too few samples for the test.
    pub merged_ms: f64,
    /// The test of the per-run or per-second percentiles: the shift, its 95 % interval, p and
    /// the verdict read from the interval.
    pub test: Test,
}

impl Delta {
    pub fn verdict(&self) -> Verdict {
        self.test.verdict
    }

    /// Whether the test says B differs from A.
    pub fn significant(&self) -> bool {
        self.test.verdict.significant()
    }

    /// The difference to print beside the verdict: the test's own estimate (inside its
    /// interval), or the merged difference when there was no test. The one figure of B over A:
    /// the tables print it and the `added_pN` and `delta_pN` thresholds gate on it.
    pub fn point_ms(&self) -> f64 {
        self.test.shift.map_or(self.merged_ms, |s| s.estimate)
    }
}

/// The difference of group `b` over group `a` at percentile `q`.
///
/// The merged histograms give the pooled difference. Whether it is more than noise is the one
/// test's ([`decide`]), over the runs' own percentiles when there are enough repeats for the
/// test to show a difference, else over the one-second percentiles of all the runs of a side,
/// whose interval must then clear `margin` (what identical runs differ by, [`margin_for`]).
pub fn delta(a: &Group, b: &Group, q: f64, margin: Margin) -> Delta {
    let merged_ms = b.latency_ms(q) - a.latency_ms(q);
    let runs = |g: &Group| -> Vec<f64> {
        g.runs
            .iter()
            .map(|r| r.latency.value_at_quantile(q) as f64 / 1000.0)
            .collect()
    };
    let (ra, rb) = (runs(a), runs(b));
    let test = if enough(ra.len(), rb.len()) {
        decide(&ra, &rb, Unit::Repeats, None)
    } else {
        let secs =
            |g: &Group| -> Vec<f64> { g.runs.iter().flat_map(|r| r.per_second_ms(q)).collect() };
        let margin = margin_for(margin, q, a.latency_ms(q), &ra, &rb);
        decide(&secs(a), &secs(b), Unit::Seconds, margin)
    };
    Delta { q, merged_ms, test }
}

/// Latency a variant adds over the baseline at one load point.
#[derive(Debug, Clone, PartialEq)]
pub struct Added {
    pub variant: String,
    pub load: LoadPoint,
    pub deltas: Vec<Delta>,
    /// The self-check against the runs of both sides: the variant's and the baseline's.
    pub invalid: Option<Invalid>,
}

/// Where a variant's latency/throughput curve bends.
#[derive(Debug, Clone, PartialEq)]
pub struct Knee {
    pub variant: String,
    pub connections: u32,
    /// Throughput and p99 (ms) at the knee.
    pub throughput_rps: f64,
    pub p99_ms: f64,
    /// The self-check against the runs of the curve it was found on.
    pub invalid: Option<Invalid>,
}

/// The lowest load at which a proxy used 90 % or more of its CPU allotment.
#[derive(Debug, Clone, PartialEq)]
pub struct Saturation {
    pub variant: String,
    pub role: Role,
    pub load: LoadPoint,
    pub throughput_rps: f64,
    pub utilization: f64,
    /// The self-check against the runs at that load.
    pub invalid: Option<Invalid>,
}

/// One allotment of a CPU sweep at one load.
#[derive(Debug, Clone, PartialEq)]
pub struct Allotment {
    pub cores: f64,
    pub throughput_rps: f64,
    /// The largest share of its allotment a swept role used (NaN when not measured).
    pub utilization: f64,
    /// The self-check against the runs of this allotment.
    pub invalid: Option<Invalid>,
}

impl Allotment {
    /// Whether the swept role ran at its limit here, so that the cores set the rate.
    pub fn at_limit(&self) -> bool {
        self.utilization >= SATURATED_AT
    }
}

/// Throughput against a swept role's CPU allotment at one load. Only allotments at which the
/// role ran at its limit say what a core carries: below it the load set the rate.
#[derive(Debug, Clone, PartialEq)]
pub struct PerCore {
    pub topology: Subject,
    /// The swept class (`proxy`, `tunnel`, `control_plane`).
    pub role: Class,
    pub load: LoadPoint,
    /// Every allotment measured, fewest cores first.
    pub points: Vec<Allotment>,
    /// RPS = intercept + slope x cores over the allotments at the limit: only with
    /// [`MIN_LOADS`] of them or more and a slope above zero (RPS each added core carries).
    pub fit: Option<Line>,
    /// The self-check against the runs of every allotment.
    pub invalid: Option<Invalid>,
}

impl PerCore {
    /// The allotments at which the role ran at its limit.
    pub fn at_limit(&self) -> Vec<Allotment> {
        self.points
            .iter()
            .filter(|p| p.at_limit())
            .cloned()
            .collect()
    }
}

/// Where one run served the same plan through several gateway programs (`gateway.type` as a
/// list): at one load and CPU limit, each gateway's cost, from the least CPU per 1,000 RPS to
/// the most.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayRanking {
    pub load: LoadPoint,
    /// The gateways' CPU allotment (cores), when limited.
    pub cpu_limit: Option<f64>,
    /// The gateway role's cost in each program's group, cheapest first.
    pub gateways: Vec<Cost>,
    /// The self-check against the runs of every gateway ranked: the order rests on them all.
    pub invalid: Option<Invalid>,
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
    pub gateways: Vec<GatewayRanking>,
}

/// The fewest points of a latency/throughput curve a knee is looked for on
/// (`stats::knee` needs a first, a last and one between).
pub const KNEE_MIN_LOADS: usize = 3;

/// The share of its allotment at which a proxy counts as saturated.
pub const SATURATED_AT: f64 = 0.9;

impl Headline {
    pub fn of(groups: Vec<Group>) -> Headline {
        let mut costs = Vec::new();
        for g in &groups {
            let rps = g.throughput();
            let invalid = g.invalid();
            for u in g.proxies() {
                costs.push(Cost {
                    topology: g.topology.clone(),
                    variant: g.variant.clone(),
                    load: g.load,
                    throughput_rps: rps,
                    usage: u,
                    invalid: invalid.clone(),
                });
            }
        }
        let fits = fits(&groups, &costs);
        let added = added(&groups);
        let knees = knees(&groups);
        let saturation = saturation(&costs);
        let per_core = per_core(&groups, &costs);
        let gateways = gateway_rankings(&groups, &costs);
        Headline {
            groups,
            costs,
            fits,
            added,
            knees,
            saturation,
            per_core,
            gateways,
        }
    }

    /// Variants in order of first appearance.
    pub fn variants(&self) -> Vec<String> {
        distinct(self.groups.iter().map(|g| g.variant.clone()))
    }

    /// The most loads any latency/throughput curve (a variant at a connection count) has: a
    /// knee is looked for only on curves of [`KNEE_MIN_LOADS`] points or more.
    pub fn most_loads_on_a_curve(&self) -> usize {
        distinct(
            self.groups
                .iter()
                .map(|g| (g.variant.clone(), g.load.connections)),
        )
        .into_iter()
        .map(|(v, c)| {
            self.groups
                .iter()
                .filter(|g| g.variant == v && g.load.connections == c)
                .count()
        })
        .max()
        .unwrap_or(0)
    }
}

/// The trend of a cost over `costs` (one role's, at several loads): the finite points, and
/// the loads they cover.
pub fn trend_of(costs: &[&Cost], figure: impl Fn(&Cost) -> f64) -> Trend {
    let known: Vec<&&Cost> = costs
        .iter()
        .filter(|c| c.throughput_rps.is_finite() && figure(c).is_finite())
        .collect();
    let loads = distinct(known.iter().map(|c| c.load)).len();
    let points: Vec<(f64, f64)> = known
        .iter()
        .map(|c| (c.throughput_rps, figure(c)))
        .collect();
    Trend::of(&points, loads)
}

fn fits(groups: &[Group], costs: &[Cost]) -> Vec<CostFit> {
    distinct(
        costs
            .iter()
            .map(|c| (c.variant.clone(), c.usage.role.clone())),
    )
    .into_iter()
    .map(|(variant, role)| {
        let pts: Vec<&Cost> = costs
            .iter()
            .filter(|c| c.variant == variant && c.usage.role == role)
            .collect();
        CostFit {
            cpu: trend_of(&pts, |c| c.usage.cpu_millicores),
            memory: trend_of(&pts, |c| c.usage.memory_mib),
            invalid: Invalid::of_groups(groups.iter().filter(|g| {
                pts.iter()
                    .any(|c| c.variant == g.variant && c.load == g.load)
            })),
            variant,
            role,
        }
    })
    .collect()
}

/// The baseline group that `g` is compared with: the same load, and the same CPU allotment
/// when the baseline was swept too.
pub fn baseline_for<'a>(groups: &'a [Group], g: &Group) -> Option<&'a Group> {
    let same_load = |b: &&Group| b.topology.is_baseline() && b.load == g.load;
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
        .filter(|g| !g.topology.is_baseline())
        .filter_map(|g| {
            let base = baseline_for(groups, g)?;
            Some(Added {
                variant: g.variant.clone(),
                load: g.load,
                deltas: PERCENTILES
                    .iter()
                    .map(|&q| delta(base, g, q, Margin::DEFAULT))
                    .collect(),
                invalid: Invalid::of_groups([g, base]),
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
        let curve: Vec<&Group> = groups
            .iter()
            .filter(|g| g.variant == variant && g.load.connections == connections)
            .collect();
        let mut pts: Vec<(f64, f64)> = curve
            .iter()
            .map(|g| (g.throughput(), g.latency_ms(0.99)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let i = knee(&pts)?;
        Some(Knee {
            variant,
            connections,
            throughput_rps: pts[i].0,
            p99_ms: pts[i].1,
            invalid: Invalid::of_groups(curve),
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
            load: c.load,
            throughput_rps: c.throughput_rps,
            utilization: u,
            invalid: c.invalid.clone(),
        });
    }
    out
}

fn per_core(groups: &[Group], costs: &[Cost]) -> Vec<PerCore> {
    distinct(groups.iter().filter_map(|g| {
        let swept = g.cpu.as_ref()?;
        Some((g.topology.clone(), swept.role, g.load))
    }))
    .into_iter()
    .filter_map(|(topology, role, load)| {
        let mut points: Vec<Allotment> = groups
            .iter()
            .filter(|g| g.topology == topology && g.load == load)
            .filter_map(|g| {
                let swept = g.cpu.as_ref()?;
                // The swept roles' own utilization: a control-plane sweep is at its limit when
                // the control plane is, whatever the proxies' limits.
                let utilization = costs
                    .iter()
                    .filter(|c| c.variant == g.variant && c.load == g.load)
                    .filter(|c| role != Class::ControlPlane || c.usage.role.is_control_plane())
                    .filter_map(Cost::cpu_utilization)
                    .filter(|u| u.is_finite())
                    .reduce(f64::max)
                    .unwrap_or(f64::NAN);
                (swept.role == role).then(|| Allotment {
                    cores: swept.cores,
                    throughput_rps: g.throughput(),
                    utilization,
                    invalid: g.invalid(),
                })
            })
            .collect();
        if points.len() < 2 {
            return None;
        }
        points.sort_by(|a, b| a.cores.total_cmp(&b.cores));
        let limited: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.at_limit())
            .map(|p| (p.cores, p.throughput_rps))
            .collect();
        // The control plane is off the path: its cores carry no requests, so no line of
        // RPS per core is drawn over them.
        let fit = if limited.len() >= MIN_LOADS && role != Class::ControlPlane {
            linear_fit(&limited).filter(|l| l.slope > 0.0)
        } else {
            None
        };
        let invalid = Invalid::of_groups(groups.iter().filter(|g| {
            g.topology == topology && g.load == load && g.cpu.is_some_and(|c| c.role == role)
        }));
        Some(PerCore {
            topology,
            role,
            load,
            points,
            fit,
            invalid,
        })
    })
    .collect()
}

/// The gateways of one run ranked at each load and CPU limit where two programs or more
/// played the gateway, from the least CPU per 1,000 RPS to the most; a gateway under changes
/// is ranked by what a change costs instead (`crate::changes`), so only its still steps are.
fn gateway_rankings(groups: &[Group], costs: &[Cost]) -> Vec<GatewayRanking> {
    let gateways: Vec<&Cost> = costs
        .iter()
        .filter(|c| c.usage.role == Role::Chain(ChainRole::Gateway))
        .filter(|c| meshbench_results::change::still_variant(&c.variant).is_none())
        .filter(|c| c.vcpu_per_1k_rps().is_finite())
        .collect();
    let at = |c: &Cost| (c.load, c.usage.cpu_limit);
    distinct(gateways.iter().map(|c| at(c)))
        .into_iter()
        .filter_map(|(load, cpu_limit)| {
            let mut same: Vec<Cost> = gateways
                .iter()
                .filter(|c| at(c) == (load, cpu_limit))
                .map(|c| (*c).clone())
                .collect();
            if distinct(same.iter().map(|c| &c.usage.program)).len() < 2 {
                return None;
            }
            same.sort_by(|a, b| a.vcpu_per_1k_rps().total_cmp(&b.vcpu_per_1k_rps()));
            let invalid = Invalid::of_groups(groups.iter().filter(|g| {
                same.iter()
                    .any(|c| c.variant == g.variant && c.load == g.load)
            }));
            Some(GatewayRanking {
                load,
                cpu_limit,
                gateways: same,
                invalid,
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
        // Groups with no proxy under a CPU limit measured nothing of it.
        Metric::ProxyCpuShare => h
            .groups
            .iter()
            .filter_map(|g| {
                let shares = proxies_of(g).into_iter().filter_map(Cost::cpu_utilization);
                Some((at(g), shares.reduce(f64::max)?))
            })
            .collect(),
        // The figure the added table prints (the test's shift, or the merged difference when
        // too short to test), from the same function.
        Metric::Added(q) => h
            .groups
            .iter()
            .filter(|g| !g.topology.is_baseline())
            .filter_map(|g| {
                let base = baseline_for(&h.groups, g)?;
                Some((at(g), delta(base, g, q, Margin::DEFAULT).point_ms()))
            })
            .collect(),
        Metric::Delta(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::{group, Run};
    use crate::verdict::Basis;
    use meshbench_results::{
        histogram::{encode_histogram, new_histogram},
        run::TimelinePoint,
        RunResult, Topology,
    };

    /// A run whose every request took `us`, with these per-second p50s (ms).
    fn run(variant: &str, repeat: u32, us: u64, seconds_ms: &[f64]) -> Run {
        let mut r: RunResult = meshbench_results::fixtures::run_result();
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
        // A lab topology's name, else a file's.
        run.topology = Topology::from_word(variant)
            .map_or_else(|| Subject::File(variant.to_string()), Subject::Lab);
        run.repeat = repeat;
        run
    }

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b}");
    }

    #[test]
    fn added_latency_of_enough_repeats_is_tested_over_the_runs() {
        // Four repeats a side, every variant run above every baseline run: the test over the
        // runs' p50s says slower, and its interval is that of complete separation.
        let mut runs = Vec::new();
        for (rep, (b, v)) in [(1000, 1300), (1100, 1500), (1200, 1500), (1050, 1400)]
            .into_iter()
            .enumerate()
        {
            runs.push(run("baseline", rep as u32, b, &[]));
            runs.push(run("both", rep as u32, v, &[]));
        }
        let h = Headline::of(group(runs));
        let d = h.added[0].deltas[0];
        assert_eq!(
            d.test.basis,
            Basis {
                unit: Unit::Repeats,
                a: 4,
                b: 4
            }
        );
        // The merged histograms' p50 difference: 1.4 - 1.05 ms.
        close(d.merged_ms, 0.35, 1e-9);
        let s = d.test.shift.unwrap();
        close(s.p, 2.0 / 70.0, 1e-12);
        // Pairwise differences run from 1.3 - 1.2 to 1.5 - 1.0 ms.
        close(s.ci.0, 0.1, 1e-9);
        close(s.ci.1, 0.5, 1e-9);
        assert!(s.ci.0 <= d.point_ms() && d.point_ms() <= s.ci.1);
        assert_eq!(d.verdict(), Verdict::Slower);
    }

    #[test]
    fn added_latency_of_single_runs_is_tested_over_their_seconds() {
        let runs = vec![
            run("baseline", 0, 1000, &[1.0, 1.1, 0.9, 1.0]),
            run("both", 0, 1500, &[1.5, 1.4, 1.6, 1.5]),
        ];
        let h = Headline::of(group(runs));
        let d = h.added[0].deltas[0];
        assert_eq!(d.test.basis.to_string(), "4 one-second intervals a side");
        close(d.merged_ms, 0.5, 1e-9);
        let s = d.test.shift.unwrap();
        close(s.ci.0, 0.3, 1e-9);
        close(s.ci.1, 0.7, 1e-9);
        close(s.estimate, 0.5, 1e-9);
        assert!(d.significant());
        // p90 has no per-second values here: too short to tell, said so.
        let p90 = h.added[0].deltas[1];
        assert!(matches!(
            p90.verdict(),
            Verdict::TooShort {
                n: 0,
                unit: Unit::Seconds,
                ..
            }
        ));
        assert!(!p90.significant());
        close(p90.point_ms(), p90.merged_ms, 0.0);
    }

    /// A run whose every request took `us`, with these per-second p99s (ms).
    fn run_p99(variant: &str, us: u64, seconds_ms: &[f64]) -> Run {
        let mut r = run(variant, 0, us, seconds_ms);
        for p in &mut r.result.timeline {
            p.p99_us = p.p50_us;
        }
        r
    }

    #[test]
    fn the_added_threshold_gates_on_the_figure_the_added_table_shows() {
        // The merged p99s differ by 0.5 ms, the per-second p99s by about 0.2 ms: the table
        // shows the test's shift, and the threshold must name and judge that same figure.
        let runs = vec![
            run_p99("baseline", 1000, &[1.0, 1.1, 0.9, 1.0, 1.05]),
            run_p99("both", 1500, &[1.2, 1.3, 1.25, 1.2, 1.15]),
        ];
        let h = Headline::of(group(runs));
        let shown = h.added[0].deltas[2];
        assert_eq!(shown.q, 0.99);
        assert!(
            (shown.point_ms() - shown.merged_ms).abs() > 0.1,
            "{shown:?}"
        );
        let t: crate::threshold::Threshold = "added_p99<0.3ms".parse().unwrap();
        let observed = observe(&h, t.metric);
        let at = "both @ max rps x 1 conns".to_string();
        assert_eq!(observed, vec![(at.clone(), shown.point_ms())]);
        let o = crate::threshold::check(&t, observed);
        assert!(o.passed, "{o}");
        assert_eq!(
            o.to_string(),
            format!(
                "PASS added_p99<0.3ms: worst {:+.3} ms ({at})",
                shown.point_ms()
            )
        );
    }

    #[test]
    fn the_cpu_share_is_the_most_loaded_limited_proxys_and_unlimited_ones_measure_nothing() {
        use crate::sizing::tests::measured;
        use crate::threshold::{check, Threshold};
        let t: Threshold = "proxy_cpu_share<90%".parse().unwrap();
        let h = Headline::of(group(vec![
            measured("gateway 0.5", Some(1000.0), 1000.0, 475.0, 20.0, Some(0.5)),
            measured("gateway 1", Some(1000.0), 1000.0, 475.0, 20.0, Some(1.0)),
        ]));
        let observed = observe(&h, t.metric);
        let shares: Vec<f64> = observed
            .iter()
            .map(|(_, v)| (v * 1e3).round() / 1e3)
            .collect();
        assert_eq!(shares, [0.95, 0.475], "{observed:?}");
        let o = check(&t, observed);
        assert!(!o.passed, "{o}");
        assert!(
            o.to_string()
                .ends_with("worst 95.0 % of its CPU limit (gateway 0.5 @ 1000 rps x 1 conns)"),
            "{o}"
        );
        let unlimited = Headline::of(group(vec![measured(
            "gateway",
            Some(1000.0),
            1000.0,
            400.0,
            20.0,
            None,
        )]));
        let o = check(&t, observe(&unlimited, t.metric));
        assert!(!o.passed && o.worst.is_none(), "not measured: {o}");
    }

    #[test]
    fn answers_resting_on_an_invalid_run_carry_its_cause() {
        use crate::invalid::tests::judged;
        use crate::sizing::tests::measured;
        use meshbench_results::Cause;
        // Three gateways at one load, each held to half a core; nginx's step was contended.
        let gateway = |program: &str, mc: f64, invalid: bool| {
            let variant = format!("gateway {program}");
            let mut r = measured(&variant, None, 1000.0, mc, 20.0, Some(0.5));
            r.cpu = None;
            r.usage[0].program = serde_json::from_value(serde_json::json!(program)).unwrap();
            if invalid {
                judged(&mut r.result, &[Cause::CpuContention]);
            }
            r
        };
        let h = Headline::of(group(vec![
            gateway("nginx", 200.0, true),
            gateway("haproxy", 150.0, false),
            gateway("envoy", 480.0, false),
        ]));
        assert_eq!(h.gateways.len(), 1, "{:?}", h.gateways);
        let ranked = &h.gateways[0];
        let order: Vec<String> = ranked
            .gateways
            .iter()
            .map(|c| c.usage.program.to_string())
            .collect();
        assert_eq!(order, ["haproxy", "nginx", "envoy"], "cheapest first");
        let said = |i: &Option<Invalid>| i.as_ref().map(ToString::to_string);
        assert_eq!(said(&ranked.gateways[0].invalid), None);
        assert_eq!(
            said(&ranked.gateways[1].invalid).as_deref(),
            Some("INVALID: cpu_contention")
        );
        assert_eq!(
            said(&ranked.invalid).as_deref(),
            Some("INVALID: cpu_contention in 1 of 3 runs"),
            "the order rests on every gateway ranked"
        );
        // Envoy at 96 % of its allotment: saturated, and valid.
        assert_eq!(h.saturation.len(), 1, "{:?}", h.saturation);
        assert_eq!(h.saturation[0].invalid, None);

        // The added latency rests on the baseline's runs too.
        let mut base = run("baseline", 0, 1000, &[1.0, 1.1, 0.9, 1.0]);
        judged(&mut base.result, &[Cause::TimerLateness]);
        let h = Headline::of(group(vec![
            base,
            run("both", 0, 1500, &[1.5, 1.4, 1.6, 1.5]),
        ]));
        assert_eq!(
            said(&h.added[0].invalid).as_deref(),
            Some("INVALID: timer_lateness in 1 of 2 runs")
        );

        // A line over three loads rests on each of them.
        let mut loads: Vec<crate::Run> = [100.0, 200.0, 300.0]
            .map(|q| measured("gateway", Some(q), q, q / 10.0, 9.0, None))
            .to_vec();
        judged(&mut loads[1].result, &[Cause::CpuSaturation]);
        let h = Headline::of(group(loads));
        assert!(h.fits[0].cpu.line().is_some(), "{:?}", h.fits[0]);
        assert_eq!(
            said(&h.fits[0].invalid).as_deref(),
            Some("INVALID: cpu_saturation in 1 of 3 runs")
        );
        let at = |q: f64| h.costs.iter().find(|c| c.throughput_rps == q).unwrap();
        assert_eq!(at(100.0).invalid, None);
        assert!(at(200.0).invalid.is_some());
    }

    #[test]
    fn a_partial_last_second_is_not_a_sample() {
        let mut r = run("a", 0, 1000, &[1.0, 1.1, 0.9, 1.0, 3.9]);
        r.result.timeline[4].requests = 2;
        assert_eq!(r.per_second_ms(0.5), vec![1.0, 1.1, 0.9, 1.0]);
        r.result.timeline[4].requests = 60;
        assert_eq!(r.per_second_ms(0.5).len(), 5);
    }

    #[test]
    fn too_few_repeats_fall_back_to_the_seconds_of_every_run() {
        // Two repeats a side cannot show a difference between runs; their eight seconds can.
        let runs = vec![
            run("baseline", 0, 1000, &[1.0, 1.1, 0.9, 1.0]),
            run("baseline", 1, 1000, &[1.0, 1.05, 0.95, 1.0]),
            run("both", 0, 1000, &[1.0, 1.02, 0.98, 1.0]),
            run("both", 1, 1000, &[1.1, 0.9, 1.0, 1.0]),
        ];
        let h = Headline::of(group(runs));
        let d = h.added[0].deltas[0];
        assert_eq!(d.test.basis.to_string(), "8 one-second intervals a side");
        assert_eq!(d.verdict(), Verdict::WithinNoise);
        let s = d.test.shift.unwrap();
        assert!(s.ci.0 <= 0.0 && 0.0 <= s.ci.1, "{s:?}");
    }
}
