//! Reading external roles from Prometheus over a step's steady window, into the same figures
//! the local sampler gives ([`RoleUsage`], [`Sample`]s), so that tables, exports and answers
//! take them unchanged.
//!
//! Each figure's query runs as a range query over exactly the window (after the warm-up, for
//! the measured duration), one point per sample interval. The points become samples on that
//! grid (rates integrated into the cumulative counters a sample holds), and the figures over
//! the window come from the sampler's own [`sampler::summarize`]: the average is the mean of
//! the points after the first, the maximum the busiest point.
//!
//! What cannot be read is *missing*, never a crash or a zero: a figure the role's source does
//! not have (no warning: it is by design), a query Prometheus refuses or that returns nothing
//! (one warning line per role), a counter that was reset or a series that came or went during
//! the window (a restarted container, a replaced pod, seen in its CPU: the whole role is
//! missing, since its figures are not a steady state; a series of another figure alone, such
//! as a pod's network series cAdvisor drops and gives again under load: that figure only), and
//! Prometheus not answering at all (one line for the step, every role missing, no further
//! query).

use std::collections::{BTreeMap, BTreeSet};

use meshbench_experiment::external::promql::{duration, with_window};
use meshbench_experiment::external::{ExternalRole, Queries};
use meshbench_lab::sampler::{self};
use meshbench_results::{Figure, PlayedBy, RoleUsage, Sample, Usage};

use super::prometheus::{PromError, Prometheus, Series};

/// The window a step's roles are read over, on the wall clock (ms since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from_ms: u64,
    pub to_ms: u64,
    /// The experiment's sample interval: the range query's step.
    pub step_ms: u64,
    /// What `$window` stands for in the queries.
    pub rate_window_ms: u64,
}

impl Window {
    /// The instants of the range query: from the window's start, every step, up to its end.
    pub fn grid(&self) -> Vec<u64> {
        let step = self.step_ms.max(1);
        (0..)
            .map(|k| self.from_ms + k * step)
            .take_while(|t| *t <= self.to_ms)
            .collect()
    }
}

/// One role as read.
#[derive(Debug, Clone)]
pub struct RoleRead {
    pub usage: RoleUsage,
    /// On the window's grid; empty when no figure was read.
    pub samples: Vec<Sample>,
}

/// Every role of a step, and what went wrong, one line each.
#[derive(Debug, Default)]
pub struct Reading {
    pub roles: Vec<RoleRead>,
    pub warnings: Vec<String>,
}

/// A role's figures as read: points on the grid (`None` where Prometheus had none).
type Points = Vec<Option<f64>>;

/// Reads `roles` over `w`.
pub fn read_roles(prom: &Prometheus, roles: &[ExternalRole], w: &Window) -> Reading {
    let grid = w.grid();
    let mut reading = Reading::default();
    let mut fatal: Option<PromError> = None;
    for role in roles {
        let queries = role.queries();
        let mut figures = query_figures(prom, &queries, w, &grid, &mut fatal);
        if !figures.empty.is_empty() {
            let line = no_series(role, &queries, &figures.empty);
            figures.problems.insert(0, line);
        }
        if fatal.is_none() && !figures.read.is_empty() {
            check_restarts(prom, w, &mut figures, &mut fatal);
        }
        if !figures.problems.is_empty() {
            reading.warnings.push(role_warning(role, &figures));
        }
        reading.roles.push(role_read(role, figures, &grid, w));
    }
    if let Some(e) = fatal {
        mark_unreachable(&mut reading, roles, &e);
    }
    reading
}

/// What one role's queries gave over the window, and what went wrong.
#[derive(Debug, Default)]
struct RoleFigures {
    /// Each figure not read, with why.
    missing: BTreeMap<Figure, String>,
    /// Each figure read, on the grid.
    read: BTreeMap<Figure, Points>,
    /// The figures whose query returned no series over the window, in [`Figure::ALL`]'s order.
    empty: Vec<Figure>,
    /// One line each, joined into the role's warning.
    problems: Vec<String>,
    /// The counter behind each figure read: what the restart check looks at.
    counters: BTreeMap<Figure, String>,
    /// The role's series restarted in the window, so every figure is missing.
    restarted: bool,
}

/// Runs each figure's query over the window. Once Prometheus does not answer at all (`fatal`,
/// here or for an earlier role), no further query is sent and each figure is missing with why.
fn query_figures(
    prom: &Prometheus,
    queries: &Queries,
    w: &Window,
    grid: &[u64],
    fatal: &mut Option<PromError>,
) -> RoleFigures {
    let mut figures = RoleFigures::default();
    for f in Figure::ALL {
        let q = match queries.query(f) {
            Ok(q) => q,
            Err(why) => {
                figures.missing.insert(f, why.to_string());
                continue;
            }
        };
        if let Some(e) = fatal.as_ref() {
            figures.missing.insert(f, e.to_string());
            continue;
        }
        let expr = with_window(&q.expr, w.rate_window_ms);
        let answer = prom.query_range(
            &expr,
            w.from_ms as f64 / 1000.0,
            w.to_ms as f64 / 1000.0,
            w.step_ms as f64 / 1000.0,
        );
        match answer {
            Err(e) if e.is_fatal() => {
                figures.missing.insert(f, e.to_string());
                *fatal = Some(e);
            }
            Err(e) => {
                figures.problems.push(format!(
                    "Prometheus refused its {} query ({}); check that query in the experiment file",
                    f.name(),
                    refusal(&e)
                ));
                figures.missing.insert(f, e.to_string());
            }
            Ok(series) => match on_grid(&series, grid) {
                Some(points) => {
                    figures.read.insert(f, points);
                    if let Some(counter) = &q.counter {
                        figures.counters.insert(f, counter.clone());
                    }
                }
                None => {
                    figures.empty.push(f);
                    figures
                        .missing
                        .insert(f, "no series over the window".into());
                }
            },
        }
    }
    figures
}

/// The line for the figures with no series (`empty`, not empty itself), with a hint at the
/// likely cause: a preset's selector, or the file's own queries.
fn no_series(role: &ExternalRole, queries: &Queries, empty: &[Figure]) -> String {
    let names: Vec<&str> = empty.iter().map(|f| f.name()).collect();
    let hint = match role.preset {
        Some(_) => {
            let sel = queries
                .query(empty[0])
                .ok()
                .and_then(|q| q.counter.clone().or_else(|| Some(q.expr.clone())))
                .unwrap_or_default();
            format!("check that Prometheus scrapes them and that `match` selects them: {sel}")
        }
        None => "check the queries in the experiment file and that Prometheus scrapes their series"
            .into(),
    };
    format!("no series for {} over the window; {hint}", names.join(", "))
}

/// Checks the counters behind the figures read for a restart in the window. When the CPU's
/// restarted (the container or its pod did), every figure read becomes missing; when another
/// figure's alone did (a pod's network series dropped and given again), that figure only. A
/// Prometheus that stops answering here is `fatal`; a refused check is one more problem.
fn check_restarts(
    prom: &Prometheus,
    w: &Window,
    figures: &mut RoleFigures,
    fatal: &mut Option<PromError>,
) {
    // The CPU's counter first: when it restarted, the others need no look.
    let mut order: Vec<(Figure, String)> = figures.counters.clone().into_iter().collect();
    order.sort_by_key(|(f, _)| *f != Figure::Cpu);
    let mut alone: Vec<(Figure, String)> = Vec::new();
    for (f, counter) in order {
        match restarts(prom, &BTreeSet::from([counter]), w) {
            Ok(None) => {}
            Ok(Some(what)) if f == Figure::Cpu => {
                figures.problems.push(format!(
                    "its series restarted during the window ({what}): a container restarted or a pod or process was replaced, so its figures are not a steady state; every figure is marked missing"
                ));
                figures.restarted = true;
                for f in figures.read.keys() {
                    figures
                        .missing
                        .insert(*f, format!("series restarted in the window: {what}"));
                }
                figures.read.clear();
                return;
            }
            Ok(Some(what)) => alone.push((f, what)),
            Err(e) if e.is_fatal() => {
                *fatal = Some(e);
                return;
            }
            Err(e) => {
                figures
                    .problems
                    .push(format!("restarts could not be checked ({})", refusal(&e)));
                return;
            }
        }
    }
    for (f, what) in alone {
        figures.problems.push(format!(
            "its {} series came or went during the window ({what}) while its CPU's did not, so its {} is marked missing",
            f.name(),
            f.name()
        ));
        figures.read.remove(&f);
        figures
            .missing
            .insert(f, format!("series came or went in the window: {what}"));
    }
}

/// The role's one warning line: its problems, and (unless it restarted, which says so itself)
/// that what is not read is marked missing.
fn role_warning(role: &ExternalRole, figures: &RoleFigures) -> String {
    format!(
        "role {} ({}): {}{}",
        role.name,
        role.program(),
        figures.problems.join("; "),
        if figures.restarted {
            ""
        } else {
            "; what is not read is marked missing"
        }
    )
}

/// The role as read: its samples on the grid and the figures over the window.
fn role_read(role: &ExternalRole, figures: RoleFigures, grid: &[u64], w: &Window) -> RoleRead {
    let samples = to_samples(&figures.read, grid);
    RoleRead::of(role, samples, figures.missing, (w.from_ms, w.to_ms))
}

impl RoleRead {
    /// `role` as read from its `samples` over `[from_ms, to_ms]` (summarised by the sampler's
    /// own `summarize`), with the figures that were not read and why.
    pub fn of(
        role: &ExternalRole,
        samples: Vec<Sample>,
        missing: BTreeMap<Figure, String>,
        (from_ms, to_ms): (u64, u64),
    ) -> RoleRead {
        let usage = match samples.is_empty() {
            true => Usage::default(),
            false => sampler::summarize(&samples, from_ms, to_ms),
        };
        RoleRead {
            usage: RoleUsage {
                // Named like a chain role, it stands for it (the exports' columns); any other
                // name is the file's own.
                role: meshbench_results::Role::from_word(&role.name),
                program: PlayedBy::External(role.program().to_string()),
                workers: 0,
                cpu_limit: None,
                usage,
                missing,
                proxy: None,
            },
            samples,
        }
    }
}

/// Prometheus stopped answering (`e`): one line for the step, first; roles read before it
/// failed keep what they had, roles after it have every figure missing.
fn mark_unreachable(reading: &mut Reading, roles: &[ExternalRole], e: &PromError) {
    let names: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
    reading.warnings.insert(
        0,
        format!(
            "{e}; the resources of {} are marked missing (the load's figures are kept); check external.prometheus_url and that Prometheus is up",
            names.join(", ")
        ),
    );
    for r in &mut reading.roles {
        if r.samples.is_empty() {
            for f in Figure::ALL {
                r.usage.missing.entry(f).or_insert_with(|| e.to_string());
            }
        }
    }
}

/// A refusal in a few words: Prometheus' own message.
fn refusal(e: &PromError) -> String {
    match e {
        PromError::Refused { kind, message } => format!("{kind}: {message}"),
        other => other.to_string(),
    }
}

/// The series of an answer summed on the grid (several series are the role's replicas or
/// interfaces); `None` when no point fell on it. Gaps are filled from the nearest earlier point
/// (the first points from the first one seen), unless fewer than half the instants have one.
fn on_grid(series: &[Series], grid: &[u64]) -> Option<Points> {
    let mut sums: Vec<Option<f64>> = vec![None; grid.len()];
    for s in series {
        for &(t, v) in &s.points {
            let t_ms = (t * 1000.0).round() as u64;
            if let Ok(i) = grid.binary_search(&t_ms) {
                *sums[i].get_or_insert(0.0) += v;
            }
        }
    }
    let have = sums.iter().filter(|v| v.is_some()).count();
    if have == 0 || have * 2 < grid.len() {
        return None;
    }
    let first = sums.iter().flatten().copied().next();
    let mut last = first;
    for v in sums.iter_mut() {
        match v {
            Some(x) => last = Some(*x),
            None => *v = last,
        }
    }
    Some(sums)
}

/// The grid's samples from the figures read: gauges as they are, rates integrated over each
/// interval into the cumulative counters of a [`Sample`].
fn to_samples(read: &BTreeMap<Figure, Points>, grid: &[u64]) -> Vec<Sample> {
    if read.is_empty() {
        return Vec::new();
    }
    let at = |f: Figure, i: usize| read.get(&f).and_then(|p| p[i]);
    let mut out: Vec<Sample> = Vec::with_capacity(grid.len());
    let (mut cpu_ns, mut rx, mut tx) = (0.0_f64, 0.0_f64, 0.0_f64);
    for (i, &t_ms) in grid.iter().enumerate() {
        if i > 0 {
            let secs = (t_ms - grid[i - 1]) as f64 / 1000.0;
            cpu_ns += at(Figure::Cpu, i).unwrap_or(0.0).max(0.0) * secs * 1e9;
            rx += at(Figure::Rx, i).unwrap_or(0.0).max(0.0) * secs;
            tx += at(Figure::Tx, i).unwrap_or(0.0).max(0.0) * secs;
        }
        out.push(Sample {
            t_ms,
            cpu_ns: cpu_ns.round() as u64,
            rss_bytes: at(Figure::Rss, i).unwrap_or(0.0).max(0.0).round() as u64,
            working_set_bytes: at(Figure::Memory, i).map(|v| v.max(0.0).round() as u64),
            rx_bytes: rx.round() as u64,
            tx_bytes: tx.round() as u64,
            connections: at(Figure::Connections, i).unwrap_or(0.0).max(0.0).round() as u64,
        });
    }
    out
}

/// Whether any of `counters` (selectors) was reset, or any of their series came or went,
/// between the start of the first rate window and the end of the window: `Some(which)`.
fn restarts(
    prom: &Prometheus,
    counters: &BTreeSet<String>,
    w: &Window,
) -> Result<Option<String>, PromError> {
    let end = w.to_ms as f64 / 1000.0;
    let lookback = w.to_ms - w.from_ms + w.rate_window_ms;
    let start = (w.to_ms - lookback) as f64 / 1000.0;
    for sel in counters {
        let reset = prom.query(&format!("resets({sel}[{}]) > 0", duration(lookback)), end)?;
        if let Some(s) = reset.first() {
            return Ok(Some(format!("counter reset: {}", which(s))));
        }
        if let Some(s) = came_or_went(prom, sel, start, end)? {
            return Ok(Some(format!("series not there for the whole window: {s}")));
        }
    }
    Ok(None)
}

/// A series of `sel` (a selector) there at `end` (seconds) and not at `start`, or the other
/// way: `Some(which)`. A rollout's new pod is scraped some seconds after it starts, so a step
/// waits until this is `None` over the span its rate windows look back.
pub fn came_or_went(
    prom: &Prometheus,
    sel: &str,
    start: f64,
    end: f64,
) -> Result<Option<String>, PromError> {
    let changed = prom.query(
        &format!("({sel} unless {sel} @ {start:.3}) or ({sel} @ {start:.3} unless {sel})"),
        end,
    )?;
    Ok(changed.first().map(which))
}

/// The labels that tell a series apart to a reader (namespace, pod, container, groupname),
/// or all of them when it has none of those.
fn which(s: &Series) -> String {
    const TELLING: [&str; 4] = ["namespace", "pod", "container", "groupname"];
    let picked: Vec<String> = TELLING
        .iter()
        .filter_map(|k| s.labels.get(*k).map(|v| format!("{k}={v:?}")))
        .collect();
    if picked.is_empty() {
        s.labels_text()
    } else {
        format!("{{{}}}", picked.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(f64, f64)]) -> Series {
        Series {
            labels: BTreeMap::new(),
            points: points.to_vec(),
        }
    }

    #[test]
    fn the_grid_runs_from_the_start_by_steps_within_the_window() {
        let w = Window {
            from_ms: 10_000,
            to_ms: 13_500,
            step_ms: 1000,
            rate_window_ms: 4000,
        };
        assert_eq!(w.grid(), [10_000, 11_000, 12_000, 13_000]);
    }

    #[test]
    fn series_are_summed_on_the_grid_and_gaps_filled() {
        let grid = [1000, 2000, 3000, 4000];
        let a = series(&[(1.0, 0.1), (2.0, 0.2), (4.0, 0.4)]);
        let b = series(&[(1.0, 1.0), (2.0, 1.0), (4.0, 1.0)]);
        let p = on_grid(&[a, b], &grid).unwrap();
        assert_eq!(p, [Some(1.1), Some(1.2), Some(1.2), Some(1.4)]);
        // Fewer than half the instants: not a reading of the window.
        assert_eq!(on_grid(&[series(&[(1.0, 1.0)])], &grid), None);
        assert_eq!(on_grid(&[], &grid), None);
    }

    #[test]
    fn rates_become_the_counters_the_sampler_would_have_read() {
        let grid: Vec<u64> = (0..=4).map(|k| 1_000_000 + k * 1000).collect();
        let mut read = BTreeMap::new();
        // A quarter of a core, and 1 MB/s in, at every point; 64 MiB resident.
        read.insert(Figure::Cpu, vec![Some(0.25); 5]);
        read.insert(Figure::Rx, vec![Some(1e6); 5]);
        read.insert(Figure::Rss, vec![Some(64.0 * 1048576.0); 5]);
        let samples = to_samples(&read, &grid);
        let u = sampler::summarize(&samples, grid[0], grid[4]);
        assert_eq!(u.samples, 5);
        assert!((u.cpu_millicores_avg - 250.0).abs() < 1e-6, "{u:?}");
        assert!((u.cpu_millicores_max - 250.0).abs() < 1e-6, "{u:?}");
        assert!((u.rx_bytes_per_sec - 1e6).abs() < 1e-6, "{u:?}");
        assert_eq!(u.rss_mib_avg, 64.0);
        assert_eq!(u.working_set_mib_avg, None);
    }
}
