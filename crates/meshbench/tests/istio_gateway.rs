//! Issue 28: Istio's own control plane turns what `meshbench gen gateway --for istio` writes
//! into Envoy configuration, and the upstream Envoy carries traffic on it.
//!
//! A real kube-apiserver ([`TestCluster::control_plane`]) with Istio's CRDs; istiod
//! (`pilot-discovery`, built from istio.io/istio by scripts/install-istio.sh) on loopback; the
//! generated Secrets, ServiceEntry, Gateways and VirtualServices (10 domains x 10 paths, TLS)
//! applied; an ingress gateway as Istio runs one (`pilot-agent proxy router`, its identity a
//! ServiceAccount token, its Envoy the project's upstream Envoy 1.40); a `meshbench backend`.
//!
//! The contract guarded: Envoy ACKs everything istiod pushes (no `update_rejected`), ends with
//! the one `0.0.0.0_443` listener holding a filter chain per domain, a route configuration per
//! domain with every path, every domain's certificate (SDS `kubernetes://NAME-cert`, served by
//! istiod to the authenticated agent only) and the backend's endpoint; then every route answers
//! 200 through it. Upstream Envoy has none of Istio's own filters, so istiod runs with the
//! settings that leave them out (docs/istio.md lists what Envoy refuses otherwise).
//!
//! Nothing installed is skipped silently: a missing binary fails the test and says how to
//! install it.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::TestCluster;
use common::istio::{
    self, dump_section, IngressGateway, Istiod, GATEWAY_SERVICE_ACCOUNT, NAMESPACE,
};
use common::{meshbench, run_json, stderr, u, BackendProc};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, PostParams};

const DOMAINS: usize = 10;
const PATHS: usize = 10;
const LIMIT: Duration = Duration::from_secs(120);

/// istiod's environment: upstream Envoy refuses clusters and listeners carrying Istio's metadata
/// exchange filters, and listeners carrying its ALPN filter (docs/istio.md).
const ISTIOD_ENV: &[(&str, &str)] = &[
    ("PILOT_ENABLE_ALPN_FILTER", "false"),
    ("PILOT_ENABLE_METADATA_EXCHANGE", "false"),
];
/// The mesh configuration: Istio's defaults. (Auto mutual TLS stays on: its clusters wait for
/// the workload certificate and root, SDS `default` and `ROOTCA`, which pilot-agent serves.)
const MESH: &str = "{}\n";

/// What is still missing from Envoy's configuration, or empty when every listener, route,
/// secret and endpoint istiod should send has been accepted.
fn incomplete(admin: SocketAddr, backend_port: u16) -> Result<Vec<String>, String> {
    let dump = istio::config_dump(admin)?;
    let mut missing = Vec::new();
    let listeners = dump_section(&dump, "ListenersConfigDump")
        .and_then(|s| s["dynamic_listeners"].as_array().cloned())
        .unwrap_or_default();
    match listeners.iter().find(|l| l["name"] == "0.0.0.0_443") {
        None => missing.push("listener 0.0.0.0_443".to_string()),
        Some(l) => {
            let chains = l["active_state"]["listener"]["filter_chains"]
                .as_array()
                .map_or(0, Vec::len);
            if chains != DOMAINS {
                missing.push(format!(
                    "0.0.0.0_443 active with {DOMAINS} filter chains (has {chains}, warming: {})",
                    !l["warming_state"].is_null()
                ));
            }
        }
    }
    let routes = dump_section(&dump, "RoutesConfigDump")
        .and_then(|s| s["dynamic_route_configs"].as_array().cloned())
        .unwrap_or_default();
    let paths: usize = routes
        .iter()
        .flat_map(|r| r["route_config"]["virtual_hosts"].as_array().cloned())
        .flatten()
        .filter(|vh| {
            vh["domains"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|d| d.as_str().is_some_and(|d| d.starts_with("workspace-")))
            })
        })
        .map(|vh| vh["routes"].as_array().map_or(0, Vec::len))
        .sum();
    if paths != DOMAINS * PATHS {
        missing.push(format!(
            "{} routes (has {paths} in {} route configurations)",
            DOMAINS * PATHS,
            routes.len()
        ));
    }
    let secrets = dump_section(&dump, "SecretsConfigDump")
        .and_then(|s| s["dynamic_active_secrets"].as_array().cloned())
        .unwrap_or_default();
    let certs = secrets
        .iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kubernetes://workspace-"))
        })
        .count();
    if certs != DOMAINS {
        missing.push(format!("{DOMAINS} domain certificates (has {certs})"));
    }
    let (_, clusters) = istio::http_get(admin, "/clusters")?;
    let endpoint = format!("meshbench-backend.internal::127.0.0.1:{backend_port}::");
    if !clusters.contains(&endpoint) {
        missing.push(format!("the backend's endpoint ({endpoint})"));
    }
    Ok(missing)
}

/// Every xDS update Envoy refused so far (counter name, count).
fn rejected(admin: SocketAddr) -> Vec<(String, u64)> {
    istio::stats(admin, "update_rejected")
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .collect()
}

#[test]
fn istiod_configures_upstream_envoy_for_the_generated_gateway_and_every_route_answers() {
    let mut not_installed = istio::missing();
    let envoy = common::envoy_binary();
    if !common::cluster::k8s_bin().join("kube-apiserver").exists() {
        not_installed.push("kube-apiserver is missing: run scripts/install-k8s.sh".into());
    }
    assert!(not_installed.is_empty(), "{}", not_installed.join("\n"));
    let began = Instant::now();

    let cluster = TestCluster::control_plane();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = cluster.client(&rt);

    // Istio's CRDs, then its namespace and the gateway's ServiceAccount.
    let t = Instant::now();
    let crds = std::fs::read_to_string(istio::istio_cache().join("crd-all.gen.yaml")).unwrap();
    let n = istio::apply_yaml(&rt, &client, &crds, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("applying Istio's CRDs: {e}"));
    let base = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}}}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {GATEWAY_SERVICE_ACCOUNT}, namespace: {NAMESPACE}}}\n"
    );
    istio::apply_yaml(&rt, &client, &base, Duration::from_secs(30)).unwrap();
    eprintln!(
        "istio: {n} CRDs applied in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let istiod_dir = common::scratch_dir("istio-istiod");
    let mut istiod = Istiod::start(&istiod_dir, &cluster.kubeconfig, MESH, ISTIOD_ENV);
    let istiod_ready = istiod.wait_ready(LIMIT);

    // What a gateway pod has mounted: the mesh's root certificate (the ConfigMap istiod writes
    // into every namespace) and a service-account token for istiod's audience.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut root_cert = String::new();
    istio::wait_until(
        "the istio-ca-root-cert ConfigMap",
        LIMIT,
        &mut [&mut istiod.daemon],
        || {
            let cm = rt
                .block_on(config_maps.get_opt("istio-ca-root-cert"))
                .map_err(|e| e.to_string())?;
            if let Some(pem) = cm.and_then(|c| c.data?.get("root-cert.pem").cloned()) {
                root_cert = pem;
                return Ok(true);
            }
            Ok(false)
        },
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let token = rt
        .block_on(accounts.create_token_request(
            GATEWAY_SERVICE_ACCOUNT,
            &PostParams::default(),
            &TokenRequest {
                metadata: Default::default(),
                spec: TokenRequestSpec {
                    audiences: vec!["istio-ca".into()],
                    expiration_seconds: Some(3600),
                    bound_object_ref: None,
                },
                status: None,
            },
        ))
        .unwrap_or_else(|e| panic!("a token for {GATEWAY_SERVICE_ACCOUNT}: {e}"))
        .status
        .expect("the token request's status")
        .token;

    // The gateway, with no Gateway objects yet: Envoy up and its bootstrap accepted.
    let gw_dir = common::scratch_dir("istio-gateway");
    let mut gw = IngressGateway::start(&gw_dir, &istiod, &root_cert, &token, &envoy);
    let admin = gw.admin;
    let envoy_live = istio::wait_until(
        "Envoy LIVE (its workload certificate and first xDS answers)",
        LIMIT,
        &mut [&mut gw.agent, &mut istiod.daemon],
        || Ok(istio::http_get(admin, "/ready").is_ok_and(|(c, b)| c == 200 && b.contains("LIVE"))),
    );

    // The backend, then the generated objects, applied while the gateway runs.
    let backend = BackendProc::start(&[]);
    let out_dir = common::scratch_dir("istio-gen");
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
    let pushed = Instant::now();
    for f in [
        "istio-secrets.yaml",
        "istio-serviceentry.yaml",
        "istio-gateways.yaml",
        "istio-virtualservices.yaml",
    ] {
        let text = std::fs::read_to_string(out_dir.join(f)).unwrap();
        istio::apply_yaml(&rt, &client, &text, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("applying {f}: {e}"));
    }
    let applied = pushed.elapsed();

    let port = backend.addr.port();
    let acked = istio::wait_until(
        "every listener, route, certificate and endpoint in Envoy",
        LIMIT,
        &mut [&mut gw.agent, &mut istiod.daemon],
        || {
            let r = rejected(admin);
            if !r.is_empty() {
                return Err(format!("Envoy rejected updates: {r:?}"));
            }
            let missing = incomplete(admin, port)?;
            if missing.is_empty() {
                return Ok(true);
            }
            Err(format!("still missing: {}", missing.join("; ")))
        },
    ) + applied;
    let r = rejected(admin);
    assert!(
        r.is_empty(),
        "Envoy rejected updates: {r:?}\n{}\n{}",
        gw.agent.tail(),
        istiod.daemon.tail()
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
        gw.agent.tail()
    );
    assert_eq!(
        u(&r, "/status_codes/200"),
        (DOMAINS * PATHS) as u64,
        "{} {}\n{}",
        r["status_codes"],
        r["errors"],
        gw.agent.tail()
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
        "istio: istiod ready {:.1} s, Envoy live {:.1} s, objects applied to all ACKed {:.1} s, \
         {} routes 200, {:.1} s in all",
        istiod_ready.as_secs_f64(),
        envoy_live.as_secs_f64(),
        acked.as_secs_f64(),
        DOMAINS * PATHS,
        began.elapsed().as_secs_f64()
    );
    drop(gw);
    drop(istiod);
    drop(cluster);
    for d in [istiod_dir, gw_dir, out_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
}
