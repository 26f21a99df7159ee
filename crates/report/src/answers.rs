//! The answers in the terminal: the headline tables of an experiment (added latency with its
//! interval, what each proxy costs, the fitted lines, knees, saturation, RPS per core), the
//! comparison of two measurements, and a sizing. The HTML report shows the same tables.
//!
//! The terminal's are read at a glance on a 120-column terminal ([`WIDTH`]): a difference is its
//! value and a one-word verdict, its 95 % interval on the line under it, and one legend line
//! says what the words mean; what they rest on (the test, the margin) is in docs/answers.md and
//! `--help`, not repeated by every run. A cell may hold more than one line (`\n`): the terminal
//! lays each line out under the one before, the HTML breaks the line. A row resting on a run the
//! generator's self-check calls INVALID ends with its mark (`INVALID: cpu_contention`) in a
//! last column without a header, which reads from the left.

use std::fmt::Write as _;

use meshbench_analysis::compare::Pair;
use meshbench_analysis::headline::{Delta, GatewayRanking, Headline, PerCoreFigure};
use meshbench_analysis::runs::{percentile_name, PERCENTILES};
use meshbench_analysis::sizing::Sizing;
use meshbench_analysis::verdict::{needed, Margin, Unit, Verdict};
use meshbench_results::LoadPoint;

use crate::findings::{cost_notes, findings, mark};
use crate::thousands;

/// A table as rows of cells, the first row the header; shared by the terminal and the HTML.
pub type Table = Vec<Vec<String>>;

/// The columns a terminal line of ours may take: every line of the headline, a comparison
/// and a run's summary fits in it.
pub const WIDTH: usize = 120;

/// A row of one cell in a table of more columns: a heading over the rows under it (the load
/// they share), not a row of figures.
pub fn is_heading(row: &[String]) -> bool {
    row.len() == 1
}

/// `rows` (each with its load) under a heading row per load when there is more than one load,
/// in the order the loads first come; with one load, the rows alone (the caller says it once).
fn under_loads(rows: Vec<(&LoadPoint, Vec<String>)>) -> Vec<Vec<String>> {
    let mut loads: Vec<&LoadPoint> = Vec::new();
    for (l, _) in &rows {
        if !loads.contains(l) {
            loads.push(l);
        }
    }
    if loads.len() < 2 {
        return rows.into_iter().map(|(_, r)| r).collect();
    }
    let mut out = Vec::new();
    for load in loads {
        out.push(vec![format!("at {load}")]);
        out.extend(
            rows.iter()
                .filter(|(l, _)| *l == load)
                .map(|(_, r)| r.clone()),
        );
    }
    out
}

/// The title of a table whose rows `loads` has: `what at 1000 rps x 16 conns` when they share
/// one load, else `what` (the loads head their rows).
pub fn titled<'a>(what: &str, loads: impl Iterator<Item = &'a LoadPoint>) -> String {
    match one_load(loads) {
        Some(load) => format!("{what} at {load}"),
        None => what.to_string(),
    }
}

/// The header of the last column of a table whose rows may carry a mark (`INVALID: ...`):
/// none, so that a table without a mark looks as it would without the column.
pub const MARKS: &str = "";

/// Lays a table out in aligned columns (the first `left` to the left, the figures after them
/// to the right, and a last column of marks, [`MARKS`], to the left), two spaces apart; a cell
/// of several lines (`\n`) takes as many lines, each under the one before. A row's mark ends
/// its first line, or, where that would pass [`WIDTH`], stands on a line of its own under the
/// row, under its figures.
pub fn text_table(t: &Table, left: usize) -> String {
    let cols = t.iter().map(Vec::len).max().unwrap_or(0);
    let marks = t
        .first()
        .and_then(|h| h.last())
        .is_some_and(|h| h == MARKS)
        .then(|| cols.saturating_sub(1));
    match marks {
        Some(m) if table_width(t) > WIDTH => {
            // The table without the column, each mark on a line of its own under its row,
            // under the figures (after the first column).
            let cut: Table = t
                .iter()
                .map(|r| r.iter().take(m).cloned().collect())
                .collect();
            let indent = 4 + t
                .iter()
                .filter(|r| !is_heading(r))
                .filter_map(|r| r.first())
                .flat_map(|c| c.lines())
                .map(|l| l.chars().count())
                .max()
                .unwrap_or(0);
            let text = aligned(&cut, left, None);
            let mut lines = text.lines();
            let mut out = String::new();
            for row in t {
                for line in lines.by_ref().take(row_lines(row)) {
                    out.push_str(line);
                    out.push('\n');
                }
                if let Some(mark) = row.get(m).filter(|c| !c.is_empty() && !is_heading(row)) {
                    let _ = writeln!(out, "{}{mark}", " ".repeat(indent));
                }
            }
            out
        }
        _ => aligned(t, left, marks),
    }
}

/// How many lines [`aligned`] gives a row: its tallest cell's, one for a heading.
fn row_lines(row: &[String]) -> usize {
    if is_heading(row) {
        return 1;
    }
    row.iter()
        .map(|c| c.lines().count())
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The widest line [`aligned`] lays `t` out in.
fn table_width(t: &Table) -> usize {
    aligned(t, 0, None)
        .lines()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
}

/// [`text_table`]'s columns: the first `left` and the `marks` column to the left, the others to
/// the right.
fn aligned(t: &Table, left: usize, marks: Option<usize>) -> String {
    let cols = t.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            t.iter()
                .filter(|r| !is_heading(r))
                .filter_map(|r| r.get(c))
                .flat_map(|cell| cell.lines())
                .map(|l| l.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in t {
        if is_heading(row) {
            let _ = writeln!(out, "  {}", row[0]);
            continue;
        }
        let height = row
            .iter()
            .map(|c| c.lines().count())
            .max()
            .unwrap_or(0)
            .max(1);
        for at in 0..height {
            let mut line = String::from(" ");
            for (c, cell) in row.iter().enumerate() {
                let text = cell.lines().nth(at).unwrap_or("");
                let pad = widths[c].saturating_sub(text.chars().count());
                line.push_str(if c == 0 { " " } else { "  " });
                if c < left || Some(c) == marks {
                    line.push_str(text);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(text);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// `items` after `figures` two spaces apart, on as many lines as keep each within [`WIDTH`],
/// the later ones indented under the step (`results show`'s step tables); an item is never
/// broken.
pub fn beside(figures: &str, items: &[String]) -> String {
    const INDENT: &str = "       ";
    let mut out = String::new();
    let mut line = figures.to_string();
    let mut first = true;
    for item in items {
        let gap = if first { "  " } else { " " };
        let fits = line.chars().count() + gap.len() + item.chars().count() <= WIDTH;
        if !fits && line != INDENT {
            out.push_str(line.trim_end());
            out.push('\n');
            line = INDENT.to_string();
            line.push_str(item.trim_start());
        } else {
            line.push_str(gap);
            line.push_str(item);
        }
        first = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// `text` in lines of at most [`WIDTH`] columns, broken between words: the first line after
/// `first`, the others after `rest` (a hanging indent).
pub fn wrap(text: &str, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let fits = line.chars().count() + 1 + word.chars().count() <= WIDTH;
        if !empty && !fits {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// Requests per day, rounded: `86.4 M`.
pub fn per_day(rps: f64) -> String {
    let d = rps * 86_400.0;
    if d >= 1e9 {
        format!("{:.2} G", d / 1e9)
    } else if d >= 1e6 {
        format!("{:.1} M", d / 1e6)
    } else {
        thousands(d.round() as u64)
    }
}

/// Milliseconds with as many decimals as a difference needs to be read: three under 10 ms, two
/// under 100, one above; `digits_for` picks them for a set of figures shown together.
fn digits_for(values: &[f64]) -> usize {
    let most = values
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    if most < 10.0 {
        3
    } else if most < 100.0 {
        2
    } else {
        1
    }
}

/// A verdict in a table cell, one word: `slower`, `faster`, `noise` (within noise), `margin`
/// (within the margin identical runs differ by), `short` (too short to tell); the words of
/// `compare` and of the JSON's `verdict` (`within_noise`, `within_margin`, `too_short`) cut to
/// the one that tells them apart.
pub fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Slower => "slower",
        Verdict::Faster => "faster",
        Verdict::WithinNoise => "noise",
        Verdict::WithinMargin => "margin",
        Verdict::TooShort { .. } => "short",
    }
}

/// What the one-word verdicts mean, in one line (under every table of differences; `margin`
/// when a difference had to clear one); the long explanation is docs/answers.md's.
pub fn verdict_legend(margin: bool) -> &'static str {
    if margin {
        "slower/faster: the interval clears 0 (and the margin) · noise: it holds 0 · margin: it clears 0 only · short: too few"
    } else {
        "slower/faster: the interval lies clear of 0 · noise: it holds 0 · short: too few samples to test"
    }
}

/// A difference in a table cell, always with what the test made of it: the shift and its
/// one-word verdict ([`verdict_word`]), and its 95 % interval on the line under it; or the
/// merged difference and `short` when there were too few samples to test. Never a bare number
/// that noise could have made.
pub fn delta_cell(d: &Delta) -> String {
    let word = verdict_word(d.verdict());
    match d.test.shift {
        Some(s) => {
            let n = digits_for(&[d.point_ms(), s.ci.0, s.ci.1]);
            format!(
                "{:+.n$} {word}\n[{:+.n$}, {:+.n$}]",
                d.point_ms(),
                s.ci.0,
                s.ci.1
            )
        }
        None => {
            let n = digits_for(&[d.point_ms()]);
            format!("{:+.n$} {word}", d.point_ms())
        }
    }
}

fn p_value(p: f64) -> String {
    if p < 0.001 {
        "p<0.001".into()
    } else {
        format!("p={p:.3}")
    }
}

/// The verdict on one percentile, in one sentence: what the test found, from what, and which
/// rule decided (the test's interval against zero, or against the margin identical runs
/// differ by).
pub fn verdict_line(d: &Delta) -> String {
    let name = percentile_name(d.q);
    let Some(s) = d.test.shift else {
        return format!(
            "{name}: {} (merged B - A {:+.3} ms)",
            d.verdict(),
            d.merged_ms
        );
    };
    let detail = format!(
        "95 % CI [{:+.3}, {:+.3}] ms, Mann-Whitney {}, over {}",
        s.ci.0,
        s.ci.1,
        p_value(s.p),
        d.test.basis
    );
    match (d.verdict(), d.test.margin) {
        (v @ (Verdict::Slower | Verdict::Faster), Some(m)) => format!(
            "{name}: B {} by {:.3} ms, beyond the margin of {m} ({detail})",
            v.short(),
            s.estimate.abs()
        ),
        (v @ (Verdict::Slower | Verdict::Faster), None) => format!(
            "{name}: B {} by {:.3} ms ({detail})",
            v.short(),
            s.estimate.abs()
        ),
        (Verdict::WithinMargin, Some(m)) if s.ci.0 >= -m.ms && s.ci.1 <= m.ms => format!(
            "{name}: no difference: B {:+.3} ms, its interval within the margin of {m} that identical runs differ by ({detail})",
            s.estimate
        ),
        (Verdict::WithinMargin, Some(m)) => format!(
            "{name}: not beyond the margin: B {:+.3} ms, but its interval reaches within the margin of {m} that identical runs differ by ({detail})",
            s.estimate
        ),
        (v, _) => format!("{name}: {}: B {:+.3} ms ({detail})", v.short(), s.estimate),
    }
}

/// What decides the verdicts of a comparison, in one line: the test over repeats (whose
/// spread is the run-to-run variation), or the test over one-second intervals held to a
/// margin (`margin`, what identical runs differ by).
pub fn rule_line(p: &Pair) -> Option<String> {
    let d = &p.lines.first()?.delta;
    let margin = p.margin;
    let repeated = p.a.runs.len() > 1 || p.b.runs.len() > 1;
    Some(match (d.test.basis.unit, d.test.margin) {
        (Unit::Repeats, _) => format!(
            "tested over {}: the runs themselves show how much runs differ, so no margin",
            d.test.basis
        ),
        (Unit::Seconds, Some(_)) => format!(
            "tested over {}: a difference must clear the margin identical runs differ by, {margin}{}; {} repeats a side are tested over the runs instead (docs/answers.md)",
            d.test.basis,
            if repeated {
                ", or the widest difference between repeats of one side when wider"
            } else {
                ""
            },
            needed()
        ),
        (Unit::Seconds, None) => format!(
            "tested over {} with no margin: a difference may be the runs' own, not A's and B's",
            d.test.basis
        ),
    })
}

/// Latency added over the baseline: one row per variant and load, each difference with its
/// verdict and interval ([`delta_cell`]), and what it was tested over ([`tested_over`]).
pub fn added_table(h: &Headline) -> Table {
    let mut head = vec!["variant".to_string()];
    head.extend(
        PERCENTILES
            .iter()
            .map(|q| format!("{} ms", percentile_name(*q))),
    );
    head.push("tested over".into());
    head.push(MARKS.into());
    let rows = h
        .added
        .iter()
        .map(|a| {
            let mut row = vec![a.variant.clone()];
            row.extend(a.deltas.iter().map(delta_cell));
            row.push(a.deltas.first().map(tested_over).unwrap_or_default());
            row.push(mark(a.invalid.as_ref()));
            (&a.load, row)
        })
        .collect();
    let mut t = vec![head];
    t.extend(under_loads(rows));
    t
}

/// Under the added-latency table: what `+ margin` means.
pub fn margin_note(margin: &Margin) -> String {
    format!("+ margin: the seconds of one run cannot show how much one run differs from the next, so a difference over them must also clear the margin identical runs differ by, {margin}, or the widest difference between repeats of one side when wider (docs/answers.md)")
}

/// What a difference was tested over, a side, and whether it had to clear a margin: `8 s +
/// margin` (eight one-second percentiles a side), `5 runs` (five repeats a side), `8 s / 6 s`.
pub fn tested_over(d: &Delta) -> String {
    let b = d.test.basis;
    let unit = match b.unit {
        Unit::Seconds => "s",
        Unit::Repeats => "runs",
    };
    let sides = if b.a == b.b {
        format!("{} {unit}", b.a)
    } else {
        format!("{} {unit} / {} {unit}", b.a, b.b)
    };
    match d.test.margin {
        Some(_) => format!("{sides} + margin"),
        None => sides,
    }
}

/// The load every row of `loads` shares, when they share one: said once above a table
/// instead of in a column of its own.
fn one_load<'a>(mut loads: impl Iterator<Item = &'a LoadPoint>) -> Option<&'a LoadPoint> {
    let first = loads.next()?;
    loads.all(|l| l == first).then_some(first)
}

/// What each proxy costs at each load (the loads head their rows, [`under_loads`]). Headers of
/// two lines (`\n`) keep the columns as narrow as their figures.
pub fn cost_table(h: &Headline) -> Table {
    cost_rows(h, true)
}

/// [`cost_table`], with or without requests per day (the terminal leaves it to the HTML).
fn cost_rows(h: &Headline, per_day_column: bool) -> Table {
    let mut head: Vec<String> = vec!["variant".into(), "role (program)".into(), "req/s".into()];
    if per_day_column {
        head.push("req/day".into());
    }
    head.extend(
        [
            "CPU\nmillicores",
            "vCPU/1k RPS",
            "RPS/core\nat limit",
            "memory\nMiB",
            "MiB/s per\n1k RPS",
            "CPU of\nlimit",
            MARKS,
        ]
        .map(String::from),
    );
    let rows = h
        .costs
        .iter()
        .map(|c| {
            let mut row = vec![
                c.variant.clone(),
                format!("{} ({})", c.usage.role, c.usage.program),
                num(c.throughput_rps, 1),
            ];
            if per_day_column {
                row.push(per_day(c.throughput_rps));
            }
            row.extend([
                num(c.usage.cpu_millicores, 0),
                num(c.vcpu_per_1k_rps(), 3),
                per_core_cell(c),
                num(c.usage.memory_mib, 1),
                num(c.mib_per_1k_requests(), 3),
                c.cpu_utilization()
                    .map(|u| format!("{:.0} %", u * 100.0))
                    .unwrap_or_else(|| "-".into()),
                mark(c.invalid.as_ref()),
            ]);
            (&c.load, row)
        })
        .collect();
    let mut t = vec![head];
    t.extend(under_loads(rows));
    t
}

/// Latency and throughput of every measurement (baseline included).
pub fn latency_table(h: &Headline) -> Table {
    let mut head = vec!["variant".to_string(), "req/s".into()];
    head.extend(
        PERCENTILES
            .iter()
            .map(|q| format!("{} ms", percentile_name(*q))),
    );
    head.extend(["errors".to_string(), "runs".into(), MARKS.into()]);
    let rows = h
        .groups
        .iter()
        .map(|g| {
            let mut row = vec![g.variant.clone(), num(g.throughput(), 1)];
            row.extend(PERCENTILES.iter().map(|q| num(g.latency_ms(*q), 3)));
            row.push(format!("{:.3} %", g.error_ratio() * 100.0));
            row.push(g.runs.len().to_string());
            row.push(mark(g.invalid().as_ref()));
            (&g.load, row)
        })
        .collect();
    let mut t = vec![head];
    t.extend(under_loads(rows));
    t
}

/// What one core of a proxy carried at a load, as a cell: the figure at its CPU limit, `≥ N`
/// below it (a lower bound), `-` without an allotment.
fn per_core_cell(c: &meshbench_analysis::headline::Cost) -> String {
    match c.per_core() {
        Some(PerCoreFigure::AtLimit(v)) => num(v, 0),
        Some(PerCoreFigure::AtLeast(v)) => format!("≥ {v:.0}"),
        None => "-".into(),
    }
}

/// The title of a ranking of gateways: at which load and CPU limit, and, when the order rests
/// on a run the generator's self-check calls INVALID, that (with the gateways concerned).
pub fn ranking_title(r: &GatewayRanking) -> String {
    let limit = r
        .cpu_limit
        .map(|l| format!(" on {l} cores each"))
        .unwrap_or_default();
    let mut title = format!(
        "Gateways from the least CPU per 1,000 RPS to the most, at {}{limit}",
        r.load
    );
    if let Some(i) = &r.invalid {
        let named: Vec<String> = r
            .gateways
            .iter()
            .filter(|c| c.invalid.is_some())
            .map(|c| c.usage.program.to_string())
            .collect();
        let _ = write!(title, "; the order rests on {i} ({})", named.join(", "));
    }
    title
}

/// A ranking of gateways as a table: rank, program, vCPU per 1,000 RPS, what one core carried
/// ([`per_core_cell`]), and each row's mark.
pub fn ranking_table(r: &GatewayRanking) -> Table {
    let mut t: Table = vec![["#", "gateway", "vCPU/1k RPS", "RPS/core\nat limit", MARKS]
        .map(String::from)
        .to_vec()];
    for (i, c) in r.gateways.iter().enumerate() {
        t.push(vec![
            (i + 1).to_string(),
            c.usage.program.to_string(),
            num(c.vcpu_per_1k_rps(), 3),
            per_core_cell(c),
            mark(c.invalid.as_ref()),
        ]);
    }
    t
}

/// The whole headline for the terminal, every line at most [`WIDTH`] columns for the names
/// experiments use: the added latency (value, verdict, interval under it) with its one legend
/// line, every measurement's latency and throughput, what each proxy costs with its notes, the
/// gateways ranked, then the findings.
/// Nothing when no step measured a load (every step failed, or an experiment of `control_plane`
/// steps, whose table is `control_plane::table`): no table of headers over no rows.
pub fn headline_text(h: &Headline) -> String {
    let mut o = String::new();
    if h.groups.is_empty() {
        return o;
    }
    if !h.added.is_empty() {
        let title = titled(
            "Latency added over the baseline",
            h.added.iter().map(|a| &a.load),
        );
        let _ = writeln!(
            o,
            "{title}, in ms, its 95 % interval under it (docs/answers.md):"
        );
        o.push_str(&text_table(&added_table(h), 1));
        let margin = h
            .added
            .iter()
            .flat_map(|a| &a.deltas)
            .any(|d| d.test.margin.is_some());
        let _ = writeln!(o, "  {}", verdict_legend(margin));
    }
    let title = titled("Latency and throughput", h.groups.iter().map(|g| &g.load));
    let _ = writeln!(o, "{title}:");
    o.push_str(&text_table(&latency_table(h), 1));
    if !h.costs.is_empty() {
        let title = titled("What each proxy costs", h.costs.iter().map(|c| &c.load));
        let _ = writeln!(o, "{title} (medians over repeats):");
        o.push_str(&text_table(&cost_rows(h, false), 2));
        for note in cost_notes(h) {
            o.push_str(&wrap(&note, "  ", "    "));
        }
    }
    for r in &h.gateways {
        o.push_str(&wrap(&format!("{}:", ranking_title(r)), "", "  "));
        o.push_str(&text_table(&ranking_table(r), 2));
    }
    for f in findings(h) {
        o.push_str(&wrap(&f, "  ", "    "));
    }
    o
}

/// A comparison for the terminal.
pub fn compare_text(a: &str, b: &str, pairs: &[Pair]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A = {a}\nB = {b}");
    for p in pairs {
        // Each side's line ends with its mark when the self-check calls a run of it INVALID.
        let marked = |g: &meshbench_analysis::Group| {
            g.invalid().map(|i| format!("  {i}")).unwrap_or_default()
        };
        let _ = writeln!(
            o,
            "\n{} @ {} ({} run{}, {:.1} req/s){}\n  vs {} @ {} ({} run{}, {:.1} req/s){}",
            p.a.variant,
            p.a.load,
            p.a.runs.len(),
            if p.a.runs.len() == 1 { "" } else { "s" },
            p.a.throughput(),
            marked(&p.a),
            p.b.variant,
            p.b.load,
            p.b.runs.len(),
            if p.b.runs.len() == 1 { "" } else { "s" },
            p.b.throughput(),
            marked(&p.b)
        );
        let mut t: Table = vec![[
            "",
            "A ms",
            "A runs: median (min..max)",
            "B ms",
            "B runs: median (min..max)",
            "B - A ms",
            "shift ms [95 % CI]",
            "p",
        ]
        .map(String::from)
        .to_vec()];
        for l in &p.lines {
            let runs = |s: &meshbench_analysis::compare::SideFigure| match s.runs {
                Some(r) if r.n > 1 => format!("{:.3} ({:.3}..{:.3})", r.median, r.min, r.max),
                _ => "-".into(),
            };
            t.push(vec![
                percentile_name(l.delta.q),
                num(l.a.merged_ms, 3),
                runs(&l.a),
                num(l.b.merged_ms, 3),
                runs(&l.b),
                format!("{:+.3}", l.delta.merged_ms),
                delta_cell(&l.delta),
                l.delta
                    .test
                    .shift
                    .map(|s| num(s.p, 3))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        o.push_str(&text_table(&t, 1));
        if let Some(rule) = rule_line(p) {
            o.push_str(&wrap(&rule, "  ", "    "));
        }
        for l in &p.lines {
            o.push_str(&wrap(&verdict_line(&l.delta), "  ", "    "));
        }
    }
    o
}

/// A sizing for the terminal.
pub fn sizing_text(role: &str, target: f64, s: &Sizing) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{role}: {}{} replicas x {} cores for {} RPS ({} cores in all)",
        if s.at_most { "at most " } else { "" },
        s.replicas,
        s.cores_per_replica,
        thousands(target.round() as u64),
        s.total_cores
    );
    let _ = writeln!(
        o,
        "  each replica: {:.0} RPS at the target, {:.0} millicores, {:.1} MiB; carries {}{:.0} RPS at full use",
        s.load_per_replica_rps,
        s.cpu_per_replica_mc,
        s.memory_per_replica_mib,
        if s.at_most { "at least " } else { "" },
        s.replica_capacity_rps
    );
    let _ = writeln!(o, "  assumptions:");
    for a in &s.assumptions {
        let _ = writeln!(o, "  - {a}");
    }
    o
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use meshbench_analysis::verdict::{decide, Unit};
    use meshbench_analysis::{group, Run};
    use meshbench_results::{RoleUsage, RunResult};

    #[test]
    fn a_step_row_keeps_within_a_terminal_line_and_breaks_no_role() {
        let figures = format!(
            "{:>4} {:<10} {:<14} {:>9.1} {:>7} {:>7} {:>7} {:>6}",
            3, "both", "1000 rps x 16c", 999.3, "1.640", "7.051", "21.151", 0
        );
        let items = [
            "client_proxy 186m/16.1,",
            "server_proxy 211m/16.0,",
            "backend 39m/2.0",
            " INVALID: cpu_contention",
        ]
        .map(String::from);
        let text = beside(&figures, &items);
        for line in text.lines() {
            assert!(line.chars().count() <= 120, "{text}");
        }
        assert!(
            text.starts_with(&format!("{figures}  client_proxy 186m/16.1,")),
            "{text}"
        );
        for item in &items {
            assert!(text.contains(item.trim_start()), "{item} whole in {text}");
        }
        assert_eq!(
            beside(&figures, &items[2..3]),
            format!("{figures}  backend 39m/2.0\n")
        );
    }

    /// A measured run of `variant` at `rate_rps` (offered) carrying `rps`, its proxy using `mc`
    /// millicores and `mib` MiB, limited to `limit` cores (swept when `swept`).
    pub(crate) fn measured(
        variant: &str,
        rate_rps: Option<f64>,
        rps: f64,
        (mc, mib): (f64, f64),
        limit: Option<f64>,
        swept: bool,
    ) -> Run {
        let mut r: RunResult = meshbench_results::fixtures::run_result();
        r.throughput_rps = rps;
        let mut run = Run::from_result(variant, r).unwrap();
        let topology = variant.split(' ').next().unwrap();
        run.topology = meshbench_results::Subject::Lab(
            meshbench_results::Topology::from_word(topology).expect("a topology"),
        );
        run.load.offer = rate_rps.map_or(
            meshbench_results::Offer::Closed,
            meshbench_results::Offer::open,
        );
        run.cpu = limit
            .filter(|_| swept)
            .map(|cores| meshbench_results::CpuAllotment {
                role: meshbench_results::Class::Proxy,
                cores,
            });
        let mut u: RoleUsage = serde_json::from_value(serde_json::json!({
            "role": "gateway", "program": "envoy", "workers": 1, "cpu_limit": limit,
            "samples": 10, "cpu_millicores_avg": mc, "cpu_millicores_max": mc,
            "rss_mib_avg": mib, "rss_mib_max": mib, "working_set_mib_avg": mib,
            "working_set_mib_max": mib, "rx_bytes_per_sec": 0.0, "tx_bytes_per_sec": 0.0,
            "connections_avg": 1.0, "connections_max": 1
        }))
        .unwrap();
        u.cpu_limit = limit;
        run.usage = vec![u];
        run
    }

    /// A difference of `ms` at `q` tested over eight one-second intervals a side, with the
    /// default margin: an interval to show.
    fn tested(q: f64, ms: f64) -> Delta {
        use meshbench_analysis::verdict::{Cleared, MarginFrom};
        let a = [2.081, 2.179, 2.084, 2.280, 2.078, 2.183, 2.082, 2.380];
        let b: Vec<f64> = a.iter().map(|v| v * 1.1 + ms).collect();
        let margin = Some(Cleared {
            ms: 0.105,
            from: MarginFrom::Stated {
                share: 0.05,
                floor_ms: 0.05,
            },
        });
        Delta {
            q,
            merged_ms: ms,
            test: decide(&a, &b, Unit::Seconds, margin),
        }
    }

    /// The lines of `text` wider than a terminal line.
    fn too_wide(text: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.chars().count() > WIDTH)
            .map(|l| format!("{} columns: {l}", l.chars().count()))
            .collect()
    }

    /// The demo's shape: a baseline and two sidecar variants at one load, one-second steps
    /// (every verdict too short), each proxy's costs.
    fn demo_headline() -> Headline {
        Headline::of(group(
            ["baseline", "serveronly", "both"]
                .iter()
                .map(|v| measured(v, Some(300.0), 299.6, (48.0, 9.1), None, false))
                .collect(),
        ))
    }

    /// A wide experiment: long variant names (a CPU sweep), loads with jitter swept over three
    /// rates, and differences of tens of milliseconds with their intervals.
    fn wide_headline() -> Headline {
        let mut runs = Vec::new();
        for rate in [1000.0, 10_000.0, 100_000.0] {
            for v in [
                "baseline",
                "both server_proxy=0.5cpu",
                "both server_proxy=16cpu",
            ] {
                let mut run =
                    measured(v, Some(rate), rate - 0.4, (1234.0, 123.4), Some(16.0), true);
                run.load.offer = meshbench_results::Offer::Open {
                    rate_rps: rate,
                    arrival: meshbench_results::Arrival::Poisson,
                };
                run.load.response_bytes = Some(65_536);
                runs.push(run);
            }
        }
        let mut h = Headline::of(group(runs));
        for a in &mut h.added {
            a.deltas = PERCENTILES
                .iter()
                .zip([-0.02, 2.5, 12.345, 123.456])
                .map(|(q, ms)| tested(*q, ms))
                .collect();
        }
        h
    }

    #[test]
    fn the_headline_fits_a_120_column_terminal() {
        for (shape, h) in [("demo", demo_headline()), ("wide", wide_headline())] {
            assert!(!h.added.is_empty() && !h.costs.is_empty(), "{shape}");
            let text = headline_text(&h);
            assert_eq!(too_wide(&text), Vec::<String>::new(), "{shape}:\n{text}");
            // One legend line, under the table of differences.
            let legends = text
                .lines()
                .filter(|l| l.contains("slower/faster:"))
                .count();
            assert_eq!(legends, 1, "{shape}:\n{text}");
        }
        let wide = headline_text(&wide_headline());
        // Each difference: value and verdict, its interval on the line under it.
        let lines: Vec<&str> = wide.lines().collect();
        let row = lines
            .iter()
            .position(|l| l.contains("both server_proxy=0.5cpu") && l.contains("slower"))
            .expect("a row of differences");
        assert!(lines[row].contains("+123.7 slower"), "{wide}");
        assert!(lines[row].contains("8 s + margin"), "{wide}");
        assert!(lines[row + 1].trim_start().starts_with('['), "{wide}");
        assert!(lines[row + 1].matches(", ").count() == 4, "{wide}");
        assert!(wide.contains("margin: it clears 0 only"), "{wide}");
        let demo = headline_text(&demo_headline());
        assert!(
            demo.contains("What each proxy costs at 300 rps x 1 conns ("),
            "one load, said once: {demo}"
        );
    }

    #[test]
    fn a_comparison_fits_a_120_column_terminal() {
        use meshbench_analysis::compare::Pair;
        let h = wide_headline();
        let (a, b) = (h.groups[0].clone(), h.groups[1].clone());
        let mut pair = Pair::of(a, b, Margin::DEFAULT);
        for (line, ms) in pair.lines.iter_mut().zip([-0.02, 2.5, 12.345, 123.456]) {
            line.delta = tested(line.delta.q, ms);
            line.a.runs = meshbench_stats::spread(&[101.234, 123.456, 145.678]);
            line.b.runs = meshbench_stats::spread(&[201.234, 223.456, 245.678]);
        }
        let text = compare_text(
            "experiment 12 istio-sidecar-cost baseline",
            "experiment 13 istio-sidecar-cost both server_proxy=0.5cpu",
            &[pair],
        );
        assert_eq!(too_wide(&text), Vec::<String>::new(), "{text}");
        // A side the self-check calls INVALID says so on its line.
        let (mut a, b) = (h.groups[0].clone(), h.groups[1].clone());
        contended(&mut a.runs[0]);
        let text = compare_text("A", "B", &[Pair::of(a, b, Margin::DEFAULT)]);
        let sides: Vec<&str> = text.lines().filter(|l| l.contains(" @ ")).collect();
        assert!(
            sides[0].ends_with(" req/s)  INVALID: cpu_contention"),
            "{text}"
        );
        assert!(!sides[1].contains("INVALID"), "{text}");
    }

    /// `run` as the generator's self-check leaves it when another process held its CPU.
    pub(crate) fn contended(run: &mut Run) {
        use meshbench_results::{Cause, Finding, SelfCheck};
        run.result.generator.check = SelfCheck {
            valid: false,
            findings: vec![Finding {
                cause: Cause::CpuContention,
                message: "CPU contention: a generator thread waited 31.0 % of the run".into(),
            }],
        };
    }

    /// Issue 58's example: six gateways at one load, each held to half a core and saturated,
    /// the two cheapest from steps the generator's self-check calls INVALID.
    pub(crate) fn gateways_headline() -> Headline {
        let runs = [
            ("nginx", 470.0, true),
            ("haproxy", 475.0, true),
            ("caddy", 480.0, false),
            ("envoy", 478.0, false),
            ("istio", 479.0, false),
            ("contour", 477.0, false),
        ]
        .iter()
        .enumerate()
        .map(|(i, (program, mc, invalid))| {
            let mut run = measured(
                &format!("gateway {program}"),
                None,
                4000.0 - 300.0 * i as f64,
                (*mc, 20.0),
                Some(0.5),
                false,
            );
            run.usage[0].program = serde_json::from_value(serde_json::json!(program)).unwrap();
            if *invalid {
                contended(&mut run);
            }
            run
        })
        .collect();
        Headline::of(group(runs))
    }

    #[test]
    fn invalid_steps_are_marked_beside_their_figures_and_the_ranking_is_a_table() {
        let h = gateways_headline();
        let text = headline_text(&h);
        assert_eq!(too_wide(&text), Vec::<String>::new(), "{text}");
        let line = |has: &[&str]| -> Vec<&str> {
            text.lines()
                .filter(|l| has.iter().all(|w| l.contains(w)))
                .collect()
        };
        // Each table row from an INVALID step carries its mark: at the end of the line, or,
        // where that would pass the terminal's width (the cost table), on the line under it.
        // No other row has one.
        let lines: Vec<&str> = text.lines().collect();
        for (program, invalid) in [("nginx", true), ("haproxy", true), ("caddy", false)] {
            let latency = line(&[&format!("  gateway {program} "), "0.000 %"]);
            assert_eq!(latency.len(), 1, "{text}");
            assert_eq!(
                latency[0].ends_with("  INVALID: cpu_contention"),
                invalid,
                "{text}"
            );
            let cost = lines
                .iter()
                .position(|l| l.contains(&format!("gateway ({program})")))
                .unwrap();
            assert!(!lines[cost].contains("INVALID"), "{text}");
            assert_eq!(
                lines[cost + 1].trim() == "INVALID: cpu_contention",
                invalid,
                "{text}"
            );
        }
        // The ranking: a title that says what it rests on, then a row per gateway.
        assert_eq!(
            text.matches("Gateways from the least CPU per 1,000 RPS to the most")
                .count(),
            1,
            "{text}"
        );
        let at = text.find("Gateways from the least").unwrap();
        let end = at + text[at..].find(":\n").unwrap() + 2;
        let title = text[at..end].replace("\n  ", " ");
        assert!(
            title.ends_with(
                "on 0.5 cores each; the order rests on INVALID: cpu_contention in 2 of 6 runs (nginx, haproxy):\n"
            ),
            "{title}"
        );
        let ranked: Vec<&str> = text[end..].lines().skip(2).take(6).collect();
        let order: Vec<&str> = ranked
            .iter()
            .map(|l| l.split_whitespace().nth(1).unwrap_or(""))
            .collect();
        assert_eq!(
            order,
            ["nginx", "haproxy", "caddy", "envoy", "istio", "contour"],
            "cheapest first: {text}"
        );
        assert!(ranked[0].starts_with("  1  nginx "), "{text}");
        assert!(ranked[0].ends_with("INVALID: cpu_contention"), "{text}");
        assert!(!ranked[2].contains("INVALID"), "{text}");
        assert!(
            !text.contains("least CPU per 1,000 RPS first:"),
            "no paragraph: {text}"
        );
        // What the roles share is said once under the cost table, naming them.
        assert_eq!(line(&["not enough loads for a line"]).len(), 1, "{text}");
        assert_eq!(text.matches("saturated").count(), 1, "{text}");
        let saturated = text
            .split("saturated, at 90 % of the CPU allotment or more")
            .nth(1)
            .unwrap()
            .replace("\n    ", " ");
        assert!(
            saturated.contains("gateway nginx gateway 94 % (INVALID: cpu_contention); gateway haproxy gateway 95 % (INVALID: cpu_contention); gateway caddy gateway 96 %;"),
            "{saturated}"
        );
    }

    #[test]
    fn a_table_without_a_mark_reads_as_before() {
        let text = headline_text(&demo_headline());
        assert!(!text.contains("INVALID"), "{text}");
        assert!(
            text.lines().all(|l| l == l.trim_end()),
            "no trailing column: {text}"
        );
    }

    #[test]
    fn a_fit_is_shown_only_where_it_is_defined() {
        // Two loads: any line passes through two points (r² 1), so there is none to show.
        let two = Headline::of(group(vec![
            measured("gateway", Some(300.0), 299.0, (40.0, 9.2), None, false),
            measured("gateway", Some(600.0), 598.0, (53.0, 8.9), None, false),
        ]));
        let text = [cost_notes(&two), findings(&two)].concat().join("\n");
        assert!(text.contains("not enough loads"), "{text}");
        assert!(!text.contains("r²"), "{text}");
        // Three loads: CPU whose free line starts below zero, memory that shrinks with load.
        let three = Headline::of(group(vec![
            measured("gateway", Some(100.0), 100.0, (5.0, 9.3), None, false),
            measured("gateway", Some(200.0), 200.0, (30.0, 9.1), None, false),
            measured("gateway", Some(300.0), 300.0, (55.0, 8.8), None, false),
        ]));
        let text = findings(&three).join("\n");
        assert!(text.contains("memory flat at 9.1 MiB"), "{text}");
        assert!(text.contains("vCPU per 1000 RPS"), "{text}");
        assert!(
            !text.contains(" -") && !text.contains("(-"),
            "no negative quantity: {text}"
        );
    }

    #[test]
    fn rps_per_core_is_a_capacity_only_at_the_cpu_limit() {
        // An open loop at 1000 req/s through a gateway allotted 0.5, 1 and 2 cores: 8 to 2 %
        // of its limit. Throughput does not follow the cores: no RPS per core to show, only
        // what its cores carried, as a lower bound.
        let runs = [0.5, 1.0, 2.0]
            .map(|c| {
                measured(
                    &format!("gateway proxy={c}cpu"),
                    Some(1000.0),
                    1000.0 + c,
                    (40.0, 9.0),
                    Some(c),
                    true,
                )
            })
            .to_vec();
        let h = Headline::of(group(runs));
        let text = findings(&h).join("\n");
        assert!(!text.contains("RPS per core at"), "{text}");
        assert!(!text.contains("r²"), "{text}");
        assert!(text.contains("below its CPU limit"), "{text}");
        let table = cost_table(&h);
        let col = table[0]
            .iter()
            .position(|c| c.starts_with("RPS/core"))
            .unwrap();
        assert_eq!(
            table[1][col], "≥ 2001",
            "1000.5 req/s on 0.5 cores: {table:?}"
        );
        // At its limit (96 %), what its cores carried is the capacity, measured.
        let at_limit = Headline::of(group(vec![measured(
            "gateway proxy=0.5cpu",
            None,
            9000.0,
            (480.0, 20.0),
            Some(0.5),
            true,
        )]));
        assert_eq!(cost_table(&at_limit)[1][col], "18000");
    }

    fn delta(a: &[f64], b: &[f64], merged_ms: f64) -> Delta {
        Delta {
            q: 0.5,
            merged_ms,
            test: decide(a, b, Unit::Seconds, None),
        }
    }

    #[test]
    fn a_negative_difference_within_noise_is_shown_as_noise_not_as_a_saving() {
        // A sidecar that "saves" 0.02 ms: B's seconds sit among A's.
        let d = delta(
            &[1.00, 1.10, 0.95, 1.05, 1.02],
            &[0.98, 1.08, 0.96, 1.01, 1.00],
            -0.02,
        );
        assert!(d.point_ms() < 0.0);
        let cell = delta_cell(&d);
        assert!(cell.starts_with("-0.020 noise\n"), "{cell}");
        let s = d.test.shift.unwrap();
        assert_eq!(
            cell,
            format!("{:+.3} noise\n[{:+.3}, {:+.3}]", s.estimate, s.ci.0, s.ci.1)
        );
        assert!(s.ci.0 < 0.0 && s.ci.1 > 0.0);
        let line = verdict_line(&d);
        assert!(line.starts_with("p50: within noise: B -"), "{line}");
        assert!(
            line.contains("over 5 one-second intervals a side"),
            "{line}"
        );
    }

    #[test]
    fn a_difference_inside_the_margin_is_no_difference_and_one_beyond_it_says_so() {
        use meshbench_analysis::verdict::{Cleared, MarginFrom};
        let margin = Some(Cleared {
            ms: 0.105,
            from: MarginFrom::Stated {
                share: 0.05,
                floor_ms: 0.05,
            },
        });
        let a = [2.081, 2.079, 2.084, 2.080, 2.078, 2.083, 2.082, 2.080];
        let at = |shift: f64| -> Delta {
            let b: Vec<f64> = a.iter().map(|v| v + shift).collect();
            Delta {
                q: 0.5,
                merged_ms: shift,
                test: decide(&a, &b, Unit::Seconds, margin),
            }
        };
        // Issue 24's drift: clear of zero, inside the margin.
        let d = at(0.02);
        assert_eq!(d.verdict(), Verdict::WithinMargin);
        assert!(
            delta_cell(&d).starts_with("+0.020 margin\n["),
            "{}",
            delta_cell(&d)
        );
        let line = verdict_line(&d);
        assert!(
            line.starts_with("p50: no difference: B +0.020 ms, its interval within the margin of ±0.105 ms (5 % of A, at least 0.050 ms) that identical runs differ by (95 % CI ["),
            "{line}"
        );
        // Estimated beyond the margin, its interval across it: not shown beyond it.
        let line = verdict_line(&at(0.106));
        assert!(
            line.starts_with("p50: not beyond the margin: B +0.106 ms"),
            "{line}"
        );
        let line = verdict_line(&at(1.0));
        assert!(
            line.starts_with("p50: B slower by 1.000 ms, beyond the margin of ±0.105 ms (5 % of A, at least 0.050 ms) (95 % CI ["),
            "{line}"
        );
    }

    #[test]
    fn significant_and_too_short_differences_say_so() {
        let d = delta(&[1.0, 1.1, 0.9, 1.0], &[1.5, 1.4, 1.6, 1.5], 0.5);
        assert_eq!(delta_cell(&d), "+0.500 slower\n[+0.300, +0.700]");
        assert_eq!(
            verdict_line(&d),
            "p50: B slower by 0.500 ms (95 % CI [+0.300, +0.700] ms, Mann-Whitney p=0.029, over 4 one-second intervals a side)"
        );
        let d = delta(&[1.5, 1.4, 1.6, 1.5], &[1.0, 1.1, 0.9, 1.0], -0.5);
        assert_eq!(delta_cell(&d), "-0.500 faster\n[-0.700, -0.300]");
        let d = delta(&[1.0, 1.1, 0.9], &[1.5, 1.4, 1.6], 0.5);
        assert_eq!(delta_cell(&d), "+0.500 short");
        assert_eq!(
            verdict_line(&d),
            "p50: too short to tell: 3 one-second intervals; run longer or repeat (merged B - A +0.500 ms)"
        );
    }
}
