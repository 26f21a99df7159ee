//! The report's charts, one builder per question: each takes the experiment's headline and
//! gives the charts that answer it (none when the experiment did not vary what it plots
//! against). The choice of which to draw is [`super::build`]'s, by the experiment's shape.
//! Every point taken from a run the generator's self-check calls INVALID is ringed
//! ([`Chart::push_judged`]), a line drawn for one measurement names it in the legend, and a
//! sentence naming such a figure says so beside it ([`doubt`]).

use meshbench_analysis::headline::{
    Allotment, GatewayRanking, Headline, PerCoreFigure, Saturation, KNEE_MIN_LOADS,
};
use meshbench_analysis::invalid::Invalid;
use meshbench_analysis::runs::{distinct, percentile_name, Group, PERCENTILES};
use meshbench_analysis::trend::Trend;
use meshbench_results::Role;

use crate::findings::{cpu_words, doubt, memory_words, per_core_words};
use crate::plot::{Chart, Draw, Series, XAxis};

/// Points, each with the verdict of the measurement it comes from, sorted by x: the series'
/// points and their verdicts, in one order.
fn judged_points(
    mut points: Vec<(f64, f64, Option<Invalid>)>,
) -> (Vec<(f64, f64)>, Vec<Option<Invalid>>) {
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points.into_iter().map(|(x, y, i)| ((x, y), i)).unzip()
}

fn variant_colors(h: &Headline) -> impl Fn(&str) -> usize + '_ {
    let variants = h.variants();
    move |v: &str| variants.iter().position(|x| x == v).unwrap_or(0)
}
/// The loads of `h` in the order they first come: one bar series each.
fn loads_of(h: &Headline) -> Vec<meshbench_results::LoadPoint> {
    distinct(h.groups.iter().map(|g| g.load))
}

/// One load: a chart of bars per percentile, a category per variant, a bar per load.
pub(super) fn latency_by_variant(h: &Headline) -> Vec<Chart> {
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
                let (points, verdicts) = judged_points(
                    variants
                        .iter()
                        .enumerate()
                        .filter_map(|(x, v)| {
                            let g = h.groups.iter().find(|g| g.variant == *v && g.load == *load)?;
                            Some((x as f64, g.latency_ms(q), g.invalid()))
                        })
                        .collect(),
                );
                c.push_judged(
                    Series {
                        name: load.to_string(),
                        points,
                        draw: Draw::Bars,
                        color: i,
                    },
                    &verdicts,
                );
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
                    "{name} is highest for {} at {} ({:.3} ms){} and lowest for {} at {} ({:.3} ms){}; the table above says which differences are more than noise.",
                    hi.variant,
                    hi.load,
                    hi.latency_ms(q),
                    doubt(hi.invalid().as_ref()),
                    lo.variant,
                    lo.load,
                    lo.latency_ms(q),
                    doubt(lo.invalid().as_ref())
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
pub(super) fn cost_by_variant(h: &Headline) -> Vec<Chart> {
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
            let (points, verdicts) = judged_points(
                keys.iter()
                    .enumerate()
                    .filter_map(|(x, (v, role))| {
                        let cost = h.costs.iter().find(|c| {
                            c.variant == *v && c.usage.role == *role && c.load == *load
                        })?;
                        // Not measured (an external role's query failed): no bar.
                        Some((x as f64, figure(cost), cost.invalid.clone()))
                            .filter(|p| p.1.is_finite())
                    })
                    .collect(),
            );
            if !points.is_empty() {
                c.push_judged(
                    Series {
                        name: load.to_string(),
                        points,
                        draw: Draw::Bars,
                        color: i,
                    },
                    &verdicts,
                );
            }
        }
        let most = h
            .costs
            .iter()
            .filter(|c| figure(c).is_finite())
            .max_by(|a, b| figure(a).total_cmp(&figure(b)));
        c.sentence = match most {
            Some(m) => format!(
                "Each bar is one load, medians over repeats; the most {what} is {} in {} at {} ({:.1} {unit}){}.",
                m.usage.role,
                m.variant,
                m.load,
                figure(m),
                doubt(m.invalid.as_ref())
            ),
            None => "No proxy's figure was measured.".into(),
        };
        out.push(c);
    }
    out
}

/// A CPU sweep: p50 and p99 latency, and each limited proxy's CPU and memory, as lines over
/// the swept role's allotment (one line per topology and load).
pub(super) fn over_allotment(h: &Headline) -> Vec<Chart> {
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
            let (points, verdicts) = judged_points(
                swept
                    .iter()
                    .filter(|g| g.topology == *topology && g.load == *load)
                    .map(|g| (cores(g), g.latency_ms(q), g.invalid()))
                    .collect(),
            );
            c.push_judged(
                Series {
                    name: label(topology, load),
                    points,
                    draw: Draw::LinePoints,
                    color: i,
                },
                &verdicts,
            );
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
            let (points, verdicts) = judged_points(
                h.costs
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
                        Some((cores(g), y, c.invalid.clone())).filter(|p| p.1.is_finite())
                    })
                    .collect(),
            );
            c.push_judged(
                Series {
                    name: format!("{} {proxy}", label(topology, load)),
                    points,
                    draw: Draw::LinePoints,
                    color: i,
                },
                &verdicts,
            );
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

pub(super) fn latency_vs_rate(h: &Headline) -> Vec<Chart> {
    let rates = distinct(h.groups.iter().filter_map(|g| g.load.rate_rps_milli()));
    let Some(conns) = main_connections(h) else {
        return Vec::new();
    };
    if rates.len() < 2 {
        return Vec::new();
    }
    let col = variant_colors(h);
    PERCENTILES
        .iter()
        .map(|&q| {
            let name = percentile_name(q);
            let mut c = Chart::new(
                &format!("latency_{}_vs_rate", name.replace('.', "")),
                &format!("{name} latency vs offered load ({conns} connections)"),
                "offered load (requests per second)",
                &format!("{name} latency (ms)"),
            );
            let mut top: Vec<(String, f64, f64)> = Vec::new();
            for v in h.variants() {
                let (pts, verdicts) = judged_points(
                    h.groups
                        .iter()
                        .filter(|g| g.variant == v && g.load.connections == conns)
                        .filter_map(|g| Some((g.load.rate_rps()?, g.latency_ms(q), g.invalid())))
                        .collect(),
                );
                if let Some(last) = pts.last() {
                    top.push((v.clone(), last.0, last.1));
                }
                c.push_judged(
                    Series {
                        name: v.clone(),
                        points: pts,
                        draw: Draw::LinePoints,
                        color: col(&v),
                    },
                    &verdicts,
                );
            }
            c.sentence = match top.iter().max_by(|a, b| a.2.total_cmp(&b.2)) {
                Some((v, at, ms)) => {
                    let low = top.iter().min_by(|a, b| a.2.total_cmp(&b.2));
                    format!(
                        "At the highest load, {name} is highest for {v} ({ms:.3} ms at {at} rps){}.",
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

pub(super) fn latency_vs_connections(h: &Headline) -> Vec<Chart> {
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
            let at = rate.map_or("a closed loop".to_string(), |r| format!("{} rps", r as f64 / 1000.0));
            let mut c = Chart::new(
                &format!("latency_{}_vs_connections", name.replace('.', "")),
                &format!("{name} latency vs connections ({at})"),
                "connections",
                &format!("{name} latency (ms)"),
            );
            let mut growth: Vec<(String, f64)> = Vec::new();
            for v in h.variants() {
                let (pts, verdicts) = judged_points(
                    h.groups
                        .iter()
                        .filter(|g| g.variant == v && g.load.rate_rps_milli() == rate)
                        .map(|g| (g.load.connections as f64, g.latency_ms(q), g.invalid()))
                        .collect(),
                );
                if let (Some(a), Some(b)) = (pts.first(), pts.last()) {
                    growth.push((v.clone(), b.1 - a.1));
                }
                c.push_judged(
                    Series {
                        name: v.clone(),
                        points: pts,
                        draw: Draw::LinePoints,
                        color: col(&v),
                    },
                    &verdicts,
                );
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

pub(super) fn cost_vs_rate(h: &Headline) -> Vec<Chart> {
    if h.costs.is_empty() {
        return Vec::new();
    }
    let keys = cost_keys(h);
    let mut out = Vec::new();
    for (what, unit) in [("CPU", "millicores"), ("memory", "MiB")] {
        let mut c = Chart::new(
            &format!("proxy_{}_vs_rate", what.to_lowercase()),
            &format!("Proxy {what} vs throughput"),
            "throughput (requests per second)",
            &format!("{what} ({unit})"),
        );
        for (i, (v, role)) in keys.iter().enumerate() {
            let (pts, verdicts) = judged_points(
                h.costs
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
                            c.invalid.clone(),
                        )
                    })
                    // Not measured (an external role's query failed): no point.
                    .filter(|p| p.1.is_finite())
                    .collect(),
            );
            if pts.is_empty() {
                continue;
            }
            c.push_judged(
                Series {
                    name: format!("{v} {role}"),
                    points: pts.clone(),
                    draw: Draw::Points,
                    color: i,
                },
                &verdicts,
            );
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
        c.sentence = cost_sentence(h, what);
        out.push(c);
    }
    out
}

/// The sentence under the proxy `what` ("CPU" or "memory") vs throughput chart: the role whose
/// `what` grows most with load, else the first role's trend.
fn cost_sentence(h: &Headline, what: &str) -> String {
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
    match (steepest, h.fits.first()) {
        (Some((f, _)), _) => format!(
            "The {what} that grows most with load is {} in {}'s: {}{} (dashed: the fitted line, or the level of a flat one).",
            f.role,
            f.variant,
            words(&trend(f)),
            doubt(f.invalid.as_ref())
        ),
        (None, Some(f)) => format!(
            "Each point is one load; no line: {} {}'s {what} is {}{}.",
            f.variant,
            f.role,
            words(&trend(f)),
            doubt(f.invalid.as_ref())
        ),
        (None, None) => "Each point is one load.".into(),
    }
}

pub(super) fn rps_vs_allotment(h: &Headline) -> Vec<Chart> {
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
            let (limited, below): (Vec<&Allotment>, Vec<&Allotment>) =
                p.points.iter().partition(|a| a.at_limit());
            for (name, points, color) in [
                ("at its CPU limit", limited, 0),
                ("below its limit", below, 7),
            ] {
                if !points.is_empty() {
                    let verdicts: Vec<Option<Invalid>> =
                        points.iter().map(|a| a.invalid.clone()).collect();
                    c.push_judged(
                        Series {
                            name: name.into(),
                            points: points.iter().map(|a| (a.cores, a.throughput_rps)).collect(),
                            draw: Draw::Points,
                            color,
                        },
                        &verdicts,
                    );
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

pub(super) fn latency_throughput(h: &Headline, slo: Option<f64>) -> Vec<Chart> {
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
        let (pts, verdicts) = judged_points(
            h.groups
                .iter()
                .filter(|g| g.variant == *v && g.load.connections == *conns)
                .map(|g| (g.throughput(), g.latency_ms(0.99), g.invalid()))
                .collect(),
        );
        c.push_judged(
            Series {
                name: if many_conns {
                    format!("{v}, {conns} conns")
                } else {
                    v.clone()
                },
                points: pts,
                draw: Draw::LinePoints,
                color: col(v),
            },
            &verdicts,
        );
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
            "The knee (x) is where latency starts to climb faster than throughput: {} bends at {:.0} req/s with p99 {:.3} ms{}{}.",
            k.variant,
            k.throughput_rps,
            k.p99_ms,
            doubt(k.invalid.as_ref()),
            match sat.first() {
                Some(s) => format!("; {} in {} reaches 90 % of its CPU allotment from {:.0} req/s{}", s.role, s.variant, s.throughput_rps, doubt(s.invalid.as_ref())),
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

pub(super) fn spectrum(h: &Headline) -> Vec<Chart> {
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
        // A line is one measurement: its name carries the self-check's mark.
        let named = format!("{}{}", g.variant, doubt(g.invalid().as_ref()));
        tails.push((named.clone(), g.latency_ms(0.999)));
        c.series.push(Series {
            name: named,
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

pub(super) fn timelines(h: &Headline, warmup: f64) -> Vec<Chart> {
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
                &format!(
                    "Step {} · {} · {} · repeat {}{}",
                    i + 1,
                    g.variant,
                    g.load,
                    r.repeat + 1,
                    r.invalid().map(|c| format!(" · {}", meshbench_analysis::invalid::mark(c))).unwrap_or_default()
                ),
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
            // The whole step is what the self-check judged: its finding is said under it.
            if let Some(f) = r.result.generator.check.why_invalid() {
                c.sentence.push_str(&format!(" {}: {}", meshbench_analysis::invalid::mark(f.cause), f.message));
            }
            c
        })
        .collect()
}

/// A ranking of gateways as bar charts, in its order (the least CPU per 1,000 RPS first): the
/// vCPU per 1,000 RPS of each, and the RPS one core carried (at its CPU limit, or at least
/// that below it, a bar of its own colour). `n` tells the rankings of one report apart.
pub(super) fn gateway_ranking(r: &GatewayRanking, n: usize) -> Vec<Chart> {
    let names: Vec<String> = r
        .gateways
        .iter()
        .map(|c| c.usage.program.to_string())
        .collect();
    let at = format!(
        "{}{}",
        r.load,
        r.cpu_limit
            .map(|l| format!(", {l} cores each"))
            .unwrap_or_default()
    );
    let mut cpu = Chart::new(
        &format!("gateways_cpu_{}", n + 1),
        &format!("vCPU per 1,000 RPS by gateway ({at})"),
        "gateway, least CPU per 1,000 RPS first",
        "vCPU per 1,000 RPS",
    );
    cpu.x_axis = XAxis::Categories(names.clone());
    let verdicts: Vec<Option<Invalid>> = r.gateways.iter().map(|c| c.invalid.clone()).collect();
    cpu.push_judged(
        Series {
            name: "vCPU per 1,000 RPS".into(),
            points: r
                .gateways
                .iter()
                .enumerate()
                .map(|(x, c)| (x as f64, c.vcpu_per_1k_rps()))
                .collect(),
            draw: Draw::Bars,
            color: 0,
        },
        &verdicts,
    );
    cpu.sentence = match (r.gateways.first(), r.gateways.last()) {
        (Some(least), Some(most)) => format!(
            "{} costs least ({:.3} vCPU per 1,000 RPS){}, {} most ({:.3}){}; the table above has the figures.",
            least.usage.program,
            least.vcpu_per_1k_rps(),
            doubt(least.invalid.as_ref()),
            most.usage.program,
            most.vcpu_per_1k_rps(),
            doubt(most.invalid.as_ref())
        ),
        _ => String::new(),
    };
    let mut core = Chart::new(
        &format!("gateways_per_core_{}", n + 1),
        &format!("RPS per core by gateway ({at})"),
        "gateway, least CPU per 1,000 RPS first",
        "requests per second per core",
    );
    core.x_axis = XAxis::Categories(names);
    for (name, at_limit, color) in [
        ("at its CPU limit", true, 0),
        ("below it: at least", false, 7),
    ] {
        let (points, verdicts): (Vec<(f64, f64)>, Vec<Option<Invalid>>) = r
            .gateways
            .iter()
            .enumerate()
            .filter_map(|(x, c)| {
                let v = match c.per_core()? {
                    PerCoreFigure::AtLimit(v) if at_limit => v,
                    PerCoreFigure::AtLeast(v) if !at_limit => v,
                    PerCoreFigure::AtLimit(_) | PerCoreFigure::AtLeast(_) => return None,
                };
                Some(((x as f64, v), c.invalid.clone()))
            })
            .unzip();
        if !points.is_empty() {
            core.push_judged(
                Series {
                    name: name.into(),
                    points,
                    // One bar per gateway, of the colour of its kind: each gateway is in one
                    // of the two series, so the two pile up in one slot.
                    draw: Draw::Stacked,
                    color,
                },
                &verdicts,
            );
        }
    }
    if core.series.is_empty() {
        return vec![cpu];
    }
    core.sentence = "What one core of each gateway carried: at its CPU limit (90 % of its allotment or more) its capacity, measured; below it only a lower bound, as the load set the rate.".into();
    vec![cpu, core]
}
