//! What a change costs the traffic, as people read it: one table ranking the variants (each
//! gateway, or Istio's sidecars with their mesh changed) by errors per change and added tail
//! (each against itself without changes), each change of each step on a line of its own
//! (`results show`), and per variant its latency over time with each change marked (the HTML
//! report).

use meshbench_analysis::changes::ChangeCost;
use meshbench_results::change::{still_variant, ChangeRecord};
use meshbench_results::{ChangeKind, RunResult};
use meshbench_store::StoredStep;

use crate::answers::{delta_cell, text_table, titled, Table, MARKS};
use crate::plot::{Chart, Draw, Series};

/// The ranking's title.
pub fn title(costs: &[ChangeCost]) -> String {
    titled(
        "What a change costs the traffic (each variant against itself without changes; 95 % intervals)",
        costs.iter().map(|c| &c.load),
    )
}

/// The ranking as text: [`table`] under [`title`]; "" when no step had changes.
pub fn text(costs: &[ChangeCost]) -> String {
    if costs.is_empty() {
        return String::new();
    }
    format!("{}:\n{}", title(costs), text_table(&table(costs), 4))
}

/// The gateways from the fewest errors per change to the most (then the least added p99.9),
/// one row per kind of change.
pub fn table(costs: &[ChangeCost]) -> Table {
    let mut ranked: Vec<&ChangeCost> = costs.iter().collect();
    ranked.sort_by(|a, b| {
        (a.errors_per_change())
            .total_cmp(&b.errors_per_change())
            .then(added_p999(a).total_cmp(&added_p999(b)))
    });
    let mut t: Table = vec![[
        "#",
        "variant",
        "told by",
        "change",
        "n",
        "errors\nper change",
        "errors by kind",
        "served ms\np50",
        "p99",
        "extra conns\nper change",
        "added p99 ms",
        "added p99.9 ms",
        "added max ms",
        MARKS,
    ]
    .map(String::from)
    .to_vec()];
    for (i, c) in ranked.iter().enumerate() {
        for (j, k) in c.kinds.iter().enumerate() {
            let first = j == 0;
            let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
            let kinds: Vec<String> = k.errors.iter().map(|(e, n)| format!("{e} {n}")).collect();
            let mut mark = Vec::new();
            if k.never_served > 0 {
                mark.push(format!("{} never served", k.never_served));
            }
            if k.failed > 0 {
                mark.push(format!("{} failed", k.failed));
            }
            if first {
                if let Some(why) = &c.invalid {
                    mark.push(why.to_string());
                }
            }
            let once = |s: String| if first { s } else { String::new() };
            t.push(vec![
                once((i + 1).to_string()),
                once(c.variant.clone()),
                once(c.told_by.clone()),
                k.kind.to_string(),
                k.changes.to_string(),
                format!("{:.2}", k.errors_per_change()),
                if kinds.is_empty() {
                    "none".into()
                } else {
                    kinds.join(", ")
                },
                ms(k.served_at(0.5)),
                ms(k.served_at(0.99)),
                (c.extra_connections_per_change(k)).map_or("-".into(), |n| format!("{n:+.1}")),
                once(c.added.first().map(delta_cell).unwrap_or_default()),
                once(c.added.get(1).map(delta_cell).unwrap_or_default()),
                once(format!("{:+.3}", c.added_max_ms)),
                mark.join("; "),
            ]);
        }
    }
    t
}

fn added_p999(c: &ChangeCost) -> f64 {
    c.added.get(1).map_or(0.0, |d| d.point_ms())
}

/// Every change of every step that applied some, one line each: when it was written, what it
/// was, how long the telling took, when it was first served, and the requests, errors and
/// tail of its seconds.
pub fn per_change(steps: &[StoredStep]) -> String {
    let mut out = String::new();
    for s in steps {
        let Some(c) = s.step.changes.as_ref().filter(|c| c.changed()) else {
            continue;
        };
        out.push_str(&format!(
            "Changes of step {} ({}, told by {}):\n",
            s.step.seq + 1,
            s.step.variant,
            c.told_by
        ));
        for r in &c.changes {
            let served = match (&r.failed, r.served_ms) {
                (Some(why), _) => format!("failed: {why}"),
                (None, Some(ms)) => format!("served {ms:.1} ms"),
                (None, None) => "never served".into(),
            };
            let errors = match (r.error_count(), r.connections_failed) {
                (0, _) => "0 errors".to_string(),
                (n, failed) => {
                    let kinds: Vec<String> =
                        r.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
                    let on = match failed {
                        0 => String::new(),
                        1 => " on 1 failed connection".to_string(),
                        c => format!(" on {c} failed connections"),
                    };
                    format!("{n} errors ({}){on}", kinds.join(", "))
                }
            };
            // The proxy a change is pushed to: the gateway, or the client's sidecar.
            let whose = match r.kind {
                ChangeKind::ServiceEntry => "client sidecar",
                _ => "gateway",
            };
            let peaks = match (r.gateway_cpu_peak_millicores, r.gateway_memory_peak_mib) {
                (Some(cpu), Some(mib)) => {
                    format!("; {whose} peak {cpu:.0} millicores, {mib:.1} MiB")
                }
                (Some(cpu), None) => format!("; {whose} peak {cpu:.0} millicores"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "  {:>7.3} s  {}: told {:.1} ms, {served}; seconds {}-{}: {} requests, {errors}, {} connections opened, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms{peaks}\n",
                r.written_ms / 1000.0,
                r.what,
                r.told_ms,
                r.seconds.0,
                r.seconds.1,
                r.requests,
                r.connections_opened,
                r.p99_us as f64 / 1000.0,
                r.p999_us as f64 / 1000.0,
                r.max_us as f64 / 1000.0,
            ));
        }
    }
    out
}

/// Per gateway and load, latency over time of the first repeat with changes beside its pair
/// without them, each change marked where it was written with its kind and errors.
pub fn charts(steps: &[StoredStep], warmup_secs: f64) -> Vec<Chart> {
    let mut out = Vec::new();
    for s in steps {
        let (Some(c), Some(result)) = (s.step.changes.as_ref(), s.step.result.as_ref()) else {
            continue;
        };
        if !c.changed() || s.step.repeat != 0 {
            continue;
        }
        let Some(still_variant) = still_variant(&s.step.variant) else {
            continue;
        };
        let pair = steps.iter().find(|p| {
            p.step.repeat == 0
                && p.step.variant == still_variant
                && p.step.load_point() == s.step.load_point()
                && p.step.changes.as_ref().is_some_and(|c| !c.changed())
        });
        let t = |second: u32| warmup_secs + f64::from(second) + 0.5;
        let p99 = |r: &RunResult| -> Vec<(f64, f64)> {
            (r.timeline.iter())
                .map(|p| (t(p.second), p.p99_us as f64 / 1000.0))
                .collect()
        };
        let mut chart = Chart::new(
            &format!("changes_{:03}", out.len() + 1),
            &format!(
                "{} · {} · changes marked",
                s.step.variant,
                s.step.load_point()
            ),
            "seconds since the load started",
            "p99 latency per second (ms)",
        );
        chart.size = (760, 300);
        chart.series.push(Series {
            name: "p99 with changes".into(),
            points: p99(result),
            draw: Draw::Line,
            color: 1,
        });
        if let Some(r) = pair.and_then(|p| p.step.result.as_ref()) {
            chart.series.push(Series {
                name: "p99 without".into(),
                points: p99(r),
                draw: Draw::Line,
                color: 0,
            });
        }
        for r in &c.changes {
            let errors = match r.error_count() {
                0 => String::new(),
                n => format!(" ({n} errors)"),
            };
            chart.marks.push((
                warmup_secs + r.written_ms / 1000.0,
                r.p99_us as f64 / 1000.0,
                format!("{}{errors}", r.kind),
            ));
        }
        if warmup_secs > 0.0 {
            chart.shade = Some((0.0, warmup_secs, "warm-up (not measured)".into()));
        }
        let errors: u64 = c.changes.iter().map(ChangeRecord::error_count).sum();
        chart.sentence = format!(
            "{} changes told by {}, {errors} failed requests in their seconds; each mark is a change where it was written, at the p99 of its seconds (repeat 1).",
            c.changes.len(),
            c.told_by
        );
        out.push(chart);
    }
    out
}
