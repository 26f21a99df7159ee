//! Stored experiments in the formats other tools read: a CSV with the columns of Istio's
//! perf/benchmark scripts (so that their plotter and spreadsheets keep working), and one
//! fortio-compatible JSON per step (so that fortio's UI and scripts read meshbench results).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use meshbench_engine::result::decode_histogram;
use meshbench_store::{ExperimentRow, StoredStep};
use serde_json::{json, Value};

/// The order roles appear in, client side first.
const ROLE_ORDER: &[&str] = &[
    "client_proxy",
    "ztunnel_client",
    "gateway",
    "waypoint",
    "server_proxy",
    "ztunnel_server",
    "backend",
];

fn role_rank(r: &str) -> (usize, String) {
    (
        ROLE_ORDER
            .iter()
            .position(|x| *x == r)
            .unwrap_or(ROLE_ORDER.len()),
        r.to_string(),
    )
}

/// Istio perf/benchmark's CSV: `StartTime, ActualDuration (s), Labels, NumThreads (connections),
/// ActualQPS, p50, p90, p99, p999 (µs), cpu_mili_avg_<role>, mem_Mi_avg_<role>, min, max, p75
/// (µs), errorPercent`, one row per finished step. Roles absent from a step are left empty.
pub fn istio_csv(steps: &[StoredStep]) -> String {
    let mut roles: Vec<String> = steps
        .iter()
        .flat_map(|s| s.step.usage.iter().map(|u| u.role.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    roles.sort_by_key(|r| role_rank(r));
    let mut out =
        String::from("StartTime,ActualDuration,Labels,NumThreads,ActualQPS,p50,p90,p99,p999");
    for r in &roles {
        let _ = write!(out, ",cpu_mili_avg_{r}");
    }
    for r in &roles {
        let _ = write!(out, ",mem_Mi_avg_{r}");
    }
    out.push_str(",min,max,p75,errorPercent\n");
    for s in steps {
        let Some(r) = &s.step.result else { continue };
        let l = &r.latency_us;
        let total = r.requests.total.max(1);
        let _ = write!(
            out,
            "{},{:.0},{},{},{:.2},{},{},{},{}",
            s.step.started_at,
            r.duration_secs,
            csv_field(&s.step.label),
            r.settings.connections,
            r.throughput_rps,
            l.p50,
            l.p90,
            l.p99,
            l.p99_9
        );
        for role in &roles {
            match s.step.usage.iter().find(|u| &u.role == role) {
                Some(u) => {
                    let _ = write!(out, ",{:.0}", u.usage.cpu_millicores_avg);
                }
                None => out.push(','),
            }
        }
        for role in &roles {
            match s.step.usage.iter().find(|u| &u.role == role) {
                Some(u) => {
                    let _ = write!(out, ",{:.1}", u.memory_mib_avg());
                }
                None => out.push(','),
            }
        }
        let _ = writeln!(
            out,
            ",{},{},{},{:.4}",
            l.min,
            l.max,
            l.p75,
            r.requests.errors as f64 * 100.0 / total as f64
        );
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One step as fortio's JSON result: durations in seconds, `ActualDuration` in nanoseconds,
/// the latency histogram as buckets with cumulative percents, percentiles 50/75/90/99/99.9.
pub fn fortio_json(e: &ExperimentRow, stored: &StoredStep) -> Option<Value> {
    let s = &stored.step;
    let r = s.result.as_ref()?;
    let h = decode_histogram(&r.histogram.latency_us).ok()?;
    let secs = |us: u64| us as f64 / 1e6;
    let count = h.len();
    // Buckets growing by 25 %: about three per doubling at small values, finer than fortio's
    // own above a millisecond. Each recorded value lands in the bucket [Start, End) holding it.
    let mut buckets: Vec<(u64, u64, u64)> = Vec::new();
    for v in h.iter_recorded() {
        let value = h.highest_equivalent(v.value_iterated_to());
        let n = v.count_at_value();
        while buckets.last().is_none_or(|b| value >= b.1) {
            let start = buckets.last().map_or(0, |b| b.1);
            let end = ((start.max(1) as f64) * 1.25).ceil() as u64;
            buckets.push((start, end.max(start + 1), 0));
        }
        buckets.last_mut().expect("pushed above").2 += n;
    }
    let mut cumulative = 0u64;
    let data: Vec<Value> = buckets
        .iter()
        .filter(|b| b.2 > 0)
        .map(|&(start, end, n)| {
            cumulative += n;
            json!({
                "Start": secs(start),
                "End": secs(end),
                "Percent": (cumulative as f64 * 100.0 / count.max(1) as f64 * 1e4).round() / 1e4,
                "Count": n,
            })
        })
        .collect();
    let percentiles: Vec<Value> = [50.0, 75.0, 90.0, 99.0, 99.9]
        .iter()
        .map(|p| json!({"Percentile": p, "Value": secs(h.value_at_quantile(p / 100.0))}))
        .collect();
    let requested_qps = match r.settings.rate_rps {
        Some(q) => format!("{q}"),
        None => "max".into(),
    };
    Some(json!({
        "RunType": "HTTP",
        "Labels": s.label,
        "StartTime": s.started_at,
        "RequestedQPS": requested_qps,
        "RequestedDuration": format!("{}s", r.settings.duration_secs.unwrap_or(r.duration_secs)),
        "ActualQPS": r.throughput_rps,
        "ActualDuration": (r.duration_secs * 1e9) as u64,
        "NumThreads": r.settings.connections,
        "Version": format!("meshbench {}", e.meshbench_version),
        "DurationHistogram": {
            "Count": count,
            "Min": secs(r.latency_us.min),
            "Max": secs(r.latency_us.max),
            "Sum": h.mean() * count as f64 / 1e6,
            "Avg": h.mean() / 1e6,
            "StdDev": h.stdev() / 1e6,
            "Data": data,
            "Percentiles": percentiles,
        },
        "Exactly": 0,
        "Jitter": r.settings.arrival.as_deref() == Some("poisson"),
        "RetCodes": r.status_codes.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "Sizes": {"Count": count, "Avg": r.bytes.received as f64 / count.max(1) as f64},
        "URL": r.url,
        "SocketCount": r.connections.opened,
        "AbortOn": 0,
        "ErrorsCount": r.requests.errors,
    }))
}
