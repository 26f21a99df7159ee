//! The findings under the headline's tables, in words: each proxy's CPU and memory against
//! load, knees, saturation, what one core carries in a CPU sweep (or, swept over the control
//! plane, how little the rate moved), and where one file ran several gateways, which costs
//! least per 1,000 RPS. The terminal and the HTML report say the same sentences.

use meshbench_analysis::headline::{Cost, Headline, PerCore, PerCoreFigure};
use meshbench_analysis::runs::distinct;
use meshbench_analysis::trend::{Trend, MIN_LOADS};
use meshbench_results::{ChainRole, Class, Role};

use crate::thousands;

/// A role's CPU against load in words: a line only where one is defined, never a negative
/// figure.
pub fn cpu_words(t: &Trend) -> String {
    match t {
        Trend::Rising(l) if l.intercept > 0.0 => format!(
            "{:.0} millicores idle + {:.3} vCPU per 1000 RPS (r² {:.3})",
            l.intercept, l.slope, l.r2
        ),
        Trend::Rising(l) => format!(
            "{:.3} vCPU per 1000 RPS and no idle cost (the line through the loads would start below zero, so it is held at zero; r² {:.3})",
            l.slope, l.r2
        ),
        Trend::Flat { level, .. } => {
            format!("flat at {level:.0} millicores (it does not grow with load)")
        }
        Trend::NotEnoughLoads { loads } => not_enough_loads(*loads),
    }
}

/// A role's memory against load in words, as [`cpu_words`].
pub fn memory_words(t: &Trend) -> String {
    match t {
        Trend::Rising(l) if l.intercept > 0.0 => format!(
            "{:.1} MiB + {:.2} MiB per 1000 RPS (r² {:.3})",
            l.intercept,
            l.slope * 1000.0,
            l.r2
        ),
        Trend::Rising(l) => format!(
            "{:.2} MiB per 1000 RPS from zero (r² {:.3})",
            l.slope * 1000.0,
            l.r2
        ),
        Trend::Flat { level, .. } => format!("flat at {level:.1} MiB"),
        Trend::NotEnoughLoads { loads } => not_enough_loads(*loads),
    }
}

fn not_enough_loads(loads: usize) -> String {
    format!("not enough loads for a line ({loads} measured, needs {MIN_LOADS})")
}

/// The sentences under the tables: trends, knees, saturation, RPS per core.
pub fn findings(h: &Headline) -> Vec<String> {
    let mut out = Vec::new();
    for f in &h.fits {
        out.push(match (&f.cpu, &f.memory) {
            (Trend::NotEnoughLoads { loads }, Trend::NotEnoughLoads { .. }) => {
                format!("{} {}: {}", f.variant, f.role, not_enough_loads(*loads))
            }
            (cpu, memory) => format!(
                "{} {}: CPU {}; memory {}, over {} loads",
                f.variant,
                f.role,
                cpu_words(cpu),
                memory_words(memory),
                cpu.loads().max(memory.loads())
            ),
        });
    }
    for k in &h.knees {
        out.push(format!(
            "{} at {} connections: the latency/throughput knee is at {:.0} req/s (p99 {:.3} ms)",
            k.variant, k.connections, k.throughput_rps, k.p99_ms
        ));
    }
    for s in &h.saturation {
        out.push(format!(
            "{} {}: saturated from {} ({:.0} req/s), {:.0} % of its CPU allotment",
            s.variant,
            s.role,
            s.load,
            s.throughput_rps,
            s.utilization * 100.0
        ));
    }
    for p in &h.per_core {
        out.push(per_core_words(p));
    }
    out.extend(gateway_ranking(h));
    out
}

/// Where one run served the same plan through several gateway programs (`gateway.type` as a
/// list): at each load and CPU limit, the gateways from the least CPU per 1,000 RPS to the
/// most, each with what one core carried (at its limit, or at least that below it).
fn gateway_ranking(h: &Headline) -> Vec<String> {
    let gateways: Vec<&Cost> = h
        .costs
        .iter()
        .filter(|c| c.usage.role == Role::Chain(ChainRole::Gateway))
        .filter(|c| c.vcpu_per_1k_rps().is_finite())
        .collect();
    let at = |c: &Cost| (c.load, c.usage.cpu_limit);
    distinct(gateways.iter().map(|c| at(c)))
        .into_iter()
        .filter_map(|key| {
            let mut same: Vec<&Cost> = gateways.iter().copied().filter(|c| at(c) == key).collect();
            if distinct(same.iter().map(|c| &c.usage.program)).len() < 2 {
                return None;
            }
            same.sort_by(|a, b| a.vcpu_per_1k_rps().total_cmp(&b.vcpu_per_1k_rps()));
            let listed: Vec<String> = same.iter().map(|c| ranked(c)).collect();
            let (load, limit) = key;
            let limit = limit.map(|l| format!(" on {l} cores")).unwrap_or_default();
            Some(format!(
                "gateways at {load}{limit}, least CPU per 1,000 RPS first: {}",
                listed.join("; ")
            ))
        })
        .collect()
}

/// One gateway in [`gateway_ranking`]'s list: its program, vCPU per 1,000 RPS, and what one
/// core carried.
fn ranked(c: &Cost) -> String {
    let core = match c.per_core() {
        Some(PerCoreFigure::AtLimit(v)) => {
            format!(
                ", {} RPS per core at its limit",
                thousands(v.round() as u64)
            )
        }
        Some(PerCoreFigure::AtLeast(v)) => {
            format!(", at least {} RPS per core", thousands(v.round() as u64))
        }
        None => String::new(),
    };
    format!("{} {:.3} vCPU{core}", c.usage.program, c.vcpu_per_1k_rps())
}

/// What a CPU sweep says one core carries: a line only over three allotments or more at the
/// role's limit; the allotments at the limit as measured; or, when it never reached its limit,
/// that the load set the rate and only a lower bound is known.
pub fn per_core_words(p: &PerCore) -> String {
    let head = format!("{} with {} limited, at {}", p.topology, p.role, p.load);
    if p.role == Class::ControlPlane {
        return control_plane_sweep_words(&head, p);
    }
    let at_limit = p.at_limit();
    if let Some(fit) = p.fit {
        return format!(
            "{head}: each added core carries {:.0} RPS (fit over {} allotments at the limit, r² {:.3})",
            fit.slope,
            at_limit.len(),
            fit.r2
        );
    }
    if !at_limit.is_empty() {
        let list: Vec<String> = at_limit
            .iter()
            .map(|a| format!("{:.0} req/s on {} cores", a.throughput_rps, a.cores))
            .collect();
        return format!(
            "{head}: at its limit, {}; a line over allotments needs {MIN_LOADS} at the limit",
            list.join(", ")
        );
    }
    let most = p
        .points
        .iter()
        .map(|a| a.utilization)
        .filter(|u| u.is_finite())
        .fold(0.0, f64::max);
    let carried = p
        .points
        .iter()
        .map(|a| a.throughput_rps / a.cores)
        .fold(0.0, f64::max);
    format!(
        "{head}: below its CPU limit at every allotment (at most {:.0} %), so the load set the rate, not its cores: what one core carries is not measured here, only that each carried at least {carried:.0} RPS",
        most * 100.0
    )
}

/// What a sweep of the control plane's cores did to the data plane's throughput (the study's
/// question: does Contour's CPU set the gateway's rate?): each allotment's rate and how far
/// they spread around their mean.
fn control_plane_sweep_words(head: &str, p: &PerCore) -> String {
    let list: Vec<String> = p
        .points
        .iter()
        .map(|a| {
            let word = if a.cores == 1.0 { "core" } else { "cores" };
            format!("{:.0} req/s with {} {word}", a.throughput_rps, a.cores)
        })
        .collect();
    let rates: Vec<f64> = p.points.iter().map(|a| a.throughput_rps).collect();
    let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    let spread = rates.iter().map(|r| (r - mean).abs()).fold(0.0, f64::max);
    let percent = match mean > 0.0 {
        true => spread / mean * 100.0,
        false => 0.0,
    };
    format!(
        "{head}: {}; every rate within {percent:.1} % of their mean (the control plane is off the path; its cores bound how fast configuration lands)",
        list.join(", ")
    )
}
