//! `meshbench report`: an experiment's answers as one self-contained HTML file (inline SVG and
//! CSS, no script, no network; readable offline and printable) plus every chart as SVG and PNG.
//! The report is built as a structure first (sections of sentences, tables and charts), so that
//! its outline can be checked against a golden file, and then written.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use meshbench_analysis::headline::{Allotment, Headline, Saturation, KNEE_MIN_LOADS};
use meshbench_analysis::runs::{distinct, percentile_name, Group, PERCENTILES};
use meshbench_results::Role;
use meshbench_store::StoredStep;
use thiserror::Error;

use crate::answers::{
    added_table, cost_table, cpu_words, findings, latency_table, memory_words, per_core_words,
    Table,
};
use crate::plot::{self, Chart, Draw, Series, XAxis};
use meshbench_analysis::trend::Trend;

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("cannot write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error("chart {id}: {reason}")]
    Chart { id: String, reason: String },
    #[error("no TrueType font for the charts (looked for DejaVu Sans, Liberation Sans, Noto Sans); install fonts-dejavu-core")]
    NoFont,
}

/// A piece of a section.
#[derive(Debug, Clone)]
pub enum Block {
    Text(String),
    /// A sentence computed from the data (how many there are depends on it).
    Finding(String),
    /// A table under its caption (every table has one: it says what the rows are).
    Table {
        caption: String,
        table: Table,
    },
    Chart(Box<Chart>),
}

#[derive(Debug, Clone)]
pub struct Section {
    pub title: String,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub title: String,
    pub subtitle: String,
    pub sections: Vec<Section>,
}

/// What the report is built from.
pub struct Input<'a> {
    pub name: &'a str,
    pub id: i64,
    pub started_at: &'a str,
    pub status: &'a str,
    pub headline: &'a Headline,
    /// Warm-up before each step's measured window (shaded on the timelines).
    pub warmup_secs: f64,
    /// Drawn on the latency/throughput chart.
    pub slo_p99_ms: Option<f64>,
    /// Steps that failed, with their error (listed, not plotted).
    pub failed: Vec<String>,
    /// Every stored step: their Envoy roles' own counts get a table of their own.
    pub steps: &'a [StoredStep],
}

fn variant_colors(h: &Headline) -> impl Fn(&str) -> usize + '_ {
    let variants = h.variants();
    move |v: &str| variants.iter().position(|x| x == v).unwrap_or(0)
}

/// Builds the report's structure.
pub fn build(input: &Input) -> Report {
    let h = input.headline;
    // The headline is of loads: an experiment of control-plane steps alone has none (unless
    // a step failed, which it says).
    let mut sections: Vec<Section> = Some(headline_section(input))
        .filter(|s| !s.blocks.is_empty())
        .into_iter()
        .collect();
    if let Some(t) = crate::proxies::table(input.steps) {
        let flagged = input
            .steps
            .iter()
            .filter(|s| crate::proxies::flagged(&s.step))
            .count();
        let mut blocks = vec![
            Block::Text(format!(
                "Envoy's own counts: each Envoy role's admin read before the load and after it (requests seen by response class, upstream failures, connections open and memory at the end), beside the requests the engine measured. A role whose count lies outside what the window's edges can hold (warm-up, requests in flight at either end, unfinished, retries) is marked {}; tunnels (L4) show the connections they carried and are never compared.",
                crate::proxies::FLAG
            )),
            Block::Table {
                caption: "Envoy's own counts beside the engine's".into(),
                table: t,
            },
        ];
        if flagged > 0 {
            blocks.push(Block::Finding(format!(
                "{flagged} step(s) have an Envoy whose own count disagrees with the engine's: check what went around the proxy or what the generator counted before trusting their figures."
            )));
        }
        sections.push(Section {
            title: "Envoy's own counts".into(),
            blocks,
        });
    }
    if let Some(section) = attribution_section(input.steps) {
        sections.push(section);
    }
    if let Some(section) = control_plane_section(input.steps) {
        sections.push(section);
    }
    // An experiment of control-plane steps alone has no load to chart or to follow in time.
    let measured = if h.groups.is_empty() {
        let steps = crate::control_plane::steps(input.steps.iter().map(|s| &s.step)).len();
        format!("{steps} control-plane steps")
    } else {
        sections.extend(load_sections(input));
        format!(
            "{} measurements of {} variants",
            h.groups.len(),
            h.variants().len()
        )
    };
    Report {
        title: format!("meshbench report: {}", input.name),
        subtitle: format!(
            "experiment {}, started {}, {}; {measured}",
            input.id, input.started_at, input.status
        ),
        sections,
    }
}

/// The sections of the load: the charts the experiment's shape calls for, then each step's
/// timeline.
fn load_sections(input: &Input) -> Vec<Section> {
    let h = input.headline;
    let mut sections = Vec::new();
    let mut charts = Vec::new();
    match shape(h) {
        Shape::OneLoad => {
            charts.extend(latency_by_variant(h));
            charts.extend(cost_by_variant(h));
        }
        Shape::LoadSweep => {
            charts.extend(latency_vs_qps(h));
            charts.extend(latency_vs_connections(h));
            charts.extend(cost_vs_qps(h));
            charts.extend(latency_throughput(h, input.slo_p99_ms));
        }
        Shape::CpuSweep => {
            charts.extend(latency_vs_qps(h));
            charts.extend(latency_vs_connections(h));
            charts.extend(over_allotment(h));
            charts.extend(rps_vs_allotment(h));
            charts.extend(latency_throughput(h, input.slo_p99_ms));
        }
    }
    charts.extend(spectrum(h));
    if !charts.is_empty() {
        sections.push(Section {
            title: "Charts".into(),
            blocks: charts
                .into_iter()
                .map(|c| Block::Chart(Box::new(c)))
                .collect(),
        });
    }
    sections.push(Section {
        title: "Each step over time".into(),
        blocks: timelines(h, input.warmup_secs)
            .into_iter()
            .map(|c| Block::Chart(Box::new(c)))
            .collect(),
    });
    sections
}

fn headline_section(input: &Input) -> Section {
    let h = input.headline;
    let mut blocks = Vec::new();
    if !h.added.is_empty() {
        let margin = h
            .added
            .iter()
            .flat_map(|a| &a.deltas)
            .any(|d| d.test.margin.is_some());
        blocks.push(Block::Text(format!(
            "Latency each variant adds over the baseline at the same load: per percentile, the shift in ms with its 95 % interval under it, and the verdict ({}; how it is tested: docs/answers.md).",
            crate::answers::verdict_legend(margin)
        )));
        blocks.push(Block::Table {
            caption: crate::answers::titled(
                "Latency added over the baseline (ms)",
                h.added.iter().map(|a| &a.load),
            ),
            table: added_table(h),
        });
    }
    if !h.costs.is_empty() {
        blocks.push(Block::Text(
            "What each proxy costs: CPU in millicores and in vCPU per 1000 requests per second, requests per second one core carries where the proxy ran at its CPU limit (90 % of its allotment or more; below it, ≥ what its allotted cores carried, a lower bound), memory, bandwidth per 1000 RPS, and requests per day at the measured rate.".into(),
        ));
        blocks.push(Block::Table {
            caption: format!(
                "{} (medians over repeats)",
                crate::answers::titled("What each proxy costs", h.costs.iter().map(|c| &c.load))
            ),
            table: cost_table(h),
        });
    }
    if !h.groups.is_empty() {
        blocks.push(Block::Table {
            caption: format!(
                "{} (merged percentiles, median req/s)",
                crate::answers::titled(
                    "Latency and throughput of every measurement",
                    h.groups.iter().map(|g| &g.load)
                )
            ),
            table: latency_table(h),
        });
    }
    for f in findings(h) {
        blocks.push(Block::Finding(f));
    }
    for f in &input.failed {
        blocks.push(Block::Finding(format!("Failed step: {f}")));
    }
    Section {
        title: "Headline".into(),
        blocks,
    }
}

/// What an experiment varies, which decides what its charts plot against what (as the seeds
/// draw theirs): a chart over a quantity the experiment did not vary has an x axis of noise
/// (992..1000 req/s for one offered rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One offered rate at one connection count (arrivals or response sizes may differ): bars
    /// per variant, one bar per load.
    OneLoad,
    /// The offered rate or the connections swept: lines over the load.
    LoadSweep,
    /// A role's CPU allotment swept: lines over the allotment.
    CpuSweep,
}

/// The `control_plane` steps' section: istiod's cost and the propagation of changes, one row
/// per step (as `results show` prints them).
fn control_plane_section(steps: &[StoredStep]) -> Option<Section> {
    let table = crate::control_plane::report_table(steps.iter().map(|s| &s.step))?;
    Some(Section {
        title: "The control plane".into(),
        blocks: vec![
            Block::Text("The control plane's cost: istiod's CPU (millicores) and memory (MiB) over the step's window while changes were written at the step's rates; how long the simulated proxies took to converge; per xDS type, the p50/p99 in ms from a change written to the API server until each proxy ACKed it, with the (change, proxy) pairs never ACKed; istiod's pushes; the xDS bytes the proxies received per second; and whether a simulated proxy with the real Envoy's node was sent what that Envoy ACKed (docs/seeds.md, docs/experiment.md).".into()),
            Block::Table {
                caption: "istiod's cost and the propagation of changes, per control-plane step".into(),
                table,
            },
        ],
    })
}

/// Where the latency goes, when a step had attribution on: the stacked bars, then per
/// variant what was sampled and its table.
fn attribution_section(steps: &[StoredStep]) -> Option<Section> {
    let all = meshbench_analysis::attribution::by_variant(steps);
    if all.is_empty() {
        return None;
    }
    let mut blocks = vec![Block::Text(
        "Per-hop attribution: a sample of the requests carried an id that each L7 Envoy on the path logged with its own instants; joined with the engine's, each request splits into parts that add up to its latency. A part's share of a percentile is its mean over the sampled requests ranked around that percentile, with a 95 % interval; the residual is the run's percentile minus the sum (docs/answers.md).".into(),
    )];
    blocks.extend(
        crate::attribution::charts(&all)
            .into_iter()
            .map(|c| Block::Chart(Box::new(c))),
    );
    for a in &all {
        blocks.push(Block::Finding(crate::attribution::sentence(a)));
        if let Some(thin) = crate::attribution::thin_bands(a) {
            blocks.push(Block::Finding(thin));
        }
        if !a.shares.is_empty() {
            blocks.push(Block::Table {
                caption: format!("Where the latency goes: {} at {}", a.variant, a.load),
                table: crate::attribution::table(a),
            });
        }
    }
    Some(Section {
        title: "Where the latency goes".into(),
        blocks,
    })
}

/// The shape of the experiment `h` measured.
pub fn shape(h: &Headline) -> Shape {
    let rates = distinct(h.groups.iter().map(|g| g.load.rate_rps_milli())).len();
    let conns = distinct(h.groups.iter().map(|g| g.load.connections)).len();
    if h.groups.iter().any(|g| g.cpu.is_some()) {
        Shape::CpuSweep
    } else if rates > 1 || conns > 1 {
        Shape::LoadSweep
    } else {
        Shape::OneLoad
    }
}

/// The loads of `h` in the order they first come: one bar series each.
fn loads_of(h: &Headline) -> Vec<meshbench_results::LoadPoint> {
    distinct(h.groups.iter().map(|g| g.load))
}

/// One load: a chart of bars per percentile, a category per variant, a bar per load.
fn latency_by_variant(h: &Headline) -> Vec<Chart> {
    let variants = h.variants();
    let loads = loads_of(h);
    PERCENTILES
        .iter()
        .map(|&q| {
            let name = percentile_name(q);
            let mut c = Chart::new(
                &format!("latency_{}_by_variant", name.replace('.', "")),
                &format!("{name} latency by variant"),
                "variant",
                &format!("{name} latency (ms)"),
            );
            c.x_axis = XAxis::Categories(variants.clone());
            for (i, load) in loads.iter().enumerate() {
                c.series.push(Series {
                    name: load.to_string(),
                    points: variants
                        .iter()
                        .enumerate()
                        .filter_map(|(x, v)| {
                            let g = h.groups.iter().find(|g| g.variant == *v && g.load == *load)?;
                            Some((x as f64, g.latency_ms(q)))
                        })
                        .collect(),
                    draw: Draw::Bars,
                    color: i,
                });
            }
            let highest = h
                .groups
                .iter()
                .max_by(|a, b| a.latency_ms(q).total_cmp(&b.latency_ms(q)));
            let lowest = h
                .groups
                .iter()
                .min_by(|a, b| a.latency_ms(q).total_cmp(&b.latency_ms(q)));
            c.sentence = match (highest, lowest) {
                (Some(hi), Some(lo)) => format!(
                    "{name} is highest for {} at {} ({:.3} ms) and lowest for {} at {} ({:.3} ms); the table above says which differences are more than noise.",
                    hi.variant,
                    hi.load,
                    hi.latency_ms(q),
                    lo.variant,
                    lo.load,
                    lo.latency_ms(q)
                ),
                _ => String::new(),
            };
            c
        })
        .collect()
}

/// The (variant, role) pairs whose cost was measured, in the order they first come: one
/// category or line each in the cost charts.
fn cost_keys(h: &Headline) -> Vec<(String, Role)> {
    distinct(
        h.costs
            .iter()
            .map(|c| (c.variant.clone(), c.usage.role.clone())),
    )
}

/// One load: each proxy's CPU and memory as bars, a category per variant and role, a bar per
/// load.
fn cost_by_variant(h: &Headline) -> Vec<Chart> {
    if h.costs.is_empty() {
        return Vec::new();
    }
    let keys = cost_keys(h);
    let loads = loads_of(h);
    let names: Vec<String> = keys.iter().map(|(v, r)| format!("{v} {r}")).collect();
    let mut out = Vec::new();
    for (what, unit) in [("CPU", "millicores"), ("memory", "MiB")] {
        let figure = |c: &meshbench_analysis::headline::Cost| {
            if what == "CPU" {
                c.usage.cpu_millicores
            } else {
                c.usage.memory_mib
            }
        };
        let mut c = Chart::new(
            &format!("proxy_{}_by_variant", what.to_lowercase()),
            &format!("Proxy {what} by variant"),
            "variant and role",
            &format!("{what} ({unit})"),
        );
        c.x_axis = XAxis::Categories(names.clone());
        for (i, load) in loads.iter().enumerate() {
            let points: Vec<(f64, f64)> =
                keys.iter()
                    .enumerate()
                    .filter_map(|(x, (v, role))| {
                        let cost = h.costs.iter().find(|c| {
                            c.variant == *v && c.usage.role == *role && c.load == *load
                        })?;
                        // Not measured (an external role's query failed): no bar.
                        Some((x as f64, figure(cost))).filter(|p| p.1.is_finite())
                    })
                    .collect();
            if !points.is_empty() {
                c.series.push(Series {
                    name: load.to_string(),
                    points,
                    draw: Draw::Bars,
                    color: i,
                });
            }
        }
        let most = h
            .costs
            .iter()
            .filter(|c| figure(c).is_finite())
            .max_by(|a, b| figure(a).total_cmp(&figure(b)));
        c.sentence = match most {
            Some(m) => format!(
                "Each bar is one load, medians over repeats; the most {what} is {} in {} at {} ({:.1} {unit}).",
                m.usage.role,
                m.variant,
                m.load,
                figure(m)
            ),
            None => "No proxy's figure was measured.".into(),
        };
        out.push(c);
    }
    out
}

/// A CPU sweep: p50 and p99 latency, and each limited proxy's CPU and memory, as lines over
/// the swept role's allotment (one line per topology and load).
fn over_allotment(h: &Headline) -> Vec<Chart> {
    let swept: Vec<&Group> = h.groups.iter().filter(|g| g.cpu.is_some()).collect();
    let Some(role) = swept.first().and_then(|g| g.cpu.as_ref()).map(|c| c.role) else {
        return Vec::new();
    };
    let many_loads = distinct(swept.iter().map(|g| g.load)).len() > 1;
    let lines = distinct(swept.iter().map(|g| (g.topology.clone(), g.load)));
    let label = |topology: &meshbench_results::Subject, load: &meshbench_results::LoadPoint| {
        if many_loads {
            format!("{topology}, {load}")
        } else {
            topology.to_string()
        }
    };
    let cores = |g: &Group| g.cpu.as_ref().map_or(0.0, |c| c.cores);
    let mut out = Vec::new();
    for q in [0.5, 0.99] {
        let name = percentile_name(q);
        let mut c = Chart::new(
            &format!("latency_{}_vs_cpu", name.replace('.', "")),
            &format!("{name} latency vs {role} CPU allotment"),
            &format!("{role} CPU allotment (cores)"),
            &format!("{name} latency (ms)"),
        );
        for (i, (topology, load)) in lines.iter().enumerate() {
            let mut points: Vec<(f64, f64)> = swept
                .iter()
                .filter(|g| g.topology == *topology && g.load == *load)
                .map(|g| (cores(g), g.latency_ms(q)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            c.series.push(Series {
                name: label(topology, load),
                points,
                draw: Draw::LinePoints,
                color: i,
            });
        }
        c.sentence = format!(
            "{name} latency at each CPU allotment of {role}; the throughput chart below says where it reached its limit."
        );
        out.push(c);
    }
    for (what, unit) in [("CPU", "millicores"), ("memory", "MiB")] {
        let mut c = Chart::new(
            &format!("proxy_{}_vs_cpu", what.to_lowercase()),
            &format!("Proxy {what} vs {role} CPU allotment"),
            &format!("{role} CPU allotment (cores)"),
            &format!("{what} ({unit})"),
        );
        let keys = distinct(h.costs.iter().filter_map(|c| {
            let g = swept
                .iter()
                .find(|g| g.variant == c.variant && g.load == c.load)?;
            Some((g.topology.clone(), c.usage.role.clone(), c.load))
        }));
        for (i, (topology, proxy, load)) in keys.iter().enumerate() {
            let mut points: Vec<(f64, f64)> = h
                .costs
                .iter()
                .filter(|c| c.usage.role == *proxy && c.load == *load)
                .filter_map(|c| {
                    let g = swept.iter().find(|g| {
                        g.variant == c.variant && g.load == c.load && g.topology == *topology
                    })?;
                    let y = if what == "CPU" {
                        c.usage.cpu_millicores
                    } else {
                        c.usage.memory_mib
                    };
                    Some((cores(g), y)).filter(|p| p.1.is_finite())
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            c.series.push(Series {
                name: format!("{} {proxy}", label(topology, load)),
                points,
                draw: Draw::LinePoints,
                color: i,
            });
        }
        c.sentence =
            format!("Each proxy's {what} at each CPU allotment of {role}, medians over repeats.");
        out.push(c);
    }
    out
}

/// The connection count most groups use (the one the QPS charts are drawn at).
fn main_connections(h: &Headline) -> Option<u32> {
    let conns = distinct(h.groups.iter().map(|g| g.load.connections));
    conns
        .into_iter()
        .max_by_key(|c| h.groups.iter().filter(|g| g.load.connections == *c).count())
}

fn latency_vs_qps(h: &Headline) -> Vec<Chart> {
    let qps = distinct(h.groups.iter().filter_map(|g| g.load.rate_rps_milli()));
    let Some(conns) = main_connections(h) else {
        return Vec::new();
    };
    if qps.len() < 2 {
        return Vec::new();
    }
    let col = variant_colors(h);
    PERCENTILES
        .iter()
        .map(|&q| {
            let name = percentile_name(q);
            let mut c = Chart::new(
                &format!("latency_{}_vs_qps", name.replace('.', "")),
                &format!("{name} latency vs offered load ({conns} connections)"),
                "offered load (requests per second)",
                &format!("{name} latency (ms)"),
            );
            let mut top: Vec<(String, f64, f64)> = Vec::new();
            for v in h.variants() {
                let mut pts: Vec<(f64, f64)> = h
                    .groups
                    .iter()
                    .filter(|g| g.variant == v && g.load.connections == conns)
                    .filter_map(|g| Some((g.load.rate_rps()?, g.latency_ms(q))))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if let Some(last) = pts.last() {
                    top.push((v.clone(), last.0, last.1));
                }
                c.series.push(Series {
                    name: v.clone(),
                    points: pts,
                    draw: Draw::LinePoints,
                    color: col(&v),
                });
            }
            c.sentence = match top.iter().max_by(|a, b| a.2.total_cmp(&b.2)) {
                Some((v, at, ms)) => {
                    let low = top.iter().min_by(|a, b| a.2.total_cmp(&b.2));
                    format!(
                        "At the highest load, {name} is highest for {v} ({ms:.3} ms at {at} qps){}.",
                        match low {
                            Some((lv, _, lms)) if lv != v => format!(" and lowest for {lv} ({lms:.3} ms)"),
                            _ => String::new(),
                        }
                    )
                }
                None => String::new(),
            };
            c
        })
        .collect()
}

fn latency_vs_connections(h: &Headline) -> Vec<Chart> {
    let conns = distinct(h.groups.iter().map(|g| g.load.connections));
    if conns.len() < 2 {
        return Vec::new();
    }
    let col = variant_colors(h);
    // At the rate most groups share (or the closed loop).
    let rates = distinct(h.groups.iter().map(|g| g.load.rate_rps_milli()));
    let rate = rates
        .into_iter()
        .max_by_key(|r| {
            h.groups
                .iter()
                .filter(|g| g.load.rate_rps_milli() == *r)
                .count()
        })
        .flatten();
    [0.5, 0.99]
        .iter()
        .map(|&q| {
            let name = percentile_name(q);
            let at = rate.map_or("a closed loop".to_string(), |r| format!("{} qps", r as f64 / 1000.0));
            let mut c = Chart::new(
                &format!("latency_{}_vs_connections", name.replace('.', "")),
                &format!("{name} latency vs connections ({at})"),
                "connections",
                &format!("{name} latency (ms)"),
            );
            let mut growth: Vec<(String, f64)> = Vec::new();
            for v in h.variants() {
                let mut pts: Vec<(f64, f64)> = h
                    .groups
                    .iter()
                    .filter(|g| g.variant == v && g.load.rate_rps_milli() == rate)
                    .map(|g| (g.load.connections as f64, g.latency_ms(q)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if let (Some(a), Some(b)) = (pts.first(), pts.last()) {
                    growth.push((v.clone(), b.1 - a.1));
                }
                c.series.push(Series {
                    name: v.clone(),
                    points: pts,
                    draw: Draw::LinePoints,
                    color: col(&v),
                });
            }
            c.sentence = match growth.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
                Some((v, d)) => format!(
                    "From the fewest to the most connections, {name} grows most for {v} ({d:+.3} ms)."
                ),
                None => String::new(),
            };
            c
        })
        .collect()
}

fn cost_vs_qps(h: &Headline) -> Vec<Chart> {
    if h.costs.is_empty() {
        return Vec::new();
    }
    let keys = cost_keys(h);
    let mut out = Vec::new();
    for (what, unit) in [("CPU", "millicores"), ("memory", "MiB")] {
        let mut c = Chart::new(
            &format!("proxy_{}_vs_qps", what.to_lowercase()),
            &format!("Proxy {what} vs throughput"),
            "throughput (requests per second)",
            &format!("{what} ({unit})"),
        );
        for (i, (v, role)) in keys.iter().enumerate() {
            let mut pts: Vec<(f64, f64)> = h
                .costs
                .iter()
                .filter(|c| c.variant == *v && c.usage.role == *role)
                .map(|c| {
                    (
                        c.throughput_rps,
                        if what == "CPU" {
                            c.usage.cpu_millicores
                        } else {
                            c.usage.memory_mib
                        },
                    )
                })
                // Not measured (an external role's query failed): no point.
                .filter(|p| p.1.is_finite())
                .collect();
            if pts.is_empty() {
                continue;
            }
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            c.series.push(Series {
                name: format!("{v} {role}"),
                points: pts.clone(),
                draw: Draw::Points,
                color: i,
            });
            // The trend where one is defined (three loads or more): its line, or level when
            // flat; none with fewer loads.
            let trend = h
                .fits
                .iter()
                .find(|f| f.variant == *v && f.role == *role)
                .map(|f| if what == "CPU" { f.cpu } else { f.memory });
            let (x0, x1) = (pts[0].0, pts[pts.len() - 1].0);
            let drawn = match trend {
                Some(Trend::Rising(l)) => Some(("fit", l.at(x0), l.at(x1))),
                Some(Trend::Flat { level, .. }) => Some(("flat", level, level)),
                _ => None,
            };
            if let Some((how, y0, y1)) = drawn {
                c.series.push(Series {
                    name: format!("{v} {role} {how}"),
                    points: vec![(x0, y0), (x1, y1)],
                    draw: Draw::Dashed,
                    color: i,
                });
            }
        }
        let trend = |f: &meshbench_analysis::headline::CostFit| {
            if what == "CPU" {
                f.cpu
            } else {
                f.memory
            }
        };
        let words = |t: &Trend| {
            if what == "CPU" {
                cpu_words(t)
            } else {
                memory_words(t)
            }
        };
        let steepest = h
            .fits
            .iter()
            .filter_map(|f| Some((f, trend(f).line()?)))
            .max_by(|a, b| a.1.slope.total_cmp(&b.1.slope));
        c.sentence = match (steepest, h.fits.first()) {
            (Some((f, _)), _) => format!(
                "The {what} that grows most with load is {} in {}'s: {} (dashed: the fitted line, or the level of a flat one).",
                f.role,
                f.variant,
                words(&trend(f))
            ),
            (None, Some(f)) => format!(
                "Each point is one load; no line: {} {}'s {what} is {}.",
                f.variant,
                f.role,
                words(&trend(f))
            ),
            (None, None) => "Each point is one load.".into(),
        };
        out.push(c);
    }
    out
}

fn rps_vs_allotment(h: &Headline) -> Vec<Chart> {
    h.per_core
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut c = Chart::new(
                &format!("rps_vs_cpu_{}_{}", p.topology, i),
                &format!(
                    "Throughput vs {} CPU allotment ({}, {})",
                    p.role, p.topology, p.load
                ),
                &format!("{} CPU allotment (cores)", p.role),
                "throughput (requests per second)",
            );
            let (limited, below): (Vec<Allotment>, Vec<Allotment>) =
                p.points.iter().partition(|a| a.at_limit());
            for (name, points, color) in [
                ("at its CPU limit", limited, 0),
                ("below its limit", below, 7),
            ] {
                if !points.is_empty() {
                    c.series.push(Series {
                        name: name.into(),
                        points: points.iter().map(|a| (a.cores, a.throughput_rps)).collect(),
                        draw: Draw::Points,
                        color,
                    });
                }
            }
            if let Some(fit) = p.fit {
                let at = p.at_limit();
                let (x0, x1) = (at[0].cores, at[at.len() - 1].cores);
                c.series.push(Series {
                    name: format!("fit: {:.0} RPS per added core", fit.slope),
                    points: vec![(x0, fit.at(x0)), (x1, fit.at(x1))],
                    draw: Draw::Dashed,
                    color: 1,
                });
            }
            c.sentence = format!(
                "{}. `meshbench size` uses the RPS per core measured at the limit.",
                per_core_words(p)
            );
            c
        })
        .collect()
}

fn latency_throughput(h: &Headline, slo: Option<f64>) -> Vec<Chart> {
    let keys = distinct(
        h.groups
            .iter()
            .map(|g| (g.variant.clone(), g.load.connections)),
    );
    if h.groups.len() < 2 {
        return Vec::new();
    }
    let col = variant_colors(h);
    let mut c = Chart::new(
        "latency_throughput",
        "p99 latency vs throughput",
        "throughput (requests per second)",
        "p99 latency (ms)",
    );
    let many_conns = distinct(h.groups.iter().map(|g| g.load.connections)).len() > 1;
    for (v, conns) in &keys {
        let mut pts: Vec<(f64, f64)> = h
            .groups
            .iter()
            .filter(|g| g.variant == *v && g.load.connections == *conns)
            .map(|g| (g.throughput(), g.latency_ms(0.99)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        c.series.push(Series {
            name: if many_conns {
                format!("{v}, {conns} conns")
            } else {
                v.clone()
            },
            points: pts,
            draw: Draw::LinePoints,
            color: col(v),
        });
    }
    for k in &h.knees {
        c.marks
            .push((k.throughput_rps, k.p99_ms, format!("knee {}", k.variant)));
    }
    if let Some(ms) = slo {
        c.hline = Some((ms, format!("SLO p99 < {ms} ms")));
    }
    let sat: Vec<&Saturation> = h.saturation.iter().collect();
    let loads = h.most_loads_on_a_curve();
    c.sentence = if h.knees.is_empty() && loads < KNEE_MIN_LOADS {
        format!(
            "There are not enough loads to look for a knee ({loads} measured, needs {KNEE_MIN_LOADS})."
        )
    } else if h.knees.is_empty() {
        "The curves do not bend upward within the loads measured: no knee yet.".into()
    } else {
        let k = &h.knees[0];
        format!(
            "The knee (x) is where latency starts to climb faster than throughput: {} bends at {:.0} req/s with p99 {:.3} ms{}.",
            k.variant,
            k.throughput_rps,
            k.p99_ms,
            match sat.first() {
                Some(s) => format!("; {} in {} reaches 90 % of its CPU allotment from {:.0} req/s", s.role, s.variant, s.throughput_rps),
                None => String::new(),
            }
        )
    };
    vec![c]
}

/// The load at which the spectrum compares variants: the one most variants share, highest.
fn spectrum_load(h: &Headline) -> Option<meshbench_results::LoadPoint> {
    let loads = distinct(h.groups.iter().map(|g| g.load));
    loads.into_iter().max_by(|a, b| {
        let n = |l: &meshbench_results::LoadPoint| h.groups.iter().filter(|g| g.load == *l).count();
        n(a).cmp(&n(b))
            .then(a.rate_rps_milli().cmp(&b.rate_rps_milli()))
    })
}

fn spectrum(h: &Headline) -> Vec<Chart> {
    let Some(load) = spectrum_load(h) else {
        return Vec::new();
    };
    let col = variant_colors(h);
    let mut c = Chart::new(
        "percentile_spectrum",
        &format!("Latency by percentile at {load}"),
        "percentile",
        "latency (ms)",
    );
    c.x_axis = XAxis::Spectrum;
    let mut tails: Vec<(String, f64)> = Vec::new();
    for g in h.groups.iter().filter(|g| g.load == load) {
        let n = g.merged.len().max(1) as f64;
        let top = n.log10().min(5.0);
        let points: Vec<(f64, f64)> = (0..=(top * 20.0) as usize)
            .map(|i| {
                let x = i as f64 / 20.0;
                let q = 1.0 - 10f64.powf(-x);
                (x, g.merged.value_at_quantile(q) as f64 / 1000.0)
            })
            .collect();
        tails.push((g.variant.clone(), g.latency_ms(0.999)));
        c.series.push(Series {
            name: g.variant.clone(),
            points,
            draw: Draw::Line,
            color: col(&g.variant),
        });
    }
    tails.sort_by(|a, b| a.1.total_cmp(&b.1));
    c.sentence = match (tails.first(), tails.last()) {
        (Some(lo), Some(hi)) if tails.len() > 1 => format!(
            "The tail: p99.9 ranges from {:.3} ms ({}) to {:.3} ms ({}); the x axis stretches the high percentiles as HdrHistogram plots do.",
            lo.1, lo.0, hi.1, hi.0
        ),
        (Some(one), _) => format!("p99.9 is {:.3} ms ({}).", one.1, one.0),
        _ => String::new(),
    };
    vec![c]
}

fn timelines(h: &Headline, warmup: f64) -> Vec<Chart> {
    let mut runs: Vec<(&Group, &meshbench_analysis::Run)> = h
        .groups
        .iter()
        .flat_map(|g| g.runs.iter().map(move |r| (g, r)))
        .collect();
    runs.sort_by_key(|(_, r)| r.step_id);
    runs.into_iter()
        .enumerate()
        .map(|(i, (g, r))| {
            let mut c = Chart::new(
                &format!("timeline_{:03}", i + 1),
                &format!("Step {} · {} · {} · repeat {}", i + 1, g.variant, g.load, r.repeat + 1),
                "seconds since the load started",
                "requests per second",
            );
            c.size = (760, 260);
            let t = |s: u32| warmup + s as f64 + 0.5;
            let tl = &r.result.timeline;
            let rps: Vec<(f64, f64)> = tl.iter().map(|p| (t(p.second), p.requests as f64)).collect();
            c.series.push(Series {
                name: "req/s".into(),
                points: rps.clone(),
                draw: Draw::Line,
                color: 0,
            });
            c.right = Some((
                "latency (ms)".into(),
                vec![
                    Series {
                        name: "p50 ms".into(),
                        points: tl.iter().map(|p| (t(p.second), p.p50_us as f64 / 1000.0)).collect(),
                        draw: Draw::Line,
                        color: 2,
                    },
                    Series {
                        name: "p99 ms".into(),
                        points: tl.iter().map(|p| (t(p.second), p.p99_us as f64 / 1000.0)).collect(),
                        draw: Draw::Line,
                        color: 1,
                    },
                ],
            ));
            if warmup > 0.0 {
                c.shade = Some((0.0, warmup, "warm-up (not measured)".into()));
            }
            // The last point may cover less than a second: left out of the steadiness figure.
            let full: Vec<f64> = rps.iter().take(rps.len().saturating_sub(1)).map(|p| p.1).collect();
            c.sentence = match meshbench_stats::spread(&full) {
                Some(s) if s.n >= 2 && s.median > 0.0 => format!(
                    "Steady window: {:.0} req/s median per second ({:.0} to {:.0}), p99 {:.3} ms over the step.",
                    s.median, s.min, s.max, r.result.latency_us.p99 as f64 / 1000.0
                ),
                _ => format!("Too short for a per-second view; p99 {:.3} ms.", r.result.latency_us.p99 as f64 / 1000.0),
            };
            c
        })
        .collect()
}

/// The report's structure in text: sections, sentences, table headers and chart titles,
/// without figures (the golden file the tests compare).
pub fn outline(r: &Report) -> String {
    let mut o = format!("# {}\n", r.title);
    for s in &r.sections {
        let _ = writeln!(o, "## {}", s.title);
        for b in &s.blocks {
            match b {
                Block::Finding(_) => {}
                Block::Text(t) => {
                    let words: String =
                        t.split(':').next().unwrap_or("").chars().take(60).collect();
                    let _ = writeln!(o, "text: {words}");
                }
                Block::Table { caption, table: t } => {
                    let headings = t[1..]
                        .iter()
                        .filter(|r| crate::answers::is_heading(r))
                        .count();
                    let _ = writeln!(
                        o,
                        "table: {caption}: {} ({} rows{})",
                        t[0].join(" | ").replace('\n', " "),
                        t.len() - 1 - headings,
                        if headings > 0 {
                            format!(" under {headings} loads")
                        } else {
                            String::new()
                        }
                    );
                }
                Block::Chart(c) => {
                    let _ = writeln!(
                        o,
                        "chart {}: {} series{}{}{}",
                        c.id,
                        c.series.len() + c.right.as_ref().map_or(0, |r| r.1.len()),
                        if c.hline.is_some() {
                            ", threshold line"
                        } else {
                            ""
                        },
                        if c.shade.is_some() {
                            ", shaded warm-up"
                        } else {
                            ""
                        },
                        match c.x_axis {
                            XAxis::Spectrum => ", percentile axis",
                            XAxis::Categories(_) => ", bars by variant",
                            XAxis::Linear => "",
                        },
                    );
                }
            }
        }
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A table cell: its first line as it is, the lines under it (a difference's interval) smaller.
fn cell_html(cell: &str) -> String {
    let mut lines = cell.lines();
    let mut out = esc(lines.next().unwrap_or(""));
    for more in lines {
        let _ = write!(out, "<br><small>{}</small>", esc(more));
    }
    out
}

/// The page's style. Tables fit a 1280-pixel window: headers wrap between words, a figure
/// never does, intervals are smaller, and a table wider than the page (very long variant names)
/// scrolls inside its own box rather than pushing the page wider.
const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
.sub{color:#666;margin-top:0}.table{max-width:100%;overflow-x:auto;margin:1em 0}
table{border-collapse:collapse;font-size:.85em}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#f3f3f3;white-space:normal;font-weight:600}td small{color:#666;font-size:.85em}
td.w{text-align:left}tr.load th{text-align:left;background:#fafafa;font-weight:normal;font-style:italic}
caption{text-align:left;font-weight:bold;padding:.3em 0}td:first-child,th:first-child{text-align:left;white-space:normal}
figure{margin:1.5em 0;page-break-inside:avoid}figcaption{color:#444;max-width:760px}
svg{max-width:100%;height:auto}@media print{body{max-width:none}h2{page-break-before:auto}}";

/// What `write` produced.
#[derive(Debug, Clone)]
pub struct Written {
    pub html: PathBuf,
    pub svgs: usize,
    pub pngs: usize,
}

/// Writes report.html and plots/{id}.svg and .png into `dir`.
pub fn write(r: &Report, dir: &Path) -> Result<Written, ReportError> {
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots).map_err(|e| ReportError::Write {
        path: plots.clone(),
        reason: e.to_string(),
    })?;
    let charts: Vec<&Chart> = r
        .sections
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter_map(|b| match b {
            Block::Chart(c) => Some(c.as_ref()),
            _ => None,
        })
        .collect();
    // A report without charts (control-plane steps alone) needs no font.
    if !charts.is_empty() && plot::load_font().is_none() {
        return Err(ReportError::NoFont);
    }
    // Each chart is drawn twice (SVG and PNG); the charts are shared over the cores.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let svgs: Vec<Result<String, ReportError>> = std::thread::scope(|scope| {
        let chunks: Vec<Vec<(usize, &Chart)>> = (0..threads)
            .map(|t| {
                charts
                    .iter()
                    .copied()
                    .enumerate()
                    .skip(t)
                    .step_by(threads)
                    .collect()
            })
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let plots = &plots;
                scope.spawn(move || {
                    chunk
                        .into_iter()
                        .map(|(i, c)| {
                            let fail = |reason: String| ReportError::Chart {
                                id: c.id.clone(),
                                reason,
                            };
                            let svg = plot::svg(c).map_err(fail)?;
                            let path = plots.join(format!("{}.svg", c.id));
                            std::fs::write(&path, &svg).map_err(|e| ReportError::Write {
                                path,
                                reason: e.to_string(),
                            })?;
                            plot::png(c, &plots.join(format!("{}.png", c.id))).map_err(fail)?;
                            Ok((i, svg))
                        })
                        .collect::<Vec<Result<(usize, String), ReportError>>>()
                })
            })
            .collect();
        let mut all: Vec<Option<Result<String, ReportError>>> =
            (0..charts.len()).map(|_| None).collect();
        for h in handles {
            for item in h.join().unwrap_or_default() {
                match item {
                    Ok((i, svg)) => all[i] = Some(Ok(svg)),
                    Err(e) => return vec![Err(e)],
                }
            }
        }
        all.into_iter().flatten().collect()
    });
    let mut svg_iter = Vec::with_capacity(svgs.len());
    for s in svgs {
        svg_iter.push(s?);
    }
    let mut html = String::with_capacity(svg_iter.iter().map(String::len).sum::<usize>() + 65536);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1><p class=\"sub\">{}</p>\n",
        esc(&r.title),
        esc(&r.title),
        esc(&r.subtitle)
    );
    let mut next_svg = svg_iter.into_iter();
    for s in &r.sections {
        let _ = writeln!(html, "<h2>{}</h2>", esc(&s.title));
        for b in &s.blocks {
            match b {
                Block::Text(t) | Block::Finding(t) => {
                    let _ = writeln!(html, "<p>{}</p>", esc(t));
                }
                Block::Table { caption, table: t } => {
                    let _ = write!(
                        html,
                        "<div class=\"table\"><table>\n<caption>{}</caption>\n<tr>",
                        esc(caption)
                    );
                    for h in &t[0] {
                        let _ = write!(html, "<th>{}</th>", esc(h).replace('\n', "<br>"));
                    }
                    html.push_str("</tr>\n");
                    for row in &t[1..] {
                        if crate::answers::is_heading(row) {
                            let _ = writeln!(
                                html,
                                "<tr class=\"load\"><th colspan=\"{}\">{}</th></tr>",
                                t[0].len(),
                                esc(&row[0])
                            );
                            continue;
                        }
                        html.push_str("<tr>");
                        for cell in row {
                            // Words (a role, a finding) read from the left, figures from the right.
                            let words = cell.chars().next().is_some_and(char::is_alphabetic);
                            let _ = write!(
                                html,
                                "<td{}>{}</td>",
                                if words { " class=\"w\"" } else { "" },
                                cell_html(cell)
                            );
                        }
                        html.push_str("</tr>\n");
                    }
                    html.push_str("</table></div>\n");
                }
                Block::Chart(c) => {
                    let svg = next_svg.next().unwrap_or_default();
                    // The inline copy drops the XML prolog, which HTML does not take.
                    let body = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
                    let _ = writeln!(
                        html,
                        "<figure id=\"{}\">{body}<figcaption>{}</figcaption></figure>",
                        esc(&c.id),
                        esc(&c.sentence)
                    );
                }
            }
        }
    }
    html.push_str("</body></html>\n");
    let path = dir.join("report.html");
    std::fs::write(&path, html).map_err(|e| ReportError::Write {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(Written {
        html: path,
        svgs: charts.len(),
        pngs: charts.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::tests::measured;
    use meshbench_analysis::group;

    /// The input of experiment 1, "t", done, from `h` and `steps`.
    fn input<'a>(h: &'a Headline, steps: &'a [StoredStep]) -> Input<'a> {
        Input {
            name: "t",
            id: 1,
            started_at: "",
            status: "done",
            headline: h,
            warmup_secs: 0.0,
            slo_p99_ms: None,
            failed: Vec::new(),
            steps,
        }
    }

    fn report(loads: &[f64]) -> Report {
        let mut runs = Vec::new();
        for &q in loads {
            for v in ["baseline", "gateway"] {
                runs.push(measured(v, Some(q), q, (q / 10.0, 9.0), None, false));
            }
        }
        let h = Headline::of(group(runs));
        build(&input(&h, &[]))
    }

    /// The charts of the Charts section (the timelines are over time, whatever the shape).
    fn charts(r: &Report) -> Vec<&Chart> {
        r.sections
            .iter()
            .filter(|s| s.title == "Charts")
            .flat_map(|s| &s.blocks)
            .filter_map(|b| match b {
                Block::Chart(c) => Some(c.as_ref()),
                _ => None,
            })
            .collect()
    }

    fn build_of(runs: Vec<meshbench_analysis::Run>) -> (Shape, Report) {
        let h = Headline::of(group(runs));
        let r = build(&input(&h, &[]));
        (shape(&h), r)
    }

    #[test]
    fn each_chart_fits_the_shape_of_the_experiment() {
        // examples/istio-sidecar-cost.yaml: one rate, three variants, jitter off and on. Its
        // proxies' CPU once plotted against 992..1000 req/s; now a bar per variant and load.
        let mut runs = Vec::new();
        for poisson in [false, true] {
            for (v, rps) in [("baseline", 999.0), ("serveronly", 996.0), ("both", 992.0)] {
                let mut run = measured(v, Some(1000.0), rps, (120.0, 30.0), None, false);
                if poisson {
                    run.load.offer = meshbench_results::Offer::Open {
                        rate_rps: 1000.0,
                        arrival: meshbench_results::Arrival::Poisson,
                    };
                }
                runs.push(run);
            }
        }
        let (one, r) = build_of(runs);
        assert_eq!(one, Shape::OneLoad);
        let drawn = charts(&r);
        let p99 = drawn
            .iter()
            .find(|c| c.id == "latency_p99_by_variant")
            .expect("p99 by variant");
        assert_eq!(
            p99.x_axis,
            XAxis::Categories(vec!["baseline".into(), "serveronly".into(), "both".into()])
        );
        assert_eq!(p99.series.len(), 2, "a bar per load: jitter off and on");
        assert!(p99
            .series
            .iter()
            .all(|s| s.draw == Draw::Bars && s.points.len() == 3));
        let cpu = drawn
            .iter()
            .find(|c| c.id == "proxy_cpu_by_variant")
            .expect("CPU by variant");
        assert!(
            matches!(&cpu.x_axis, XAxis::Categories(n) if n.len() == 3),
            "{:?}",
            cpu.x_axis
        );
        for c in &drawn {
            assert!(
                matches!(c.x_axis, XAxis::Categories(_) | XAxis::Spectrum),
                "{} plots against a quantity the experiment did not vary",
                c.id
            );
        }

        // Rates swept: lines over offered load.
        let (sweep, r) = build_of(
            [300.0, 600.0, 1200.0]
                .iter()
                .flat_map(|&q| {
                    ["baseline", "gateway"]
                        .map(|v| measured(v, Some(q), q, (q / 10.0, 9.0), None, false))
                })
                .collect(),
        );
        assert_eq!(sweep, Shape::LoadSweep);
        let drawn = charts(&r);
        let p50 = drawn.iter().find(|c| c.id == "latency_p50_vs_qps").unwrap();
        assert!(p50
            .series
            .iter()
            .all(|s| s.draw == Draw::LinePoints && s.points.len() == 3));
        assert!(drawn.iter().any(|c| c.id == "proxy_cpu_vs_qps"));
        assert!(!drawn
            .iter()
            .any(|c| matches!(c.x_axis, XAxis::Categories(_))));

        // CPU swept at one rate: lines over the allotment.
        let (cpu, r) = build_of(
            [0.5, 1.0, 2.0]
                .iter()
                .map(|&c| {
                    measured(
                        &format!("gateway proxy={c}cpu"),
                        Some(1000.0),
                        999.0,
                        (400.0, 9.0),
                        Some(c),
                        true,
                    )
                })
                .collect(),
        );
        assert_eq!(cpu, Shape::CpuSweep);
        let drawn = charts(&r);
        let p99 = drawn.iter().find(|c| c.id == "latency_p99_vs_cpu").unwrap();
        assert_eq!(p99.series.len(), 1, "one line for the gateway");
        let xs: Vec<f64> = p99.series[0].points.iter().map(|p| p.0).collect();
        assert_eq!(xs, [0.5, 1.0, 2.0]);
        assert!(drawn.iter().any(|c| c.id == "proxy_cpu_vs_cpu"));
        assert!(drawn.iter().any(|c| c.id.starts_with("rps_vs_cpu_")));
        assert!(!drawn.iter().any(|c| c.id == "proxy_cpu_vs_qps"));
    }

    #[test]
    fn an_experiment_of_control_plane_steps_alone_is_reported_as_a_table() {
        let steps: Vec<StoredStep> = (0..2)
            .map(|seq| StoredStep {
                id: i64::from(seq) + 1,
                step: crate::control_plane::fixture::step(seq),
            })
            .collect();
        let h = Headline::of(group(Vec::new()));
        let r = build(&input(&h, &steps));
        assert_eq!(
            outline(&r),
            "# meshbench report: t\n\
             ## The control plane\n\
             text: The control plane's cost\n\
             table: istiod's cost and the propagation of changes, per control-plane step: \
             step | variant | mesh | istiod millicores/MiB | converged | cds p50/p99 | \
             eds p50/p99 | lds p50/p99 | istiod's pushes | xDS received | \
             the real Envoy (2 rows)\n"
        );
        assert!(
            r.subtitle.ends_with("2 control-plane steps"),
            "{}",
            r.subtitle
        );
        let dir = std::env::temp_dir().join(format!("mb-report-cp-{}", std::process::id()));
        let written = write(&r, &dir).unwrap();
        assert_eq!(written.svgs, 0);
        let html = std::fs::read_to_string(written.html).unwrap();
        for cell in [
            "412m/180.3",
            "38/130 ms, 3 missed",
            "6,402",
            "1.00 MB/s",
            "agrees",
        ] {
            assert!(html.contains(&format!(">{cell}</td>")), "{cell} in {html}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn every_table_has_a_caption() {
        let dir = std::env::temp_dir().join(format!("mb-report-captions-{}", std::process::id()));
        let written = write(&report(&[300.0, 600.0]), &dir).unwrap();
        let html = std::fs::read_to_string(written.html).unwrap();
        let tables = html.matches("<table>").count();
        assert!(tables >= 3, "{tables}");
        assert_eq!(html.matches("<caption>").count(), tables, "{html}");
        assert!(!html.contains("<caption></caption>"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_knee_is_looked_for_only_with_three_loads() {
        let sentence = |r: &Report| {
            r.sections
                .iter()
                .flat_map(|s| &s.blocks)
                .find_map(|b| match b {
                    Block::Chart(c) if c.id == "latency_throughput" => Some(c.sentence.clone()),
                    _ => None,
                })
                .unwrap()
        };
        let two = sentence(&report(&[300.0, 600.0]));
        assert!(
            two.contains("not enough loads to look for a knee (2 measured, needs 3)"),
            "{two}"
        );
        assert!(!two.contains("no knee yet"), "{two}");
        let three = sentence(&report(&[300.0, 600.0, 1200.0]));
        assert!(three.contains("no knee yet"), "{three}");
    }
}
