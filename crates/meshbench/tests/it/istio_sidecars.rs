//! Issue 34: Istio's sidecars, for real (`proxy.type: istio`). Every test runs the real
//! programs: etcd and kube-apiserver (scripts/install-k8s.sh), istiod and pilot-agent
//! (scripts/install-istio.sh) with the project's Envoy, and Istio's own `istio-iptables`
//! writing the capture in each pod's network namespace. A missing installation fails the test
//! and names the script.
//!
//! - `meshbench experiment` over baseline, serveronly, clientonly and both: the load leaves
//!   from inside the client pod for the Service's address; every sidecar's own counters show
//!   every request; the control plane's line says each sidecar was configured and the probe
//!   went through; nothing of the run is left.
//! - Istio's mutual TLS as a PeerAuthentication sets it: PERMISSIVE and STRICT carry the
//!   sidecars' traffic in mutual TLS (the server sidecar's inbound listener counts the
//!   handshakes), DISABLE in plaintext; STRICT refuses a client without a sidecar.
//! - What upstream Envoy refuses of istiod's sidecar configuration with Istio's defaults, one
//!   setting at a time, as docs/istio.md lists it.
//! - A ServiceEntry changed every second under the load (issue 60, `changes: service_entry`):
//!   istiod pushes it and the client's sidecar holds each new host's cluster (read from its
//!   admin), every change served; the step is paired with the same step without changes, and
//!   every sidecar's own count agrees with the engine's.
//! - Ctrl-C (SIGINT to the whole process group) while a sidecar step runs: every namespace,
//!   rule, process and file of the run is gone.
//! - Bad input is refused before anything starts, and `--dry-run` names what is missing.

use crate::common;
use crate::lab::leftovers;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use meshbench_lab::cgroup::Limits;
use meshbench_lab::istio::sidecars::{self, LabPod};
use meshbench_lab::istio::{
    self, AgentPorts, AgentRole, ControlPlane, MeshOptions, Workload, ISTIOD_ENV,
};
use meshbench_lab::netns::Namespaces;
use meshbench_lab::process::{Placement, RoleProcess};
use meshbench_lab::program::envoy::{admin, ready};
use meshbench_lab::rig::{GatewaySpec, Rig, RigSpec};
use meshbench_lab::{LabError, Program, ProgramSpec};
use meshbench_results::{ChainRole, Class, PeerAuthentication, Stop, Topology};

const LIMIT: Duration = Duration::from_secs(300);

fn installed() {
    if let Some(e) = istio::unavailable() {
        panic!("{e}");
    }
    if let Some(what) = sidecars::iptables_missing() {
        panic!("Istio's capture needs {what}");
    }
}

fn experiment_file(dir: &std::path::Path, name: &str, yaml: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

const SIDECARS: &str = "name: sidecars
topologies: [baseline, serveronly, clientonly, both]
isolation: netns
duration_secs: 2
warmup_secs: 0.5
cooldown_secs: 0
sample_interval_ms: 250
load:
  rate_rps: [200]
  connections: [4]
proxy:
  type: istio
  mtls: true
  peer_authentication: [permissive, strict]
";

#[test]
fn istios_sidecars_carry_the_load_from_the_client_pod_through_the_capture_and_leave_nothing() {
    installed();
    let dir = scratch_dir("istio-sidecars");
    let file = experiment_file(&dir, "sidecars.yaml", SIDECARS);
    let store = dir.join("results.db").display().to_string();
    let mut child = spawn_meshbench(&["experiment", &file, "--store", &store]);
    let pid = child.id();
    let out = wait_with_limit(&mut child, LIMIT);
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    let both = format!("{text}{err}");
    assert!(
        both.contains("server_proxy configured")
            && both.contains("client_proxy configured")
            && both.contains("a probe through them answered 200"),
        "the control plane's line: {both}"
    );
    let doc = export_json(std::path::Path::new(&store));
    let steps = doc["steps"].as_array().unwrap();
    let variants: Vec<&str> = steps
        .iter()
        .map(|s| s["variant"].as_str().unwrap())
        .collect();
    assert_eq!(
        variants,
        [
            "baseline",
            "serveronly permissive",
            "clientonly permissive",
            "clientonly strict",
            "both permissive",
            "both strict"
        ]
    );
    for s in steps {
        let topology = s["topology"].as_str().unwrap();
        assert_eq!(s["status"], "ok", "{topology}: {}", s["error"]);
        let sent = u(s, "/summary/requests");
        assert!(sent >= 380, "{topology}: {}", s["summary"]);
        assert_eq!(s["summary"]["errors"], 0, "{topology}");
        let sidecars: Vec<&serde_json::Value> = s["usage"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["program"] == "istio" && r["role"] != "istiod")
            .collect();
        let want = match topology {
            "baseline" => 0,
            "both" => 2,
            _ => 1,
        };
        assert_eq!(sidecars.len(), want, "{topology}: {}", s["usage"]);
        // istiod, which configures the sidecars, is sampled beside them.
        if want > 0 {
            let istiod = common::usage_of(s, "istiod");
            assert!(u(istiod, "/samples") >= 2, "{topology}: {istiod}");
            assert!(istiod["rss_mib_avg"].as_f64().unwrap() > 20.0, "{istiod}");
        }
        for r in sidecars {
            // Envoy's own count over the step: every request the engine sent went through
            // this sidecar (the warm-up's too, so at least as many).
            let counted = u(r, "/proxy/requests/status_2xx");
            assert!(
                counted >= sent,
                "{topology}/{}: {counted} < {sent}",
                r["role"]
            );
            assert!(u(r, "/proxy/requests/total") == counted, "{topology}: {r}");
            assert!(r["cpu_millicores_avg"].as_f64().unwrap() > 0.0, "{r}");
            // The agent and its Envoy, as the istio-proxy container holds them.
            assert!(r["rss_mib_avg"].as_f64().unwrap() > 20.0, "{r}");
            // The pod's veth carried the step's traffic.
            assert!(r["rx_bytes_per_sec"].as_f64().unwrap() > 8_000.0, "{r}");
        }
    }
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
    let _ = std::fs::remove_dir_all(dir);
}

fn spec(topology: Topology, mtls: Option<PeerAuthentication>, name: &str) -> RigSpec {
    RigSpec {
        topology,
        proxy: ProgramSpec::from(Program::Istio),
        proxy_workers: 1,
        proxy_mtls: mtls.is_some(),
        proxy_peer_authentication: mtls.unwrap_or_default(),
        proxy_istio_telemetry: false,
        attribution: false,
        tunnel: ProgramSpec::from(Program::Envoy),
        tunnel_workers: 1,
        tunnel_mtls: false,
        gateway: GatewaySpec {
            program: Program::Envoy,
            domains: 1,
            paths: 1,
            workers: 1,
            changeable: false,
            haproxy_reload: Default::default(),
        },
        backend_exe: PathBuf::from(bin()),
        backend_replicas: 1,
        backend_args: vec!["--size".into(), "64".into()],
        proxy_limits: Limits::default(),
        tunnel_limits: Limits::default(),
        backend_limits: Limits::default(),
        control_plane_limits: Limits::default(),
        http2: false,
        grpc: false,
        http3: false,
        netns: true,
        id: format!("{}-istiotest-{name}", std::process::id()),
        dir: scratch_dir(&format!("istio-rig-{name}")),
    }
}

/// The server sidecar's TLS handshakes on its inbound listener (`virtualInbound`, :15006).
fn inbound_handshakes(rig: &Rig) -> u64 {
    let server = rig
        .roles
        .iter()
        .find(|r| r.name == ChainRole::ServerProxy)
        .expect("a server sidecar");
    let text = server
        .read_admin(|admin| admin::stats(admin, "ssl.handshake$"))
        .expect("an admin")
        .expect("its pod's namespace")
        .expect("its stats");
    text.lines()
        .filter(|l| l.starts_with("listener.0.0.0.0_15006.ssl.handshake:"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn mutual_tls_is_what_istios_peer_authentication_makes_of_it() {
    installed();
    for (mtls, name) in [
        (Some(PeerAuthentication::Permissive), "permissive"),
        (Some(PeerAuthentication::Strict), "strict"),
        (None, "disable"),
    ] {
        let rig = Rig::start(&spec(Topology::Both, mtls, name), &Stop::new())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let netns = rig.client_netns.clone().expect("the client pod");
        for _ in 0..5 {
            assert_eq!(sidecars::probe(&netns, LIMIT).unwrap(), 200, "{name}");
        }
        // Attribution off: istiod sends its sidecars no access log at all (issue 48).
        for r in rig.roles.iter().filter(|r| r.class == Class::Proxy) {
            let dump = crate::istio_attribution::listeners(r);
            assert!(
                !dump.contains("access_log"),
                "{name}/{}: an access log",
                r.name
            );
        }
        let handshakes = inbound_handshakes(&rig);
        match mtls {
            Some(_) => assert!(handshakes >= 1, "{name}: auto mutual TLS: {handshakes}"),
            None => assert_eq!(handshakes, 0, "{name}: plaintext"),
        }
    }
    // A client without a sidecar sends plaintext, which STRICT refuses: the rig's probe says so.
    let refused = Rig::start(
        &spec(
            Topology::Serveronly,
            Some(PeerAuthentication::Strict),
            "strict-plaintext",
        ),
        &Stop::new(),
    );
    let err = refused.err().expect("STRICT refuses plaintext").to_string();
    assert!(err.contains("probe request"), "{err}");
    let leftover: Vec<String> = leftovers(std::process::id())
        .into_iter()
        .filter(|l| l.contains("istiotest"))
        .collect();
    assert!(leftover.is_empty(), "{leftover:?}");
}

/// The server sidecar configured by an istiod with `env`, as far as its Envoy takes it:
/// accepted (Ok) or the first rejection, in Envoy's and the agent's words.
fn server_sidecar_with(env: &[(&str, &str)], name: &str) -> Result<Duration, LabError> {
    let dir = scratch_dir(&format!("istio-nack-{name}"));
    let owner = format!("{}-nack-{name}", std::process::id());
    let mut namespaces = Namespaces::new(&owner, &format!("mbk{}", &name[..2]));
    let (client_ns, server_ns) = (namespaces.add(0)?, namespaces.add(1)?);
    let control = ControlPlane::start_with(
        &dir.join("istio"),
        client_ns.host_addr,
        env,
        MeshOptions::default(),
        None,
        &Stop::new(),
    )?;
    let client = LabPod {
        app: "client",
        ip: client_ns.addr,
        sidecar: true,
    };
    let server = LabPod {
        app: sidecars::SERVICE,
        ip: server_ns.addr,
        sidecar: true,
    };
    sidecars::register(
        &control.api,
        &[&client, &server],
        &server,
        PeerAuthentication::Permissive,
    )?;
    let agent_dir = sidecars::pod_dir(&owner, server.app)?;
    let pod = server.name();
    let command = control.agent_command(
        AgentRole::Sidecar,
        &Workload {
            namespace: meshbench_k8s::names::DEFAULT_NAMESPACE,
            pod: &pod,
            service_account: server.app,
            ip: server.ip,
            labels: server.labels_json(),
        },
        &agent_dir,
        AgentPorts::ISTIO,
        1,
    )?;
    sidecars::hand_to_proxy_user(&agent_dir)?;
    sidecars::capture(&server_ns.netns, &dir.join("capture.log"))?;
    let place = Placement {
        netns: Some(server_ns.netns.clone()),
        user: Some(sidecars::PROXY_UID),
        ..Placement::default()
    };
    let mut agent = RoleProcess::spawn("server_proxy", command, &dir.join("agent.log"), &place)?;
    let expected = ready::SidecarExpected {
        listeners: vec!["virtualOutbound".into(), "virtualInbound".into()],
        clusters: vec![format!("inbound|{}||", meshbench_k8s::names::SERVICE_PORT)],
    };
    let acked = ready::wait_agent_acked(
        &mut agent,
        ([127, 0, 0, 1], AgentPorts::ISTIO.admin).into(),
        Some(&server_ns.netns),
        &ready::Awaited::Sidecar(expected),
        Duration::from_secs(60),
        &Stop::new(),
        istio::BY_ISTIOD,
    );
    drop(agent);
    drop(control);
    drop(namespaces);
    let _ = std::fs::remove_dir_all(agent_dir);
    let _ = std::fs::remove_dir_all(dir);
    acked
}

#[test]
fn upstream_envoy_refuses_what_docs_istio_md_says_of_istios_default_sidecar() {
    installed();
    let defaults = server_sidecar_with(&[], "defaults").expect_err("Istio's defaults");
    let text = defaults.to_string();
    assert!(
        text.contains("update_rejected") && text.contains("istio.metadata_exchange"),
        "{text}"
    );
    eprintln!("Istio's defaults: {text}");
    let exchange_off = server_sidecar_with(
        &[("PILOT_ENABLE_METADATA_EXCHANGE", "false")],
        "exchange-off",
    )
    .expect_err("metadata exchange off, ALPN filter on")
    .to_string();
    assert!(
        // Envoy says it as "listener '0.0.0.0_8080' config rejected" or "Error adding/updating
        // listener(s) 0.0.0.0_8080", whichever line the agent's log tail holds.
        exchange_off.contains("0.0.0.0_8080") && exchange_off.contains("istio.alpn"),
        "{exchange_off}"
    );
    let took = server_sidecar_with(ISTIOD_ENV, "lab").expect("the lab's istiod settings");
    assert!(took < Duration::from_secs(60));
}

#[test]
fn a_service_entry_changed_every_second_is_pushed_to_the_client_sidecar_under_load() {
    installed();
    let dir = scratch_dir("istio-sidecar-changes");
    let text = SIDECARS
        .replace(
            "[baseline, serveronly, clientonly, both]",
            "[baseline, both]",
        )
        .replace("[permissive, strict]", "permissive")
        .replace("duration_secs: 2", "duration_secs: 7")
        + "changes:\n  - kind: service_entry\n    every_secs: 1\n";
    let file = experiment_file(&dir, "changes.yaml", &text);
    let store = dir.join("results.db");
    let (steps, _) = crate::changes::run_into(&file, &store);
    let variants: Vec<&str> = (steps.iter())
        .map(|s| s["variant"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["baseline", "both", "both changes"]);
    let (with, still) = crate::changes::pair(&steps[1..]);
    let told_by = meshbench_lab::change::sidecars::TOLD_BY;
    assert_eq!(with["changes"]["told_by"], told_by, "{with}");
    assert_eq!(still["changes"]["told_by"], told_by, "{still}");
    let changes = with["changes"]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 6, "a change at 1 to 6 s: {with}");
    for (i, c) in changes.iter().enumerate() {
        let n = i + 1;
        assert_eq!(c["kind"], "service_entry", "{c}");
        assert!(c["failed"].is_null(), "{c}");
        let host = format!("entry-{n}.changes.meshbench.example");
        assert!(c["what"].as_str().unwrap().contains(&host), "{c}");
        // Read from the client sidecar's admin: no request through the path.
        assert_eq!(c["probes"], 0, "{c}");
        let served = c["served_ms"].as_f64();
        assert!(
            served.is_some_and(|ms| ms > 0.0 && ms < 1000.0),
            "served within the second: {c}"
        );
        assert!(c["requests"].as_u64().unwrap() > 0, "{c}");
        assert!(
            c["gateway_cpu_peak_millicores"].as_f64().is_some(),
            "the client sidecar's peak: {c}"
        );
    }
    assert_eq!(still["summary"]["errors"], 0, "{still}");
    let shown = crate::changes::show(&store);
    assert!(
        shown.contains("service_entry") && shown.contains("entry-6.changes.meshbench.example"),
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn ctrl_c_in_a_sidecar_step_leaves_no_namespace_rule_process_or_file() {
    installed();
    let dir = scratch_dir("istio-ctrl-c");
    let file = experiment_file(
        &dir,
        "long.yaml",
        &SIDECARS
            .replace("[baseline, serveronly, clientonly, both]", "[both]")
            .replace("[permissive, strict]", "permissive")
            .replace("duration_secs: 2", "duration_secs: 60"),
    );
    let store = dir.join("results.db").display().to_string();
    let mut child = spawn_meshbench_in_own_group(&["experiment", &file, "--store", &store]);
    let pid = child.id();
    // Halfway: both sidecars' Envoys up (in their pods' directories) and the load on.
    let began = Instant::now();
    loop {
        let envoys = leftovers(pid)
            .iter()
            .filter(|l| l.starts_with("process") && l.contains("envoy -c"))
            .count();
        if envoys >= 2 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(120), "no sidecars");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(!leftovers(pid).is_empty(), "the step runs");
    interrupt_group(&child);
    let out = wait_with_limit(&mut child, LIMIT);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn istio_sidecars_outside_pods_or_their_topologies_are_refused_up_front() {
    let dir = scratch_dir("istio-sidecars-refused");
    let refused = |name: &str, yaml: &str, says: &str| {
        let file = experiment_file(&dir, name, yaml);
        let out = meshbench(&["experiment", &file, "--dry-run"], LIMIT);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{name}: {}", stderr(&out));
    };
    refused(
        "loopback.yaml",
        "name: x\ntopologies: [both]\nproxy:\n  type: istio\n",
        "add isolation: netns",
    );
    refused(
        "ambient.yaml",
        "name: x\ntopologies: [both, waypoint]\nisolation: netns\nproxy:\n  type: istio\n",
        "not waypoint",
    );
    refused(
        "strict.yaml",
        "name: x\ntopologies: [serveronly]\nisolation: netns\nproxy:\n  type: istio\n  mtls: true\n  peer_authentication: strict\n",
        "strict refuses plaintext",
    );
    refused(
        "envoy.yaml",
        "name: x\ntopologies: [both]\nproxy:\n  type: envoy\n  peer_authentication: strict\n",
        "only for type istio",
    );
    // The example lists both PeerAuthentications: each sidecar topology is one variant per
    // value, serveronly under permissive only.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/istio-sidecars.yaml"
    );
    let out = meshbench(&["experiment", example, "--dry-run"], LIMIT);
    let plan = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{plan}");
    assert!(
        plan.contains("both permissive")
            && plan.contains("both strict")
            && plan.contains("serveronly permissive")
            && !plan.contains("serveronly strict"),
        "{plan}"
    );
    // A missing installation is named before anything starts, with the script.
    let file = experiment_file(
        &dir,
        "ok.yaml",
        "name: x\ntopologies: [both]\nisolation: netns\nproxy:\n  type: istio\n",
    );
    let mut child = std::process::Command::new(bin())
        .args(["experiment", &file, "--dry-run"])
        .env("ISTIO_CACHE", "/nonexistent/istio")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_with_limit(&mut child, LIMIT);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("/nonexistent/istio/bin/pilot-discovery and 3 more")
            && err.contains("install-istio.sh"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
