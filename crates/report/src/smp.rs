//! A stored experiment as Service Mesh Performance (SMP) documents, the CNCF format Meshery
//! reads: per step a `PerformanceTestConfig` (the load asked), a `PerformanceTestResult`
//! (latencies in ms: min, average, p50, p90, p99, max; actual QPS; times), an
//! `EnvironmentConfig` whose individual workloads are the step's roles (CPU in millicores,
//! memory in MB) and a `ServiceMeshConfig` with the sidecars and the ingress gateway summed.
//! Written in the protobuf JSON mapping of SMP's messages (lowerCamelCase names, int64 as
//! strings, RFC 3339 times).
//!
//! A `control_plane` step sends no load: its config has no client, its result only its id,
//! labels and start (no latency or QPS rather than zeros), its workload is istiod, and its mesh
//! config fills `meshControlPlane`: istiod's CPU and memory, the endpoints, services, proxies,
//! VirtualServices and DestinationRules it served, and `ldsLatencyMs` / `cdsLatencyMs`, SMP's
//! time for a listener / cluster change to reach 90 % of the proxies (the median over the
//! step's changes of each one's 90th-percent ACK; absent when no change reached 90 %).
//!
//! Lossy where SMP has no field: p99.9 and beyond, error counts and status codes, service time,
//! schedule lag, the histogram itself, network bytes; for the control plane, EDS propagation,
//! the percentiles of every pair, pushes, xDS bytes, convergence and agreement. The step's
//! label, p99.9 and error count (a control-plane step's mesh) are kept as `meshbench.*` labels
//! for people reading the document; no SMP reader interprets them.

use std::time::Duration;

use meshbench_results::{ChainRole, ControlPlaneFigures, Protocol, Role, RunResult, XdsType};
use meshbench_store::{ExperimentRow, StepRecord, StoredStep};
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
            | ChainRole::Backend
            | ChainRole::BackendReplica(_) => None,
        },
        Role::Sampler | Role::External(_) | Role::Istiod | Role::Contour => None,
    }
}

/// Whether a role is a workload of the environment: every one but meshbench's own sampler.
fn is_workload(role: &Role) -> bool {
    match role {
        Role::Chain(_) | Role::External(_) | Role::Istiod | Role::Contour => true,
        Role::Sampler => false,
    }
}

/// Every step with a result, and every `control_plane` step with its figures, as one SMP
/// document each (a JSON array).
pub fn smp(e: &ExperimentRow, steps: &[StoredStep]) -> Value {
    Value::Array(steps.iter().filter_map(|s| step(e, s)).collect())
}

fn step(e: &ExperimentRow, stored: &StoredStep) -> Option<Value> {
    let s = &stored.step;
    match (&s.result, &s.control_plane) {
        (Some(r), _) => Some(load_step(e, stored, r)),
        (None, Some(f)) => Some(control_plane_step(e, stored, f)),
        (None, None) => None,
    }
}

/// The document's id: the experiment's and the step's.
fn doc_id(e: &ExperimentRow, stored: &StoredStep) -> String {
    format!("{}-{}", e.id, stored.id)
}

/// The experiment's labels and meshbench's own that say which step this is.
fn step_labels(e: &ExperimentRow, s: &StepRecord) -> Map<String, Value> {
    let mut labels: Map<String, Value> = e
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    labels.insert("meshbench.experiment".into(), json!(e.name));
    labels.insert("meshbench.step".into(), json!(s.seq.to_string()));
    labels.insert("meshbench.variant".into(), json!(s.variant));
    labels.insert("meshbench.label".into(), json!(s.label));
    labels
}

/// Every role but meshbench's sampler, as SMP's individual workloads.
fn environment(id: &str, s: &StepRecord) -> Value {
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
    json!({
        "smpVersion": SMP_VERSION,
        "id": format!("{id}-env"),
        "individualWorkloads": workloads,
    })
}

/// The mesh config's head: its id and the step's topology.
fn mesh_head(id: &str, s: &StepRecord) -> Value {
    json!({
        "smpVersion": SMP_VERSION,
        "id": format!("{id}-mesh"),
        "labels": {"meshbench.topology": meshbench_store::topology_name::text(s.kind)},
    })
}

fn load_step(e: &ExperimentRow, stored: &StoredStep, r: &RunResult) -> Value {
    let s = &stored.step;
    let id = doc_id(e, stored);
    let ms = |us: u64| us as f64 / 1000.0;
    let l = &r.latency_us;
    let mut labels = step_labels(e, s);
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
    let mut mesh = mesh_head(&id, s);
    if let Some(sidecar) = component(MeshPart::Sidecar) {
        mesh["sidecar"] = sidecar;
    }
    if let Some(ingress) = component(MeshPart::IngressGateway) {
        mesh["ingressGateway"] = ingress;
    }
    json!({
        "performanceTestConfig": config,
        "performanceTestResult": result,
        "environmentConfig": environment(&id, s),
        "serviceMeshConfig": mesh,
    })
}

/// A `control_plane` step: what SMP has a field for, and nothing it would read as a load.
fn control_plane_step(e: &ExperimentRow, stored: &StoredStep, f: &ControlPlaneFigures) -> Value {
    let s = &stored.step;
    let id = doc_id(e, stored);
    let mesh_text = s.params.mesh.map(|m| m.to_string());
    let mut config = json!({
        "smpVersion": SMP_VERSION,
        "id": id,
        "name": e.name,
        "labels": {"meshbench.variant": s.variant},
    });
    if let Some(text) = &mesh_text {
        config["labels"]["meshbench.mesh"] = json!(text);
    }
    // The window every step of the experiment measures over, as it was run.
    if let Some(secs) = e.config["duration_secs"].as_f64().filter(|d| *d > 0.0) {
        config["duration"] = json!(format!("{secs}s"));
    }
    let mut labels = step_labels(e, s);
    if let Some(text) = mesh_text {
        labels.insert("meshbench.mesh".into(), json!(text));
    }
    let mut result = json!({
        "smpVersion": SMP_VERSION,
        "id": id,
        "labels": labels,
        "testId": id,
        "meshConfigId": format!("{id}-mesh"),
        "envId": format!("{id}-env"),
    });
    if humantime::parse_rfc3339(&s.started_at).is_ok() {
        result["startTime"] = json!(s.started_at);
    }
    // SMP's int32 counts, saturated rather than wrapped.
    let int32 = |n: u64| n.min(i32::MAX as u64) as i32;
    let mut control = json!({
        "count": 1,
        "endpoints": int32(f.endpoints.into()),
        "services": int32(f.services.into()),
        "sidecars": int32(u64::from(f.connected) + u64::from(f.real_proxies)),
        "virtualServices": int32(f.virtual_services.into()),
        "destinationRules": int32(f.destination_rules.into()),
    });
    if let Some(istiod) = s.usage.iter().find(|u| u.role == Role::Istiod) {
        if let Some(cpu) = istiod.cpu_millicores() {
            control["cpuMCores"] = json!(cpu.round() as i32);
        }
        if let Some(mib) = istiod.memory_mib() {
            control["memMb"] = json!(mib_to_mb(mib));
        }
    }
    for (xds, key) in [
        (XdsType::Lds, "ldsLatencyMs"),
        (XdsType::Cds, "cdsLatencyMs"),
    ] {
        if let Some(ms) = f.propagation(xds).and_then(|p| p.to_90_percent_ms) {
            control[key] = json!(ms.round().min(i32::MAX as f64) as i32);
        }
    }
    let mut mesh = mesh_head(&id, s);
    mesh["meshControlPlane"] = control;
    json!({
        "performanceTestConfig": config,
        "performanceTestResult": result,
        "environmentConfig": environment(&id, s),
        "serviceMeshConfig": mesh,
    })
}

/// MiB as SMP's (decimal) megabytes, rounded.
fn mib_to_mb(mib: f64) -> i32 {
    (mib * 1.048_576).round() as i32
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use meshbench_results::{ChainRole, Figure, Protocol, StepFailure, StepParams};
    use meshbench_store::{ExperimentStatus, StepRecord};

    use super::*;
    use crate::control_plane::fixture;

    /// A stored experiment's row, for this crate's tests of exports.
    pub fn experiment() -> ExperimentRow {
        ExperimentRow {
            id: 7,
            name: "istiod-scale".into(),
            description: String::new(),
            labels: BTreeMap::from([("study".to_string(), "cp".to_string())]),
            config: json!({"duration_secs": 30.0, "warmup_secs": 5.0}),
            started_at: "2026-11-28T00:00:00Z".into(),
            finished_at: None,
            status: ExperimentStatus::Done,
            meshbench_version: "0.1.0".into(),
            steps: 3,
            failed_steps: 1,
            partial_steps: 0,
            first_failed_step: Some(3),
        }
    }

    fn stored(id: i64, step: StepRecord) -> StoredStep {
        StoredStep { id, step }
    }

    #[test]
    fn a_control_plane_step_fills_the_mesh_control_plane_and_no_load_figure() {
        let mut load = StepRecord::new(1, StepParams::open(100.0, 4, Protocol::Http1));
        load.set_result(meshbench_results::fixtures::run_result());
        load.usage = fixture::step(0).usage;
        load.usage[0].role = Role::Chain(ChainRole::ServerProxy);
        let mut failed = fixture::step(2);
        failed.control_plane = None;
        failed.fail(StepFailure::RigDidNotStart("istiod exited".into()));
        let steps = [
            stored(11, fixture::step(0)),
            stored(12, load),
            stored(13, failed),
        ];
        let docs = smp(&experiment(), &steps);
        let docs = docs.as_array().unwrap();
        assert_eq!(
            docs.len(),
            2,
            "a step with neither a result nor figures has none"
        );
        let doc = &docs[0];

        // The config: no client, the window the experiment measures over.
        let config = &doc["performanceTestConfig"];
        assert_eq!(config["id"], "7-11");
        assert!(config.get("clients").is_none(), "{config}");
        assert_eq!(config["duration"], "30s");
        assert_eq!(
            config["labels"]["meshbench.mesh"],
            "200 sidecars x 100 services, 20 objects, churn 1+0.2/s"
        );

        // The result: who and when, and no latency or QPS standing for a load never sent.
        let result = &doc["performanceTestResult"];
        assert_eq!(
            (
                &result["id"],
                &result["testId"],
                &result["meshConfigId"],
                &result["envId"]
            ),
            (
                &json!("7-11"),
                &json!("7-11"),
                &json!("7-11-mesh"),
                &json!("7-11-env")
            )
        );
        assert_eq!(result["startTime"], "2026-11-28T00:00:00Z");
        assert_eq!(result["labels"]["study"], "cp");
        assert_eq!(result["labels"]["meshbench.step"], "0");
        for absent in ["latenciesMs", "actualQPS", "endTime"] {
            assert!(result.get(absent).is_none(), "{absent}: {result}");
        }

        // istiod is the workload; the sampler is not.
        let workloads = doc["environmentConfig"]["individualWorkloads"]
            .as_array()
            .unwrap();
        assert_eq!(workloads.len(), 1, "{workloads:?}");
        assert_eq!(
            workloads[0],
            json!({"name": "istiod", "count": 1, "cpuMCores": 412, "memMb": 189})
        );

        // SMP's control plane, every field from what the step measured.
        let mesh = &doc["serviceMeshConfig"];
        assert_eq!(mesh["id"], "7-11-mesh");
        assert_eq!(mesh["labels"]["meshbench.topology"], "control_plane");
        assert!(mesh.get("sidecar").is_none() && mesh.get("ingressGateway").is_none());
        assert_eq!(
            mesh["meshControlPlane"],
            json!({
                "count": 1,
                "cpuMCores": 412,
                "memMb": 189,
                "endpoints": 300,
                "services": 101,
                "sidecars": 201,
                "virtualServices": 10,
                "destinationRules": 10,
                "ldsLatencyMs": 120,
                "cdsLatencyMs": 96,
            })
        );

        // The load step's document is as it was.
        let load = &docs[1];
        assert!(load["performanceTestResult"]["latenciesMs"]["p99"].is_number());
        assert_eq!(
            load["performanceTestConfig"]["clients"][0]["loadGenerator"],
            "meshbench"
        );
        assert!(load["serviceMeshConfig"].get("meshControlPlane").is_none());
        assert!(load["serviceMeshConfig"]["sidecar"].is_object());
    }

    #[test]
    fn what_a_control_plane_step_did_not_measure_is_left_out() {
        let mut s = fixture::step(0);
        let f = s.control_plane.as_mut().unwrap();
        // No listener change reached 90 % of the proxies; no cluster change was measured.
        f.propagation.retain(|p| p.xds != XdsType::Cds);
        for p in &mut f.propagation {
            p.to_90_percent_ms = None;
        }
        s.usage[0]
            .missing
            .insert(Figure::Cpu, "no series".to_string());
        let mut e = experiment();
        e.config = json!({});
        let mut stored = stored(11, s);
        stored.step.started_at = String::new();
        let docs = smp(&e, &[stored]);
        let doc = &docs[0];
        let control = &doc["serviceMeshConfig"]["meshControlPlane"];
        for absent in ["ldsLatencyMs", "cdsLatencyMs", "cpuMCores"] {
            assert!(control.get(absent).is_none(), "{absent}: {control}");
        }
        assert_eq!(control["memMb"], 189);
        assert!(doc["performanceTestConfig"].get("duration").is_none());
        assert!(doc["performanceTestResult"].get("startTime").is_none());
    }
}
