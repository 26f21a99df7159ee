//! `meshbench report`: an experiment's answers as one self-contained HTML file (inline SVG and
//! CSS, no script, no network; readable offline and printable) plus every chart as SVG and PNG.
//! The report is built as a structure first (sections of sentences, tables and charts), so that
//! its outline can be checked against a golden file, and then written. Wherever a figure from a
//! run the generator's self-check calls INVALID appears (a row, a point, a sentence), its mark
//! is beside it (`INVALID: cpu_contention`; on a chart, a ring the legend names), and the
//! headline says first how many steps are.

use std::fmt::Write as _;
use std::path::PathBuf;

use meshbench_analysis::headline::Headline;
use meshbench_analysis::runs::distinct;
use meshbench_store::StoredStep;
use thiserror::Error;

use crate::answers::{added_table, cost_table, latency_table, ranking_table, ranking_title, Table};
use crate::findings::{cost_notes, findings};
use crate::plot::{Chart, XAxis};

mod charts;
mod write;

use charts::gateway_ranking;
use charts::{
    cost_by_variant, cost_vs_rate, latency_by_variant, latency_throughput, latency_vs_connections,
    latency_vs_rate, over_allotment, rps_vs_allotment, spectrum, timelines,
};
pub use write::{write, Written};

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("chart {id}: {source}")]
    Chart {
        id: String,
        source: crate::plot::PlotError,
    },
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
    if let Some(section) = changes_section(input) {
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
    for s in &mut sections {
        for b in &mut s.blocks {
            if let Block::Chart(c) = b {
                say_rings(c);
            }
        }
    }
    Report {
        title: format!("meshbench report: {}", input.name),
        subtitle: format!(
            "experiment {}, started {}, {}; {measured}",
            input.id, input.started_at, input.status
        ),
        sections,
    }
}

/// Ends the sentence under a chart with what its rings mean, when it has any.
fn say_rings(c: &mut Chart) {
    if let Some(label) = c.ring_label() {
        let _ = write!(
            c.sentence,
            " Ringed: from a step the generator's self-check calls {label}; its figures may be the generator's, not the target's."
        );
    }
}

/// The first sentence of the headline when the generator's self-check calls some of the
/// experiment's runs INVALID: how many, for each cause, and what the marks mean.
pub fn invalid_note(h: &Headline) -> Option<String> {
    let runs: Vec<&meshbench_analysis::Run> = h.groups.iter().flat_map(|g| &g.runs).collect();
    let causes: Vec<meshbench_results::Cause> = runs.iter().filter_map(|r| r.invalid()).collect();
    if causes.is_empty() {
        return None;
    }
    let counted: Vec<String> = distinct(causes.iter().copied())
        .into_iter()
        .map(|c| {
            let n = causes.iter().filter(|x| **x == c).count();
            format!("{}: {n}", c.name())
        })
        .collect();
    Some(format!(
        "INVALID by the generator's own check: {} of {} steps ({}); their figures may be the generator's, not the target's. Every row, chart point and answer resting on one carries its mark (INVALID: and the cause; ringed on the charts); the JSON export says why, step by step (docs/answers.md, \"The self-check in every answer\").",
        causes.len(),
        runs.len(),
        counted.join(", ")
    ))
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
            charts.extend(latency_vs_rate(h));
            charts.extend(latency_vs_connections(h));
            charts.extend(cost_vs_rate(h));
            charts.extend(latency_throughput(h, input.slo_p99_ms));
        }
        Shape::CpuSweep => {
            charts.extend(latency_vs_rate(h));
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
    blocks.extend(invalid_note(h).map(Block::Finding));
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
        blocks.extend(cost_notes(h).into_iter().map(Block::Finding));
    }
    for (i, r) in h.gateways.iter().enumerate() {
        blocks.push(Block::Table {
            caption: ranking_title(r),
            table: ranking_table(r),
        });
        blocks.extend(
            gateway_ranking(r, i)
                .into_iter()
                .map(|c| Block::Chart(Box::new(c))),
        );
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

/// What a change costs the traffic, when the experiment had changes: the ranking, then per
/// gateway its latency over time with each change marked.
fn changes_section(input: &Input) -> Option<Section> {
    let costs = meshbench_analysis::changes::by_pair(
        input.steps,
        meshbench_analysis::verdict::Margin::DEFAULT,
    );
    if costs.is_empty() {
        return None;
    }
    let mut blocks = vec![
        Block::Text("Changes applied to each gateway while its load ran, each gateway told its own way, and each step with changes paired with the same step without them: errors per change over the seconds of each change, the time from a change written to the probe's first answer of it, and the tail the changes added over the paired step (docs/changes.md).".into()),
        Block::Table {
            caption: crate::changes::title(&costs),
            table: crate::changes::table(&costs),
        },
    ];
    blocks.extend(
        crate::changes::charts(input.steps, input.warmup_secs)
            .into_iter()
            .map(|c| Block::Chart(Box::new(c))),
    );
    Some(Section {
        title: "What a change costs the traffic".into(),
        blocks,
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
        let notes = [
            crate::attribution::thin_bands(a),
            crate::attribution::clocks(a),
        ];
        blocks.extend(notes.into_iter().flatten().map(Block::Finding));
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
                    // The marks' column has no header: its cells are data, not structure.
                    let named: Vec<&str> = t[0]
                        .iter()
                        .map(String::as_str)
                        .filter(|h| *h != crate::answers::MARKS)
                        .collect();
                    let _ = writeln!(
                        o,
                        "table: {caption}: {} ({} rows{})",
                        named.join(" | ").replace('\n', " "),
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::tests::measured;
    use crate::plot::Draw;
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
        let p50 = drawn
            .iter()
            .find(|c| c.id == "latency_p50_vs_rate")
            .unwrap();
        assert!(p50
            .series
            .iter()
            .all(|s| s.draw == Draw::LinePoints && s.points.len() == 3));
        assert!(drawn.iter().any(|c| c.id == "proxy_cpu_vs_rate"));
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
        assert!(!drawn.iter().any(|c| c.id == "proxy_cpu_vs_rate"));
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
        // Not control_plane.rs's directory: the two tests run at once in one process.
        let dir = std::env::temp_dir().join(format!("mb-report-html-cp-{}", std::process::id()));
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

    /// The table under `caption`'s start in `r`.
    fn table<'a>(r: &'a Report, caption: &str) -> &'a Table {
        r.sections
            .iter()
            .flat_map(|s| &s.blocks)
            .find_map(|b| match b {
                Block::Table { caption: c, table } if c.starts_with(caption) => Some(table),
                _ => None,
            })
            .unwrap_or_else(|| panic!("a table {caption}"))
    }

    #[test]
    fn invalid_steps_are_marked_in_every_table_chart_and_answer_built_on_them() {
        let h = crate::answers::tests::gateways_headline();
        let r = build(&input(&h, &[]));
        let headline = &r.sections[0];
        // First the count, in the words `results show` uses.
        match &headline.blocks[0] {
            Block::Finding(f) => assert!(
                f.starts_with(
                    "INVALID by the generator's own check: 2 of 6 steps (cpu_contention: 2)"
                ),
                "{f}"
            ),
            b => panic!("{b:?}"),
        }
        // Every row of nginx and haproxy (the first two) ends with the mark; no other.
        for caption in [
            "What each proxy costs",
            "Latency and throughput",
            "Gateways from",
        ] {
            let t = table(&r, caption);
            assert_eq!(t[0].last().map(String::as_str), Some(""), "{caption}");
            let marks: Vec<&str> = t[1..]
                .iter()
                .map(|row| row.last().unwrap().as_str())
                .collect();
            assert_eq!(
                marks,
                [
                    "INVALID: cpu_contention",
                    "INVALID: cpu_contention",
                    "",
                    "",
                    "",
                    ""
                ],
                "{caption}"
            );
        }
        let ranking = table(&r, "Gateways from");
        assert_eq!(ranking[1][1], "nginx");
        // The ranking's charts, cheapest first, the two INVALID bars ringed.
        let charts: Vec<&Chart> = headline
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Chart(c) => Some(c.as_ref()),
                _ => None,
            })
            .collect();
        let ids: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["gateways_cpu_1", "gateways_per_core_1"]);
        for c in &charts {
            assert_eq!(
                c.x_axis,
                XAxis::Categories(
                    ["nginx", "haproxy", "caddy", "envoy", "istio", "contour"]
                        .map(String::from)
                        .to_vec()
                )
            );
            assert_eq!(c.invalid, [(0, 0), (0, 1)], "{}", c.id);
            assert!(
                c.sentence.contains(
                    "Ringed: from a step the generator's self-check calls INVALID: cpu_contention"
                ),
                "{}",
                c.sentence
            );
        }
        assert!(
            charts[0].sentence.starts_with("nginx costs least (0.117 vCPU per 1,000 RPS) (INVALID: cpu_contention), contour most (0.191); "),
            "{}",
            charts[0].sentence
        );
        // The bars by variant (one load) are ringed too, and the timelines say so in their title.
        let cpu = charts_of(&r, "proxy_cpu_by_variant");
        assert_eq!(cpu.invalid, [(0, 0), (0, 1)]);
        let first = charts_of(&r, "timeline_001");
        assert!(
            first.title.ends_with(" · INVALID: cpu_contention"),
            "{}",
            first.title
        );
        assert!(!charts_of(&r, "timeline_003").title.contains("INVALID"));
        // Not one sentence per role: one for the roles without a line, one for the saturated.
        let findings: Vec<&String> = headline
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Finding(f) => Some(f),
                _ => None,
            })
            .collect();
        assert_eq!(
            findings
                .iter()
                .filter(|f| f.contains("not enough loads"))
                .count(),
            1,
            "{findings:?}"
        );
        assert_eq!(
            findings.iter().filter(|f| f.contains("saturated")).count(),
            1,
            "{findings:?}"
        );
        // The outline names no column for the marks.
        assert!(!outline(&r).contains("| \n") && !outline(&r).contains("|  ("));

        // Written: the marks stand out, a ring is drawn where each INVALID bar is, and the
        // legend says what it means.
        let dir = std::env::temp_dir().join(format!("mb-report-invalid-{}", std::process::id()));
        let written = write(&r, &dir).unwrap();
        let html = std::fs::read_to_string(&written.html).unwrap();
        assert_eq!(
            html.matches("<td class=\"w bad\">INVALID: cpu_contention</td>")
                .count(),
            6,
            "two rows in each of three tables"
        );
        assert!(
            html.contains("<caption class=\"bad\">Gateways from"),
            "{html}"
        );
        let svg = std::fs::read_to_string(dir.join("plots/gateways_cpu_1.svg")).unwrap();
        let rings = svg
            .split('<')
            .filter(|e| e.starts_with("circle") && e.contains("stroke=\"#AA0000\""))
            .count();
        assert_eq!(rings, 3, "two bars and the legend's ring: {svg}");
        assert!(
            svg.contains("INVALID: cpu_contention"),
            "the legend names the ring: {svg}"
        );
        std::fs::remove_dir_all(dir).unwrap();

        // Without an INVALID step: no mark, no empty column, no ring.
        let dir = std::env::temp_dir().join(format!("mb-report-valid-{}", std::process::id()));
        let written = write(&report(&[300.0, 600.0, 1200.0]), &dir).unwrap();
        let html = std::fs::read_to_string(&written.html).unwrap();
        assert!(
            !html.contains("INVALID") && !html.contains("bad\""),
            "{html}"
        );
        assert!(!html.contains("<th></th>"), "{html}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The chart `id` of `r`.
    fn charts_of<'a>(r: &'a Report, id: &str) -> &'a Chart {
        r.sections
            .iter()
            .flat_map(|s| &s.blocks)
            .find_map(|b| match b {
                Block::Chart(c) if c.id == id => Some(c.as_ref()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no chart {id}"))
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
