//! Stored experiments in the formats other tools read: a CSV with the columns of Istio's
//! perf/benchmark scripts, written as they write them (so that their graph_plotter and
//! spreadsheets take it as their own, meshbench's precise figures in extra columns), and one
//! fortio-compatible JSON per step (so that fortio's UI and scripts read meshbench results).
//! Both are of a load: a step without a result (failed before measuring, or a `control_plane`
//! step, which sends none) has no row and no file.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use meshbench_results::histogram::decode_histogram;
use meshbench_results::{Arrival, ChainRole, Protocol, Role};
use meshbench_store::{ExperimentRow, StoredStep};
use serde_json::{json, Value};

/// The order roles' columns appear in: the chain's client side first, then every other role
/// (the sampler, an external variant's own) by name.
fn role_rank(r: &Role) -> (u8, &str) {
    let rank = match r {
        Role::Chain(c) => match c {
            ChainRole::ClientProxy => 0,
            ChainRole::ZtunnelClient => 1,
            ChainRole::Gateway => 2,
            ChainRole::Waypoint => 3,
            ChainRole::ServerProxy => 4,
            ChainRole::ZtunnelServer => 5,
            ChainRole::Backend | ChainRole::BackendReplica(_) => 6,
        },
        Role::Istiod | Role::Contour | Role::Sampler | Role::External(_) => 7,
    };
    (rank, r.name())
}

/// The pods of Istio's perf/benchmark whose `istio-proxy` containers its scripts measure,
/// for meshbench's roles: the client's sidecar runs in the `fortioclient` pod, the server's in
/// `fortioserver`, the ingress gateway is `istio-ingressgateway`. Ambient's tunnels and
/// waypoint have no column there (their scripts measure sidecars and the gateway only).
pub const ISTIO_PODS: [(ChainRole, &str); 3] = [
    (ChainRole::ClientProxy, "fortioclient"),
    (ChainRole::ServerProxy, "fortioserver"),
    (ChainRole::Gateway, "istio-ingressgateway"),
];

/// What Istio's fortio.py writes as `RequestedQPS` for a run at no set rate ("max").
pub const ISTIO_MAX_QPS: u64 = 99_999_999;

/// Istio perf/benchmark's CSV, a drop-in for their scripts (graph_plotter selects rows by
/// `ActualQPS == rate`, `NumThreads == connections` and the label's ending, and reads the
/// proxies' columns by their pod names). First their columns, written as their fortio.py and
/// prom.py write them: `StartTime, ActualDuration` (whole seconds, truncated), `Labels,
/// NumThreads, ActualQPS` (rounded to an integer, ties to even as Python's `round`), `p50, p90,
/// p99, p999` (µs, integers), `cpu_mili_avg_istio_proxy_<pod>` (millicores) and
/// `mem_Mi_avg_istio_proxy_<pod>` (MiB) for the pods of [`ISTIO_PODS`]; then fortio.py's other
/// keys `RequestedQPS` ([`ISTIO_MAX_QPS`] in a closed loop), `min, max, p75` (µs),
/// `errorPercent`; then meshbench's own figures: `meshbench_actual_qps`,
/// `meshbench_duration_secs` (as measured) and `cpu_mili_avg_<role>`, `mem_Mi_avg_<role>` for
/// every role under meshbench's names. One row per step with a result; a role absent from a
/// step is an empty cell (read as NaN: no proxy is not a proxy using nothing). A
/// `control_plane` step has no row and adds no column: every column of theirs is of a load
/// (their scripts measure the data plane), and it sends none; its figures are in the JSON and
/// SMP exports. `ActualQPS` is
/// what was achieved, never the rate asked for: a step that fell short of its rate by half a
/// request per second keeps its row and every cell, and their plotter, which selects by
/// `ActualQPS == rate`, has no point for it (docs/cli.md says when that happens).
pub fn istio_csv(steps: &[StoredStep]) -> String {
    let mut roles: Vec<Role> = steps
        .iter()
        .filter(|s| s.step.result.is_some())
        .flat_map(|s| s.step.usage.iter().map(|u| u.role.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    roles.sort_by(|a, b| role_rank(a).cmp(&role_rank(b)));
    let mut out =
        String::from("StartTime,ActualDuration,Labels,NumThreads,ActualQPS,p50,p90,p99,p999");
    for (_, pod) in ISTIO_PODS {
        let _ = write!(out, ",cpu_mili_avg_istio_proxy_{pod}");
    }
    for (_, pod) in ISTIO_PODS {
        let _ = write!(out, ",mem_Mi_avg_istio_proxy_{pod}");
    }
    out.push_str(
        ",RequestedQPS,min,max,p75,errorPercent,meshbench_actual_qps,meshbench_duration_secs",
    );
    for r in &roles {
        let _ = write!(out, ",cpu_mili_avg_{r}");
    }
    for r in &roles {
        let _ = write!(out, ",mem_Mi_avg_{r}");
    }
    out.push('\n');
    for s in steps {
        let Some(r) = &s.step.result else { continue };
        let l = &r.latency_us;
        let total = r.requests.total.max(1);
        let usage = |role: &Role| s.step.usage.iter().find(|u| u.role == *role);
        // A figure not measured is an empty cell, as a role absent from the step is.
        let cpu = |role: &Role| {
            usage(role)
                .and_then(|u| u.cpu_millicores())
                .map(|c| format!("{c:.3}"))
        };
        let mem = |role: &Role| {
            usage(role)
                .and_then(|u| u.memory_mib())
                .map(|m| format!("{m:.3}"))
        };
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{}",
            s.step.started_at,
            r.duration_secs.trunc() as u64,
            csv_field(&s.step.label),
            r.settings.connections,
            r.throughput_rps.round_ties_even() as u64,
            l.p50,
            l.p90,
            l.p99,
            l.p99_9
        );
        let cells = ISTIO_PODS
            .iter()
            .map(|(role, _)| cpu(&Role::Chain(*role)))
            .chain(ISTIO_PODS.iter().map(|(role, _)| mem(&Role::Chain(*role))));
        for cell in cells {
            let _ = write!(out, ",{}", cell.unwrap_or_default());
        }
        let requested = s
            .step
            .params
            .offer
            .rate_rps()
            .map_or(ISTIO_MAX_QPS, |q| q.round_ties_even() as u64);
        let _ = write!(
            out,
            ",{requested},{},{},{},{:.4},{},{}",
            l.min,
            l.max,
            l.p75,
            r.requests.errors as f64 * 100.0 / total as f64,
            r.throughput_rps,
            r.duration_secs
        );
        let cells = roles.iter().map(&cpu).chain(roles.iter().map(&mem));
        for cell in cells {
            let _ = write!(out, ",{}", cell.unwrap_or_default());
        }
        out.push('\n');
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
        // fortio names its gRPC runs so; HTTP/1.1, HTTP/2 and HTTP/3 are all HTTP to it.
        "RunType": match r.settings.protocol {
            Protocol::Grpc => "GRPC Ping",
            Protocol::Http1 | Protocol::Http2 | Protocol::Http3 => "HTTP",
        },
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
        "Jitter": r.settings.arrival == Some(Arrival::Poisson),
        // fortio's gRPC results name a call by its status, a successful ping SERVING.
        "RetCodes": r.status_codes.iter().map(|(k, v)| (k.clone(), json!(v)))
            .chain(r.grpc_status.iter().map(|(k, v)| {
                (if k == "OK" { "SERVING".to_string() } else { k.clone() }, json!(v))
            }))
            .collect::<serde_json::Map<_, _>>(),
        "Sizes": {"Count": count, "Avg": r.bytes.received as f64 / count.max(1) as f64},
        "URL": r.url,
        "SocketCount": r.connections.opened,
        "AbortOn": 0,
        "ErrorsCount": r.requests.errors,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored step from its JSON form, over the analysis crate's fixture result.
    fn step(
        seq: u32,
        topology: &str,
        qps: Option<f64>,
        rps: f64,
        roles: &[(&str, f64)],
    ) -> StoredStep {
        let mut result: Value =
            serde_json::from_str(meshbench_results::fixtures::RUN_RESULT_JSON).unwrap();
        result["throughput_rps"] = rps.into();
        result["duration_secs"] = 2.000093.into();
        result["settings"]["connections"] = 4.into();
        let usage: Vec<Value> = roles
            .iter()
            .map(|(role, cpu)| {
                json!({"role": role, "program": "nginx", "workers": 1, "cpu_limit": null,
                    "samples": 3, "cpu_millicores_avg": cpu, "cpu_millicores_max": cpu,
                    "rss_mib_avg": cpu / 10.0, "rss_mib_max": 1.0, "working_set_mib_avg": null,
                    "working_set_mib_max": null, "rx_bytes_per_sec": 0.0, "tx_bytes_per_sec": 0.0,
                    "connections_avg": 1.0, "connections_max": 1})
            })
            .collect();
        let record = json!({
            "seq": seq, "repeat": 0, "topology": topology, "variant": topology,
            "label": format!("t_qps_{}_c_4_1024_default_{topology}", qps.map_or("max".into(), |q| q.to_string())),
            "params": {"qps": qps, "connections": 4, "response_bytes": 1024, "request_bytes": 0,
                "jitter": false, "mode": if qps.is_some() { "open" } else { "closed" },
                "protocol": "http1", "cpu": null},
            "started_at": "2026-11-23T00:00:00Z", "status": "ok", "error": null, "versions": {},
            "result": result, "usage": usage,
        });
        StoredStep {
            id: i64::from(seq) + 1,
            step: serde_json::from_value(record).unwrap(),
        }
    }

    /// Rows as maps from column name to cell.
    fn rows(csv: &str) -> Vec<std::collections::BTreeMap<String, String>> {
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        lines
            .map(|l| {
                let cells: Vec<&str> = l.split(',').collect();
                assert_eq!(cells.len(), header.len(), "{l}");
                header
                    .iter()
                    .zip(cells)
                    .map(|(h, c)| (h.to_string(), c.to_string()))
                    .collect()
            })
            .collect()
    }

    /// Issue 24: Istio's plotter had no `both` point at 100 qps in a CSV of 0.6 s steps. The
    /// step was there with every cell; its achieved rate, 60 requests over 0.6036 s, is 99.4,
    /// and `ActualQPS` says so: the row is kept whole, keyed by what was achieved.
    #[test]
    fn a_step_short_of_its_rate_keeps_its_row_and_every_cell() {
        let mut short = step(
            1,
            "both",
            Some(100.0),
            99.4,
            &[("client_proxy", 2.5), ("server_proxy", 2.25)],
        );
        short.step.result.as_mut().unwrap().duration_secs = 0.603641;
        let csv = istio_csv(&[short]);
        let rows = rows(&csv);
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!(row["ActualQPS"], "99");
        assert_eq!(row["RequestedQPS"], "100");
        assert_eq!(row["meshbench_actual_qps"], "99.4");
        for column in [
            "cpu_mili_avg_istio_proxy_fortioclient",
            "cpu_mili_avg_istio_proxy_fortioserver",
            "mem_Mi_avg_istio_proxy_fortioclient",
            "mem_Mi_avg_istio_proxy_fortioserver",
            "p50",
            "p999",
        ] {
            assert!(!row[column].is_empty(), "{column}: {row:?}");
        }
    }

    #[test]
    fn the_istio_csv_has_their_columns_first_written_as_they_write_them() {
        let mut failed = step(4, "both", Some(200.0), 0.0, &[]);
        failed.step.result = None;
        // A control-plane step: no load, istiod's usage; neither a row nor a column of its own.
        let control_plane = StoredStep {
            id: 6,
            step: crate::control_plane::fixture::step(5),
        };
        assert!(fortio_json(&crate::smp::tests::experiment(), &control_plane).is_none());
        let steps = [
            step(
                0,
                "baseline",
                Some(200.0),
                199.88,
                &[("backend", 20.0), ("sampler", 3.0)],
            ),
            step(
                1,
                "both",
                Some(200.0),
                200.5,
                &[
                    ("client_proxy", 150.25),
                    ("server_proxy", 140.5),
                    ("backend", 20.0),
                    ("sampler", 3.0),
                ],
            ),
            step(
                2,
                "gateway",
                None,
                1233.5,
                &[("gateway", 900.0), ("backend", 50.0)],
            ),
            step(
                3,
                "ambient",
                Some(100.0),
                99.5,
                &[("ztunnel_client", 30.0), ("ztunnel_server", 31.0)],
            ),
            failed,
            control_plane,
        ];
        let csv = istio_csv(&steps);
        assert_eq!(
            csv.lines().next().unwrap(),
            "StartTime,ActualDuration,Labels,NumThreads,ActualQPS,p50,p90,p99,p999,\
             cpu_mili_avg_istio_proxy_fortioclient,cpu_mili_avg_istio_proxy_fortioserver,\
             cpu_mili_avg_istio_proxy_istio-ingressgateway,mem_Mi_avg_istio_proxy_fortioclient,\
             mem_Mi_avg_istio_proxy_fortioserver,mem_Mi_avg_istio_proxy_istio-ingressgateway,\
             RequestedQPS,min,max,p75,errorPercent,meshbench_actual_qps,meshbench_duration_secs,\
             cpu_mili_avg_client_proxy,cpu_mili_avg_ztunnel_client,cpu_mili_avg_gateway,\
             cpu_mili_avg_server_proxy,cpu_mili_avg_ztunnel_server,cpu_mili_avg_backend,\
             cpu_mili_avg_sampler,mem_Mi_avg_client_proxy,mem_Mi_avg_ztunnel_client,\
             mem_Mi_avg_gateway,mem_Mi_avg_server_proxy,mem_Mi_avg_ztunnel_server,\
             mem_Mi_avg_backend,mem_Mi_avg_sampler"
        );
        let rows = rows(&csv);
        assert_eq!(
            rows.len(),
            4,
            "a step without a result (failed, control plane) has no row"
        );
        let cell = |row: usize, col: &str| rows[row][col].as_str();
        // ActualQPS as fortio.py's int(round(x)): the nearest integer, ties to even.
        let actual: Vec<&str> = (0..4).map(|r| cell(r, "ActualQPS")).collect();
        assert_eq!(actual, ["200", "200", "1234", "100"]);
        let exact: Vec<&str> = (0..4).map(|r| cell(r, "meshbench_actual_qps")).collect();
        assert_eq!(exact, ["199.88", "200.5", "1233.5", "99.5"]);
        let requested: Vec<&str> = (0..4).map(|r| cell(r, "RequestedQPS")).collect();
        assert_eq!(requested, ["200", "200", "99999999", "100"]);
        assert_eq!(cell(0, "ActualDuration"), "2");
        assert_eq!(cell(0, "meshbench_duration_secs"), "2.000093");
        assert_eq!(cell(0, "NumThreads"), "4");
        assert_eq!(
            (
                cell(0, "p50"),
                cell(0, "p999"),
                cell(0, "min"),
                cell(0, "max")
            ),
            ("8", "120", "8", "120")
        );
        assert_eq!(cell(0, "Labels"), "t_qps_200_c_4_1024_default_baseline");
        // Roles under Istio's pod names, and under meshbench's.
        assert_eq!(cell(1, "cpu_mili_avg_istio_proxy_fortioclient"), "150.250");
        assert_eq!(cell(1, "cpu_mili_avg_istio_proxy_fortioserver"), "140.500");
        assert_eq!(cell(1, "mem_Mi_avg_istio_proxy_fortioserver"), "14.050");
        assert_eq!(cell(1, "cpu_mili_avg_client_proxy"), "150.250");
        assert_eq!(
            cell(2, "cpu_mili_avg_istio_proxy_istio-ingressgateway"),
            "900.000"
        );
        // No proxy: empty, not zero; ambient's tunnels only under their own names.
        for col in [
            "cpu_mili_avg_istio_proxy_fortioclient",
            "cpu_mili_avg_istio_proxy_fortioserver",
            "cpu_mili_avg_istio_proxy_istio-ingressgateway",
            "mem_Mi_avg_istio_proxy_fortioclient",
        ] {
            assert_eq!(cell(0, col), "", "baseline {col}");
            assert_eq!(cell(3, col), "", "ambient {col}");
        }
        assert_eq!(cell(3, "cpu_mili_avg_ztunnel_client"), "30.000");
        assert_eq!(cell(0, "errorPercent"), "0.0000");
    }
}
