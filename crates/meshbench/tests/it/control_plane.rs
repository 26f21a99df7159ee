//! Issue 38: what the control plane costs. Every test runs the real programs: etcd and
//! kube-apiserver (scripts/install-k8s.sh), istiod and pilot-agent (scripts/install-istio.sh)
//! with the project's Envoy as the one real proxy; the other proxies are meshbench's simulated
//! xDS clients. A missing installation fails the test and names the script.
//!
//! - `meshbench experiment` with topology `control_plane`, sidecars: every endpoint and
//!   configuration change reaches every proxy (clusters, endpoints, listeners), the simulated
//!   twin of the real Envoy holds what the real one accepted, istiod's CPU and memory are
//!   stored as role `istiod`, and nothing of the run is left.
//! - Gateways, through the lab: the same for clusters and endpoints (a gateway has no
//!   listener without a Gateway object), and everything the step started listens on loopback
//!   or on the veth of the namespace it made, and is gone after it.

use crate::common;
use crate::lab::leftovers;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use meshbench_lab::control_plane_cost::{CostSpec, CostStep};
use meshbench_lab::istio::{self, sidecars};
use meshbench_results::{MeshScale, ProxyKind, Stop, XdsType};

const LIMIT: Duration = Duration::from_secs(400);

fn installed() {
    if let Some(e) = istio::unavailable() {
        panic!("{e}");
    }
    if let Some(what) = sidecars::iptables_missing() {
        panic!("the real sidecar needs {what}");
    }
}

const SIDECARS: &str = "name: istiod-cost
topologies: [control_plane]
duration_secs: 4
warmup_secs: 1
cooldown_secs: 0
sample_interval_ms: 250
control_plane:
  proxies: [20]
  services: [8]
  istio_objects: [4]
  endpoint_churn_per_s: [3]
  config_churn_per_s: [1]
  settle_secs: 30
";

#[test]
fn every_change_reaches_every_simulated_sidecar_and_the_twin_holds_what_envoy_accepted() {
    installed();
    let dir = scratch_dir("control-plane");
    let file = dir.join("cp.yaml");
    std::fs::write(&file, SIDECARS).unwrap();
    let store = dir.join("results.db").display().to_string();
    let mut child =
        spawn_meshbench(&["experiment", &file.display().to_string(), "--store", &store]);
    let pid = child.id();
    let out = wait_with_limit(&mut child, LIMIT);
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}{err}");
    let both = format!("{text}{err}");
    assert!(
        both.contains("20 simulated proxies held a full configuration")
            && both.contains("holds what it accepted"),
        "the control plane's lines: {both}"
    );
    let doc = export_json(std::path::Path::new(&store));
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    let s = &steps[0];
    assert_eq!(s["status"], "ok", "{}", s["error"]);
    assert_eq!(s["topology"], "control_plane");
    assert_eq!(s["params"]["mesh"]["proxies"], 20, "{}", s["params"]);
    let f = &s["control_plane"];
    // The twin of the real Envoy and the twenty others, all still connected.
    assert_eq!(f["connected"], 21, "{f}");
    assert!(
        f["agreement"]["differences"].as_array().unwrap().is_empty(),
        "{f}"
    );
    for t in ["cds", "eds", "lds", "rds"] {
        assert!(
            u(f, &format!("/agreement/resources/{t}")) > 0,
            "the real Envoy holds some {t}: {f}"
        );
    }
    assert_eq!(
        f["services"], 9,
        "eight Services and the churned ServiceEntry: {f}"
    );
    assert_eq!(
        f["endpoints"], 21,
        "each pod is its service's endpoint: {f}"
    );
    assert_eq!(
        (
            f["virtual_services"].clone(),
            f["destination_rules"].clone()
        ),
        (2.into(), 2.into())
    );
    let propagation = f["propagation"].as_array().unwrap();
    for xds in XdsType::ALL {
        let p = propagation
            .iter()
            .find(|p| p["xds"] == xds.name())
            .unwrap_or_else(|| panic!("no {xds} propagation: {f}"));
        let changes = u(p, "/changes");
        // 3/s and 1/s over 4 s.
        let want = if xds == XdsType::Eds { 12 } else { 4 };
        assert_eq!(changes, want, "{xds}: {p}");
        assert_eq!(u(p, "/expected"), changes * 21, "{xds}: {p}");
        assert_eq!(
            u(p, "/acked"),
            u(p, "/expected"),
            "{xds}: every pair arrived: {p}"
        );
        let p50 = p["p50_ms"].as_f64().unwrap();
        let p99 = p["p99_ms"].as_f64().unwrap();
        // istiod debounces a change 100 ms before it pushes it.
        assert!(p50 >= 50.0 && p50 <= p99 && p99 < 10_000.0, "{xds}: {p}");
        assert!(
            p["to_90_percent_ms"].as_f64().unwrap() >= p50 * 0.5,
            "{xds}: {p}"
        );
    }
    assert!(u(f, "/xds_bytes") > 10_000, "{f}");
    assert!(
        f["pushes"]
            .as_object()
            .unwrap()
            .values()
            .any(|n| n.as_u64() > Some(0)),
        "{f}"
    );
    assert!(f["clients_cpu_millicores"].as_f64().unwrap() > 0.0, "{f}");
    let istiod = common::usage_of(s, "istiod");
    assert!(
        istiod["cpu_millicores_avg"].as_f64().unwrap() > 1.0,
        "{istiod}"
    );
    assert!(istiod["rss_mib_avg"].as_f64().unwrap() > 30.0, "{istiod}");
    // The HTML report of a control-plane experiment: its table, no chart.
    let out_dir = dir.join("report").display().to_string();
    let out = meshbench(
        &["report", "latest", "--store", &store, "--out", &out_dir],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(dir.join("report/report.html")).unwrap();
    assert!(
        html.contains("<h2>The control plane</h2>") && html.contains(">agrees</td>"),
        "{html}"
    );
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
    let _ = std::fs::remove_dir_all(dir);
}

/// Every TCP socket listening in this network namespace: (address, port).
fn listening() -> BTreeSet<(String, u16)> {
    let mut out = BTreeSet::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 4 || f[3] != "0A" {
                continue;
            }
            let (addr, port) = f[1].split_once(':').unwrap();
            let port = u16::from_str_radix(port, 16).unwrap();
            let addr = if addr.len() == 8 {
                let n = u32::from_str_radix(addr, 16).unwrap();
                std::net::Ipv4Addr::from(n.swap_bytes()).to_string()
            } else {
                addr.to_string()
            };
            out.insert((addr, port));
        }
    }
    out
}

#[test]
fn simulated_gateways_get_every_cluster_change_and_the_step_binds_loopback_only() {
    installed();
    let before = listening();
    let scale = MeshScale {
        kind: ProxyKind::Gateway,
        proxies: 10,
        services: 5,
        istio_objects: 0,
        endpoint_churn_per_s: 2.0,
        config_churn_per_s: 0.0,
    };
    let owner = format!("{}-cptest-gw", std::process::id());
    let spec = CostSpec {
        scale,
        dir: std::env::temp_dir().join(format!("meshbench-{owner}")),
        owner,
        warmup: Duration::from_millis(500),
        duration: Duration::from_secs(3),
        settle: Duration::from_secs(30),
        sample_every: Duration::from_millis(250),
    };
    let mut lines = Vec::new();
    let mut step = CostStep::start(spec, &Stop::new(), &mut |l| lines.push(l.to_string())).unwrap();
    let during = listening();
    let new: Vec<_> = during.difference(&before).collect();
    assert!(!new.is_empty(), "istiod and the API server listen");
    // Loopback, or the host end of the veth to the real Envoy's namespace (istiod's port
    // for its agent).
    for (addr, port) in &new {
        assert!(
            addr == "127.0.0.1" || addr.starts_with("10.213."),
            "{addr}:{port} is outside loopback and the step's veth: {new:?}"
        );
    }
    assert!(step.agreement().agrees(), "{:?}", step.agreement());
    let run = step.measure(&meshbench_results::Stop::new()).unwrap();
    drop(step);
    let f = &run.figures;
    assert_eq!(f.connected, 11);
    assert!(
        f.propagation(XdsType::Lds).is_none(),
        "a gateway has no listener to change"
    );
    let eds = f.propagation(XdsType::Eds).unwrap();
    assert_eq!(
        (eds.changes, eds.expected, eds.acked),
        (6, 66, 66),
        "{eds:?}"
    );
    let cds = f.propagation(XdsType::Cds).unwrap();
    assert_eq!(
        (cds.changes, cds.acked),
        (1, 11),
        "one change mid-window: {cds:?}"
    );
    assert!(run.istiod.cpu_millicores_avg > 0.0);
    let after = listening();
    let left: Vec<_> = after.difference(&before).collect();
    assert!(
        left.is_empty(),
        "still listening after the step: {left:?} ({lines:?})"
    );
}
