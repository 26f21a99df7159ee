//! The findings under the headline's tables, in words: what the cost table's roles share
//! (too few loads for a line, saturation: one note each per table, naming the roles), each
//! proxy's CPU and memory against load where a line is defined, knees, and what one core
//! carries in a CPU sweep (or, swept over the control plane, how little the rate moved). A
//! sentence resting on a run the generator's self-check calls INVALID says so in the same
//! line ([`doubt`]). The terminal and the HTML report say the same sentences.

use meshbench_analysis::headline::{CostFit, Headline, PerCore, Saturation, SATURATED_AT};
use meshbench_analysis::invalid::Invalid;
use meshbench_analysis::runs::distinct;
use meshbench_analysis::trend::{Trend, MIN_LOADS};
use meshbench_results::Class;

/// What a sentence adds after the figure it names when that figure rests on a run the
/// generator's self-check calls INVALID: ` (INVALID: cpu_contention)`; nothing otherwise.
pub fn doubt(invalid: Option<&Invalid>) -> String {
    invalid.map(|i| format!(" ({i})")).unwrap_or_default()
}

/// The mark of a table row resting on a run the self-check calls INVALID (the row's last
/// cell): `INVALID: cpu_contention`; empty otherwise.
pub fn mark(invalid: Option<&Invalid>) -> String {
    invalid.map(Invalid::to_string).unwrap_or_default()
}

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

/// Whether neither CPU nor memory has a line: too few loads for either.
fn unfitted(f: &CostFit) -> bool {
    matches!(
        (f.cpu, f.memory),
        (Trend::NotEnoughLoads { .. }, Trend::NotEnoughLoads { .. })
    )
}

/// `variant role`, as a finding names a role of the cost table.
fn role_of(variant: &str, role: &impl std::fmt::Display) -> String {
    format!("{variant} {role}")
}

/// The notes under the cost table, each said once for the roles it concerns: the roles with
/// too few loads for a line (grouped by how many loads they have), and the roles that reached
/// 90 % of their CPU allotment, each with its share (and the load it first did so at when the
/// table has several).
pub fn cost_notes(h: &Headline) -> Vec<String> {
    let mut out = Vec::new();
    let without: Vec<&CostFit> = h.fits.iter().filter(|f| unfitted(f)).collect();
    for loads in distinct(without.iter().map(|f| f.cpu.loads())) {
        let these: Vec<&&CostFit> = without.iter().filter(|f| f.cpu.loads() == loads).collect();
        let which = if these.len() == h.fits.len() {
            "any role in the table".to_string()
        } else {
            let named: Vec<String> = these.iter().map(|f| role_of(&f.variant, &f.role)).collect();
            named.join(", ")
        };
        out.push(format!(
            "CPU and memory against load: {} for {which}",
            not_enough_loads(loads)
        ));
    }
    if !h.saturation.is_empty() {
        let one_load = distinct(h.costs.iter().map(|c| c.load)).len() == 1;
        // In the cost table's order (the saturation list is by throughput).
        let row = |s: &&Saturation| {
            h.costs
                .iter()
                .position(|c| c.variant == s.variant && c.usage.role == s.role)
        };
        let mut saturated: Vec<&Saturation> = h.saturation.iter().collect();
        saturated.sort_by_key(row);
        let named: Vec<String> = saturated
            .iter()
            .map(|s| {
                let at = if one_load {
                    String::new()
                } else {
                    format!(" from {} ({:.0} req/s)", s.load, s.throughput_rps)
                };
                format!(
                    "{}{at} {:.0} %{}",
                    role_of(&s.variant, &s.role),
                    s.utilization * 100.0,
                    doubt(s.invalid.as_ref())
                )
            })
            .collect();
        out.push(format!(
            "saturated, at {:.0} % of the CPU allotment or more (the load found the limit): {}",
            SATURATED_AT * 100.0,
            named.join("; ")
        ));
    }
    out
}

/// The sentences under the tables: the trends that are lines (or flat), knees, RPS per core.
/// What the cost table's roles share is [`cost_notes`]'s.
pub fn findings(h: &Headline) -> Vec<String> {
    let mut out = Vec::new();
    for f in h.fits.iter().filter(|f| !unfitted(f)) {
        out.push(format!(
            "{}: CPU {}; memory {}, over {} loads{}",
            role_of(&f.variant, &f.role),
            cpu_words(&f.cpu),
            memory_words(&f.memory),
            f.cpu.loads().max(f.memory.loads()),
            doubt(f.invalid.as_ref())
        ));
    }
    for k in &h.knees {
        out.push(format!(
            "{} at {} connections: the latency/throughput knee is at {:.0} req/s (p99 {:.3} ms){}",
            k.variant,
            k.connections,
            k.throughput_rps,
            k.p99_ms,
            doubt(k.invalid.as_ref())
        ));
    }
    for p in &h.per_core {
        out.push(per_core_words(p));
    }
    out
}

/// What a CPU sweep says one core carries: a line only over three allotments or more at the
/// role's limit; the allotments at the limit as measured; or, when it never reached its limit,
/// that the load set the rate and only a lower bound is known.
pub fn per_core_words(p: &PerCore) -> String {
    format!("{}{}", per_core_said(p), doubt(p.invalid.as_ref()))
}

/// [`per_core_words`] without the self-check's word.
fn per_core_said(p: &PerCore) -> String {
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
