//! The step tables a run prints at its end and `results show` prints again: the load table
//! (each step's load, latency and its roles' CPU and memory, each Envoy role's own counts under
//! its step, the marks of failed, partial and invalid steps and the notes they call for), then
//! the control plane's table of the `control_plane` steps.

use std::collections::BTreeMap;

use meshbench_results::{Cause, LoadPoint, Role, RoleUsage, StepFailure};
use meshbench_store::{ResultSummary, StepRecord, StepStatus};

/// The step tables, from fresh records or stored ones: the load table of the steps that send
/// load (printed too when there is no step at all, as its header), then the control plane's
/// (`meshbench_report::control_plane`) of the `control_plane` steps, which send none and are
/// not rows of the load table.
pub fn tables(steps: &[&StepRecord]) -> String {
    let (control_plane, load): (Vec<&StepRecord>, Vec<&StepRecord>) =
        steps.iter().partition(|s| s.params.mesh.is_some());
    let mut out = String::new();
    if !load.is_empty() || control_plane.is_empty() {
        let view: Vec<TableRow> = load.iter().map(|r| TableRow::of(r)).collect();
        out.push_str(&table(&view));
    }
    out.push_str(&meshbench_report::control_plane::table(&control_plane));
    out
}

/// One line of the step table, from a fresh record or a stored one.
pub struct TableRow<'a> {
    pub seq: u32,
    pub variant: &'a str,
    pub load: LoadPoint,
    pub summary: Option<ResultSummary>,
    pub error: Option<&'a StepFailure>,
    /// Interrupted before its end: its figures cover only part of the step.
    pub partial: bool,
    /// Why the generator's self-check calls the step invalid, if it does.
    pub invalid: Option<Cause>,
    pub usage: &'a [RoleUsage],
    /// Each Envoy role's own counts, one line each, and whether one disagrees with the
    /// engine's (`analysis::witness`).
    pub proxies: Vec<String>,
    pub disagrees: bool,
}

impl<'a> TableRow<'a> {
    pub fn of(r: &'a StepRecord) -> TableRow<'a> {
        TableRow {
            seq: r.seq,
            variant: &r.variant,
            load: r.load_point(),
            summary: r.summary(),
            error: r.error.as_ref(),
            partial: r.status == StepStatus::Partial,
            invalid: r
                .result
                .as_ref()
                .and_then(meshbench_analysis::invalid::of_result),
            usage: &r.usage,
            proxies: meshbench_report::proxies::step_lines(r),
            disagrees: meshbench_report::proxies::flagged(r),
        }
    }
}

/// Whether a role's figures are printed on its step's row: every role of the system under test,
/// not meshbench's own sampler (checked apart, as the generator's self-check).
fn shown_with_its_step(role: &Role) -> bool {
    match role {
        Role::Chain(_) | Role::External(_) | Role::Istiod | Role::Contour => true,
        Role::Sampler => false,
    }
}

/// Steps with their load, latency, and each role's CPU (millicores) and memory (MiB: the
/// cgroup's working set where there is one, else RSS).
pub fn table(rows: &[TableRow]) -> String {
    // Columns as wide as their words, so that the roles fit beside the figures.
    let vw = rows
        .iter()
        .map(|r| r.variant.chars().count())
        .chain([7])
        .max()
        .unwrap_or(7);
    let lw = rows
        .iter()
        .map(|r| r.load.to_string().chars().count())
        .chain([4])
        .max()
        .unwrap_or(4);
    let mut out = format!(
        "{:>4} {:<vw$} {:<lw$} {:>9} {:>7} {:>7} {:>7} {:>6}  {}\n",
        "step",
        "variant",
        "load",
        "req/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "errors",
        "role millicores/MiB"
    );
    for r in rows {
        out.push_str(&step_lines(r, vw, lw));
    }
    out.push_str(&disagreements(rows));
    out.push_str(&invalid_steps(rows));
    out
}

/// One step's lines: its figures with its roles' and its marks beside them (or why it failed),
/// then each Envoy's own counts; `vw` and `lw` are the variant's and the load's widths.
fn step_lines(r: &TableRow, vw: usize, lw: usize) -> String {
    let mut out = String::new();
    let load = r.load.to_string();
    match &r.summary {
        Some(s) => {
            let figures = format!(
                "{:>4} {:<vw$} {:<lw$} {:>9.1} {:>7} {:>7} {:>7} {:>6}",
                r.seq + 1,
                r.variant,
                load,
                s.throughput_rps,
                meshbench_report::ms(s.p50_us),
                meshbench_report::ms(s.p90_us),
                meshbench_report::ms(s.p99_us),
                s.errors,
            );
            let roles = role_figures(r);
            let last = roles.len().saturating_sub(1);
            let items: Vec<String> = roles
                .iter()
                .enumerate()
                .map(|(i, role)| {
                    if i < last {
                        format!("{role},")
                    } else {
                        role.clone()
                    }
                })
                .chain(marks(r).iter().map(|m| format!(" {m}")))
                .collect();
            out.push_str(&meshbench_report::answers::beside(&figures, &items));
        }
        None => out.push_str(&meshbench_report::answers::wrap(
            &format!(
                "FAILED: {}",
                r.error.map(StepFailure::to_string).unwrap_or_default()
            ),
            &format!("{:>4} {:<vw$} {:<lw$} ", r.seq + 1, r.variant, load),
            "       ",
        )),
    }
    for line in &r.proxies {
        out.push_str(&meshbench_report::answers::wrap(line, "     ", "       "));
    }
    out
}

/// `ROLE CPUm/MiB` of each role shown with its step; a figure not measured (an external
/// role's query failed) is `-`.
fn role_figures(r: &TableRow) -> Vec<String> {
    r.usage
        .iter()
        .filter(|u| shown_with_its_step(&u.role))
        .map(|u| {
            let cpu = u
                .cpu_millicores()
                .map_or("-".into(), |c| format!("{c:.0}m"));
            let mem = u.memory_mib().map_or("-".into(), |m| format!("{m:.1}"));
            format!("{} {cpu}/{mem}", u.role)
        })
        .collect()
}

/// What the step's row is marked with: failed or partial, invalid by the self-check, an
/// Envoy's own count that disagrees.
fn marks(r: &TableRow) -> Vec<String> {
    let mut marks: Vec<String> = Vec::new();
    match (r.error, r.partial) {
        (Some(e), _) => marks.push(format!("FAILED: {e}")),
        (None, true) => marks.push("PARTIAL (interrupted)".to_string()),
        (None, false) => {}
    }
    if let Some(cause) = r.invalid {
        marks.push(meshbench_analysis::invalid::mark(cause));
    }
    if r.disagrees {
        marks.push(format!(
            "{}: an Envoy's own count",
            meshbench_report::proxies::FLAG
        ));
    }
    marks
}

/// The note under the table when some steps have an Envoy whose own count disagrees; empty
/// when none has.
fn disagreements(rows: &[TableRow]) -> String {
    let disagree = rows.iter().filter(|r| r.disagrees).count();
    if disagree == 0 {
        return String::new();
    }
    meshbench_report::answers::wrap(
        &format!(
            "{}: {disagree} of {} steps have an Envoy whose own request count lies outside what the measured window and its edges can hold (warm-up, requests in flight, unfinished, retries); something went around the proxy or was counted twice (docs/answers.md, Envoy as a second witness)",
            meshbench_report::proxies::FLAG,
            rows.len()
        ),
        "",
        "  ",
    )
}

/// The note under the table when the generator's self-check calls some steps invalid, with
/// how many for each cause; empty when it calls none.
fn invalid_steps(rows: &[TableRow]) -> String {
    let mut causes: BTreeMap<&str, usize> = BTreeMap::new();
    for cause in rows.iter().filter_map(|r| r.invalid) {
        *causes.entry(cause.name()).or_default() += 1;
    }
    if causes.is_empty() {
        return String::new();
    }
    let counted: Vec<String> = causes.iter().map(|(c, n)| format!("{c}: {n}")).collect();
    meshbench_report::answers::wrap(
        &format!(
            "INVALID by the generator's own check: {} of {} steps ({}); their figures may be the generator's, not the target's; the JSON export says why, step by step (docs/result.md, the self-check)",
            causes.values().sum::<usize>(),
            rows.len(),
            counted.join(", ")
        ),
        "",
        "  ",
    )
}
