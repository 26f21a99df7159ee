//! A stored experiment as Service Mesh Performance (SMP) documents, the CNCF format Meshery
//! reads: per step a `PerformanceTestConfig` (the load asked), a `PerformanceTestResult`
//! (latencies in ms: min, average, p50, p90, p99, max; actual QPS; times), an
//! `EnvironmentConfig` whose individual workloads are the step's roles (CPU in millicores,
//! memory in MB) and a `ServiceMeshConfig` with the sidecars and the ingress gateway summed.
//! Written in the protobuf JSON mapping of SMP's messages (lowerCamelCase names, int64 as
//! strings, RFC 3339 times).
//!
//! Lossy where SMP has no field: p99.9 and beyond, error counts and status codes, service time,
//! schedule lag, the histogram itself, network bytes. The step's label, p99.9 and error count
//! are kept as `meshbench.*` labels for people reading the document; no SMP reader interprets
//! them.

use std::time::Duration;

use meshbench_results::{ChainRole, Protocol, Role};
use meshbench_store::{ExperimentRow, StoredStep};
use serde_json::{json, Map, Value};

/// The SMP version these documents follow.
pub const SMP_VERSION: &str = "v0.0.1";

/// The parts of SMP's mesh config a role is summed into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MeshPart {
    Sidecar,
    IngressGateway,
}

/// The sidecars in SMP's sense and the ingress gateway; SMP has no part for ambient's tunnels
/// and waypoint, the backend, meshbench's sampler or a role it has no word for.
fn mesh_part(role: &Role) -> Option<MeshPart> {
    match role {
        Role::Chain(r) => match r {
            ChainRole::ClientProxy | ChainRole::ServerProxy => Some(MeshPart::Sidecar),
            ChainRole::Gateway => Some(MeshPart::IngressGateway),
            ChainRole::Waypoint
            | ChainRole::ZtunnelClient
            | ChainRole::ZtunnelServer
            | ChainRole::Backend => None,
        },
        Role::Sampler | Role::External(_) | Role::Istiod => None,
    }
}

/// Whether a role is a workload of the environment: every one but meshbench's own sampler.
fn is_workload(role: &Role) -> bool {
    match role {
        Role::Chain(_) | Role::External(_) | Role::Istiod => true,
        Role::Sampler => false,
    }
}

/// Every step with a result, as one SMP document each (a JSON array).
pub fn smp(e: &ExperimentRow, steps: &[StoredStep]) -> Value {
    Value::Array(steps.iter().filter_map(|s| step(e, s)).collect())
}

fn step(e: &ExperimentRow, stored: &StoredStep) -> Option<Value> {
    let s = &stored.step;
    let r = s.result.as_ref()?;
    let id = format!("{}-{}", e.id, stored.id);
    let ms = |us: u64| us as f64 / 1000.0;
    let l = &r.latency_us;
    let mut labels: Map<String, Value> = e
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    labels.insert("meshbench.experiment".into(), json!(e.name));
    labels.insert("meshbench.step".into(), json!(s.seq.to_string()));
    labels.insert("meshbench.variant".into(), json!(s.variant));
    labels.insert("meshbench.label".into(), json!(s.label));
    labels.insert("meshbench.p999_ms".into(), json!(ms(l.p99_9).to_string()));
    labels.insert(
        "meshbench.errors".into(),
        json!(r.requests.errors.to_string()),
    );
    let end_time = humantime::parse_rfc3339(&r.start_time).ok().map(|t| {
        humantime::format_rfc3339_millis(t + Duration::from_secs_f64(r.duration_secs)).to_string()
    });
    let mut result = json!({
        "smpVersion": SMP_VERSION,
        "id": id,
        "labels": labels,
        "startTime": r.start_time,
        "latenciesMs": {
            "min": ms(l.min),
            "average": l.mean / 1000.0,
            "p50": ms(l.p50),
            "p90": ms(l.p90),
            "p99": ms(l.p99),
            "max": ms(l.max),
        },
        "actualQPS": r.throughput_rps,
        "testId": id,
        "meshConfigId": format!("{id}-mesh"),
        "envId": format!("{id}-env"),
    });
    if let Some(end) = end_time {
        result["endTime"] = json!(end);
    }
    // SMP's client protocols: gRPC is its own; HTTP/1.1, HTTP/2 and HTTP/3 are all http.
    let protocol = match r.settings.protocol {
        Protocol::Grpc => "grpc",
        Protocol::Http1 | Protocol::Http2 | Protocol::Http3 => "http",
    };
    let mut client = json!({
        "internal": true,
        "loadGenerator": "meshbench",
        "protocol": protocol,
        "connections": r.settings.connections,
        "endpointUrl": [r.url],
    });
    if let Some(rate) = r.settings.rate_rps {
        // int64 is a string in the protobuf JSON mapping.
        client["rps"] = json!((rate.round() as i64).to_string());
    }
    let config = json!({
        "smpVersion": SMP_VERSION,
        "id": id,
        "name": e.name,
        "labels": {"meshbench.variant": s.variant},
        "clients": [client],
        "duration": format!("{}s", r.duration_secs),
    });
    let workloads: Vec<Value> = s
        .usage
        .iter()
        .filter(|u| is_workload(&u.role))
        .map(|u| {
            json!({
                "name": u.role,
                "count": 1,
                "cpuMCores": u.usage.cpu_millicores_avg.round() as i32,
                "memMb": mib_to_mb(u.memory_mib_avg()),
            })
        })
        .collect();
    let environment = json!({
        "smpVersion": SMP_VERSION,
        "id": format!("{id}-env"),
        "individualWorkloads": workloads,
    });
    let component = |part: MeshPart| -> Option<Value> {
        let used: Vec<_> = s
            .usage
            .iter()
            .filter(|u| mesh_part(&u.role) == Some(part))
            .collect();
        if used.is_empty() {
            return None;
        }
        Some(json!({
            "count": used.len(),
            "cpuMCores": used.iter().map(|u| u.usage.cpu_millicores_avg).sum::<f64>().round() as i32,
            "memMb": mib_to_mb(used.iter().map(|u| u.memory_mib_avg()).sum()),
            "rps": r.throughput_rps.round() as i32,
            "bps": used.iter().map(|u| u.usage.rx_bytes_per_sec + u.usage.tx_bytes_per_sec).sum::<f64>().round().min(i32::MAX as f64) as i32,
        }))
    };
    let mut mesh = json!({
        "smpVersion": SMP_VERSION,
        "id": format!("{id}-mesh"),
        "labels": {"meshbench.topology": meshbench_store::topology_name::text(s.topology)},
    });
    if let Some(sidecar) = component(MeshPart::Sidecar) {
        mesh["sidecar"] = sidecar;
    }
    if let Some(ingress) = component(MeshPart::IngressGateway) {
        mesh["ingressGateway"] = ingress;
    }
    Some(json!({
        "performanceTestConfig": config,
        "performanceTestResult": result,
        "environmentConfig": environment,
        "serviceMeshConfig": mesh,
    }))
}

/// MiB as SMP's (decimal) megabytes, rounded.
fn mib_to_mb(mib: f64) -> i32 {
    (mib * 1.048_576).round() as i32
}
