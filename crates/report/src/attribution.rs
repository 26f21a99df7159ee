//! Where the latency goes, as people read it: per variant and load, each hop's share of p50,
//! p90 and p99 with its interval and the residual (`results show`, the HTML report's table),
//! a stacked bar per variant (the report's chart), and which hop grew between two variants
//! (`results compare`). The figures are `analysis::attribution`'s.

use std::fmt::Write as _;

use meshbench_analysis::attribution::{by_hop, Attributed, Growth};
use meshbench_results::attribution::{Node, Seen};

use crate::answers::{text_table, wrap, Table};
use crate::plot::{Chart, Draw, Series, XAxis};

/// A figure in µs as ms with its interval: `0.123 ±0.004`.
fn ms_cell(mean_us: f64, half_width_us: Option<f64>) -> String {
    match half_width_us {
        Some(h) => format!("{:.3} ±{:.3}", mean_us / 1000.0, h / 1000.0),
        None => format!("{:.3}", mean_us / 1000.0),
    }
}

/// What was sampled and how each hop was seen, in one sentence.
pub fn sentence(a: &Attributed) -> String {
    let hops: Vec<String> = a
        .path
        .iter()
        .map(|h| {
            let how = match h.seen {
                Seen::PerRequest => "per request",
                Seen::ConnectionsOnly => "connections only: in the link around it",
                Seen::NotLogged => "not logged per request: in the link around it",
            };
            format!("{} ({}) {how}", h.role.name(), h.program)
        })
        .collect();
    let path = if hops.is_empty() {
        "no proxy on the path".to_string()
    } else {
        hops.join(", ")
    };
    format!(
        "{} at {}: {} of {} sampled requests split (1 in {:.0}{}), {} retried by a proxy (named, not split), {} without every hop's line; {path}.",
        a.variant,
        a.load,
        a.split,
        a.sampled,
        1.0 / a.sample_rate.max(f64::MIN_POSITIVE),
        if a.steps > 1 {
            format!(", {} steps", a.steps)
        } else {
            String::new()
        },
        a.retried,
        a.unjoined
    )
}

/// One variant's table: a row per hop (a proxy's legs and connect together), each
/// percentile's mean share with its interval (ms), then the sum, the run's percentile and the
/// residual.
pub fn table(a: &Attributed) -> Table {
    let mut header = vec!["part (ms)".to_string()];
    header.extend(a.shares.iter().map(|s| format!("p{}", s.percentile)));
    let mut rows = vec![header];
    let hops: Vec<Vec<_>> = a.shares.iter().map(by_hop).collect();
    if let Some(first) = hops.first() {
        for (i, h) in first.iter().enumerate() {
            let mut row = vec![h.part.hop_label()];
            row.extend(
                hops.iter()
                    .map(|p| ms_cell(p[i].mean_us, p[i].half_width_us)),
            );
            rows.push(row);
        }
    }
    let line = |name: &str, f: &dyn Fn(&meshbench_analysis::attribution::Share) -> f64| {
        let mut row = vec![name.to_string()];
        row.extend(a.shares.iter().map(|s| format!("{:.3}", f(s) / 1000.0)));
        row
    };
    rows.push(line("sum of the parts", &|s| {
        s.parts.iter().map(|p| p.mean_us).sum()
    }));
    rows.push(line("the run's percentile", &|s| s.at_us));
    rows.push(line("residual", &|s| s.residual_us));
    rows
}

/// Every variant's attribution for the terminal; empty when no step had it on.
pub fn text(all: &[Attributed]) -> String {
    let mut out = String::new();
    if all.is_empty() {
        return out;
    }
    out.push_str("Where the latency goes (each part's mean over the sampled requests around each percentile, 95 % interval):\n");
    for a in all {
        out.push_str(&wrap(&sentence(a), "  ", "    "));
        if a.shares.is_empty() {
            out.push_str("    nothing to split\n");
            continue;
        }
        out.push_str(&text_table(&table(a), 1));
        for note in [thin_bands(a), clocks(a)].into_iter().flatten() {
            out.push_str(&wrap(&note, "    ", "    "));
        }
    }
    out
}

/// Where points of the path sit on different clocks (a cluster's nodes): each pair's offset
/// and its bound, and what it means for the split (nothing moves: every part is on one clock
/// or a round trip across two). None when the path had one clock.
pub fn clocks(a: &Attributed) -> Option<String> {
    let node = |n: &Node| match n {
        Node::Client => "client".to_string(),
        Node::Hop(r) => r.name().to_string(),
    };
    let pairs: Vec<String> = a
        .clocks
        .iter()
        .map(|c| {
            format!(
                "{} ({}) to {} ({}) {:+.3} ms ±{:.3} over {} requests",
                node(&c.from),
                c.from_clock,
                node(&c.to),
                c.to_clock,
                c.offset_ns as f64 / 1e6,
                c.bound_ns as f64 / 1e6,
                c.requests
            )
        })
        .collect();
    (!pairs.is_empty()).then(|| {
        format!(
            "Clocks (from each link's crossings both ways): {}. Every part is on one clock or a round trip across two, which an offset does not move.",
            pairs.join("; ")
        )
    })
}

/// Under [`STEADY_BAND`] requests around a percentile, its shares rest on too few: says which
/// and how to get more.
pub fn thin_bands(a: &Attributed) -> Option<String> {
    let thin: Vec<String> = a
        .shares
        .iter()
        .filter(|s| s.band < STEADY_BAND)
        .map(|s| format!("p{} on {}", s.percentile, s.band))
        .collect();
    (!thin.is_empty()).then(|| {
        format!(
            "few requests around {}: a higher attribution.sample or a longer step gives steadier shares (p99's band holds 1 % of the split requests)",
            thin.join(", ")
        )
    })
}

/// Requests around a percentile below which its shares are called thin.
pub const STEADY_BAND: usize = 10;

/// A stacked bar per variant and percentile at each load: the hops' shares, piled up in path
/// order.
pub fn charts(all: &[Attributed]) -> Vec<Chart> {
    let mut loads = Vec::new();
    for a in all {
        if !loads.contains(&a.load) && !a.shares.is_empty() {
            loads.push(a.load);
        }
    }
    loads
        .iter()
        .enumerate()
        .map(|(n, load)| {
            let here: Vec<&Attributed> = all
                .iter()
                .filter(|a| a.load == *load && !a.shares.is_empty())
                .collect();
            let mut categories = Vec::new();
            // The series in path order, from the variant with the most hops (so each bar
            // piles up as a request goes: generator, links and proxies, backend).
            let longest = here
                .iter()
                .flat_map(|a| a.shares.first())
                .map(by_hop)
                .max_by_key(Vec::len)
                .unwrap_or_default();
            let mut series: Vec<Series> = longest
                .iter()
                .enumerate()
                .map(|(i, h)| Series {
                    name: h.part.hop_label(),
                    points: Vec::new(),
                    draw: Draw::Stacked,
                    color: i,
                })
                .collect();
            for a in &here {
                for share in &a.shares {
                    let x = categories.len() as f64;
                    categories.push(format!("{} p{}", a.variant, share.percentile));
                    for h in by_hop(share) {
                        let name = h.part.hop_label();
                        let at = match series.iter().position(|s| s.name == name) {
                            Some(i) => i,
                            None => {
                                series.push(Series {
                                    name,
                                    points: Vec::new(),
                                    draw: Draw::Stacked,
                                    color: series.len(),
                                });
                                series.len() - 1
                            }
                        };
                        series[at].points.push((x, h.mean_us / 1000.0));
                    }
                }
            }
            let mut c = Chart::new(
                &format!("where-latency-goes-{}", n + 1),
                &format!("Where the latency goes at {load}"),
                "variant and percentile",
                "ms",
            );
            c.x_axis = XAxis::Categories(categories);
            c.series = series;
            c.sentence = "Each bar is a percentile of one variant, split into its hops: each part is its mean over the sampled requests around that percentile (the table under it gives the intervals and the residual).".into();
            c.size = (900, 420);
            c
        })
        .collect()
}

/// Which hop grew from `from` to `to`, one line per percentile.
pub fn grew_text(from: &str, to: &str, growths: &[Growth]) -> String {
    let mut out = String::new();
    if growths.is_empty() {
        return out;
    }
    let _ = writeln!(out, "Which hop grew from {from} to {to}:");
    for g in growths {
        let interval = g
            .half_width_us
            .map(|h| format!(" ±{:.3}", h / 1000.0))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  p{}: {} {:+.3} ms{interval} ({:.3} -> {:.3} ms){}",
            g.percentile,
            g.part.hop_label(),
            g.delta_us() / 1000.0,
            g.from_us / 1000.0,
            g.to_us / 1000.0,
            if g.is_clear() {
                ""
            } else {
                ", within its interval"
            }
        );
    }
    out
}
