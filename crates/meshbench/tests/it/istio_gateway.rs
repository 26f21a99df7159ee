//! Issue 28: Istio's own control plane configures the gateway, and the upstream Envoy carries
//! traffic on what it sends.
//!
//! Both tests run the real programs: etcd and a kube-apiserver (scripts/install-k8s.sh) with
//! Istio's CRDs, istiod (`pilot-discovery`) and Istio's ingress gateway (`pilot-agent proxy
//! router`) running the project's Envoy, both from istio.io/istio (scripts/install-istio.sh).
//! `meshbench_lab::istio` starts them, as `gateway.type: istio` does; a missing binary fails the
//! test and names the script.
//!
//! - What `meshbench gen gateway --for istio` writes for a cluster (Secrets, a ServiceEntry,
//!   Gateways on Istio's port 443, VirtualServices), applied while the gateway runs: Envoy ACKs
//!   all of it (no `update_rejected`), and every route answers 200 through `0.0.0.0_443`.
//! - `meshbench experiment` with `gateway.type: istio`: the step is measured through the Istio
//!   gateway with no error, its CPU and memory are the role's (agent and Envoy), the control
//!   plane's line says what istiod's pushes cost, and the backend's two replicas
//!   (`backend.replicas`) behind the ServiceEntry's endpoints each answer their share.
//! - Bad input: an Istio gateway with its roles in network namespaces is refused before anything
//!   starts; a missing installation is named by `--dry-run` (Istio's sidecars: istio_sidecars.rs).

use crate::common;

use std::time::{Duration, Instant};

use common::{meshbench, run_json, stderr, u, BackendProc};
use meshbench_lab::istio::{self, ControlPlane, MeshOptions};
use meshbench_lab::process::{Placement, RoleProcess};
use meshbench_lab::program::envoy::ready;

const DOMAINS: usize = 10;
const PATHS: usize = 10;
const LIMIT: Duration = Duration::from_secs(120);

fn installed() {
    if let Some(e) = istio::unavailable() {
        panic!("{e}");
    }
}

#[test]
fn istiod_configures_upstream_envoy_for_the_generated_gateway_and_every_route_answers() {
    installed();
    let began = Instant::now();
    let dir = common::scratch_dir("istio-gen-gateway");
    let control = ControlPlane::start(
        &dir.join("control-plane"),
        [127, 0, 0, 1].into(),
        MeshOptions::default(),
        None,
        &meshbench_results::Stop::new(),
    )
    .unwrap_or_else(|e| panic!("the control plane: {e}"));

    // The gateway, with no Gateway objects yet: its agent and Envoy up.
    let admin = common::free_addr();
    let cmd = control
        .gateway_command(&dir.join("agent"), admin, 2)
        .unwrap_or_else(|e| panic!("the gateway's command: {e}"));
    let mut agent = RoleProcess::spawn(
        "pilot-agent",
        cmd,
        &dir.join("agent.log"),
        &Placement::default(),
    )
    .unwrap();

    // The backend, then the generated objects, applied while the gateway runs.
    let backend = BackendProc::start(&[]);
    let out_dir = dir.join("gen");
    let (d, p, b, o) = (
        DOMAINS.to_string(),
        PATHS.to_string(),
        backend.addr.to_string(),
        out_dir.display().to_string(),
    );
    let out = meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "istio",
            "--domains",
            &d,
            "--paths",
            &p,
            "--tls",
            "--backend",
            &b,
            "--out",
            &o,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "gen gateway: {}", stderr(&out));
    let files: Vec<_> = [
        "istio-secrets.yaml",
        "istio-serviceentry.yaml",
        "istio-gateways.yaml",
        "istio-virtualservices.yaml",
    ]
    .iter()
    .map(|f| out_dir.join(f))
    .collect();
    let objects = control
        .api
        .apply_files(&files)
        .unwrap_or_else(|e| panic!("applying the generated objects: {e}"));
    assert_eq!(
        objects,
        DOMAINS + 1 + 1 + DOMAINS,
        "secrets, entry, gateway, routes"
    );

    let expected = ready::Expected {
        listener: "0.0.0.0_443".into(),
        filter_chains: DOMAINS,
        route_configs: ready::RouteConfigs::All,
        routes: DOMAINS * PATHS,
        certificates: DOMAINS,
        backend: ("||meshbench-backend.internal".into(), vec![backend.addr]),
    };
    let acked = ready::wait_agent_acked(
        &mut agent,
        admin,
        None,
        &ready::Awaited::Gateway(expected.clone()),
        LIMIT,
        &meshbench_results::Stop::new(),
        istio::BY_ISTIOD,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.log_tail(20)));
    assert!(
        ready::rejected(admin).is_empty(),
        "{:?}",
        ready::rejected(admin)
    );

    // Every route, through the gateway on 443.
    let targets = out_dir.join("targets.txt").display().to_string();
    let ca = out_dir.join("ca.pem").display().to_string();
    let total = (DOMAINS * PATHS).to_string();
    let (out, r) = run_json(
        "istio-gateway",
        &[
            "--targets",
            &targets,
            "--connect-to",
            "::127.0.0.1:443",
            "--cacert",
            &ca,
            "-n",
            &total,
            "-c",
            "4",
            "-t",
            "1",
            "--timeout",
            "20s",
        ],
        LIMIT,
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        stderr(&out),
        agent.log_tail(20)
    );
    assert_eq!(
        u(&r, "/status_codes/200"),
        (DOMAINS * PATHS) as u64,
        "{} {}",
        r["status_codes"],
        r["errors"]
    );
    let hosts = r["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), DOMAINS, "{hosts:?}");
    assert!(
        hosts
            .iter()
            .all(|h| h["requests"] == PATHS as u64 && h["errors"] == 0),
        "every domain answered each of its paths: {hosts:?}"
    );
    eprintln!(
        "istio: istiod ready {:.1} s, objects applied to all ACKed {:.1} s, {} routes 200, {:.1} s in all",
        control.istiod_ready_in.as_secs_f64(),
        acked.as_secs_f64(),
        DOMAINS * PATHS,
        began.elapsed().as_secs_f64()
    );
    drop(agent);
    drop(control);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_experiment_measures_the_gateway_istiod_configured() {
    installed();
    let dir = common::scratch_dir("istio-experiment");
    let file = dir.join("istio.yaml");
    std::fs::write(
        &file,
        format!(
            "name: istio-gateway-test\ntopologies: [gateway]\nduration_secs: 3\nwarmup_secs: 1\n\
             cooldown_secs: 0.5\nload:\n  rate_rps: [200]\n  connections: [8]\n  response_bytes: [1024]\n\
             gateway:\n  type: istio\n  domains: {DOMAINS}\n  paths: {PATHS}\nbackend:\n  replicas: 2\n"
        ),
    )
    .unwrap();
    let store = dir.join("store");
    let (f, s) = (file.display().to_string(), store.display().to_string());
    let out = meshbench(&["experiment", &f, "--store", &s], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("failed:"), "{err}");
    // The line and its continuations (stderr is wrapped at 120 columns, with a hanging indent).
    let lines: Vec<&str> = err.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with("istio: istiod ready in"))
        .unwrap_or_else(|| panic!("no control-plane line: {err}"));
    let note = std::iter::once(&lines[first])
        .chain(lines[first + 1..].iter().take_while(|l| l.starts_with(' ')))
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        note.contains(&format!("{} routes applied", DOMAINS * PATHS))
            && note.contains("config dump")
            && note.contains("one route added reached Envoy in"),
        "{note}"
    );

    let export = common::export_json(&store);
    let step = &export["steps"][0];
    assert_eq!(step["status"], "ok", "{step}");
    let summary = &step["summary"];
    assert!(u(summary, "/requests") >= 400, "{summary}");
    assert_eq!(u(summary, "/errors"), 0, "{summary}");
    let gateway = common::usage_of(step, "gateway");
    assert_eq!(gateway["program"], "istio");
    assert!(
        gateway["cpu_millicores_avg"].as_f64().unwrap_or(0.0) > 0.0,
        "{gateway}"
    );
    // Envoy's own counts and allocator, read from the admin endpoint pilot-agent gave it: every
    // request the client counted went through it.
    assert!(
        u(gateway, "/proxy/requests/status_2xx") >= u(summary, "/requests"),
        "{gateway}"
    );
    assert!(
        u(gateway, "/proxy/memory_allocated_bytes") > 1 << 20,
        "{gateway}"
    );
    // Two backend replicas behind the ServiceEntry's two endpoints, each answering its share.
    for name in ["backend", "backend_2"] {
        let usage = common::usage_of(step, name);
        assert!(
            usage["cpu_millicores_avg"].as_f64().unwrap_or(0.0) > 0.0,
            "replica {name} answered nothing: {usage}"
        );
    }
    // istiod, which configured it, sampled as a role beside it: not on the path, but what the
    // mesh costs. It was measured (memory above its binary's, CPU read) in the step's window.
    let istiod = common::usage_of(step, "istiod");
    assert!(u(istiod, "/samples") >= 2, "{istiod}");
    assert!(istiod["cpu_millicores_avg"].as_f64().is_some(), "{istiod}");
    assert!(
        istiod["rss_mib_avg"].as_f64().unwrap_or(0.0) > 20.0,
        "{istiod}"
    );
    let shown = meshbench(&["results", "show", "latest", "--store", &s], LIMIT);
    let shown = common::stdout(&shown);
    assert!(shown.contains("istiod "), "{shown}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_istio_gateway_in_namespaces_or_not_installed_is_refused_up_front() {
    let dir = common::scratch_dir("istio-refused");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let netns = write(
        "netns.yaml",
        "name: x\ntopologies: [gateway]\nisolation: netns\ngateway:\n  type: istio\n",
    );
    let out = meshbench(&["experiment", &netns, "--dry-run"], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("use isolation: loopback"),
        "{}",
        stderr(&out)
    );

    let gateway = write(
        "gateway.yaml",
        "name: x\ntopologies: [gateway]\ngateway:\n  type: istio\n",
    );
    let mut child = std::process::Command::new(common::bin())
        .args(["experiment", &gateway, "--dry-run"])
        .env("ISTIO_CACHE", "/nonexistent/istio")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::wait_with_limit(&mut child, LIMIT);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("/nonexistent/istio/bin/pilot-discovery")
            && err.contains("scripts/install-istio.sh"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
