//! Istio on the real test node (common/cluster.rs), set up the way a cluster gets it, for every
//! test that needs Istio's injection there (tests/it/istio_injected.rs,
//! tests/it/istio_gateway_injected.rs).
//!
//! [`IstioOnNode::install`] does, on a started node:
//! - builds the image `istio-proxy` here ([`PROXY_IMAGE`]), from pilot-agent, the project's
//!   Envoy, Istio's bootstrap template and Debian's nf_tables iptables, each with what `ldd`
//!   lists (no registry), and loads it into the node's containerd;
//! - applies Istio's CRDs, the namespace `istio-system` and the injector's ConfigMap before
//!   istiod starts (istiod turns injection off for its lifetime when the ConfigMap is missing):
//!   Istio's own chart templates `sidecar` (the default) and `gateway` and the chart's default
//!   values, with the image and the CA's address set as a user's values set them;
//! - writes the mesh configuration where an installed istiod reads it, the ConfigMap `istio`
//!   (with per-hop attribution's log provider, as docs/kubernetes.md asks users to add);
//! - starts istiod (`pilot-discovery`, scripts/install-istio.sh) on this machine against the
//!   node's API server: xDS and the CA for the pods on the bridge's address ([`GATEWAY`], in its
//!   serving certificate through `ISTIOD_CUSTOM_HOST`), everything else on loopback;
//! - declares istiod's injection webhook to the API server (a MutatingWebhookConfiguration for
//!   namespaces labelled `istio-injection: enabled`, its CA the mesh's root).
//!
//! The contract: `install` returns once istiod is ready and has published its root in
//! `istio-system`; it fails with istiod's log when it cannot. istiod stops when the
//! [`IstioOnNode`] is dropped; what was applied goes with the cluster's sweep.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use meshbench_k8s::objects::istio::MeshConfig;
use meshbench_k8s::BlockingClient;
use meshbench_lab::istio::{self, ISTIOD_ENV};
use meshbench_lab::process::{Placement, RoleProcess};
use meshbench_lab::program::envoy::access_log;
use meshbench_lab::program::envoy::admin::STATS_NEEDED;
use serde_json::{json, Value};

use super::cluster::{TestCluster, GATEWAY};

/// istiod's own namespace: its root, the injector's ConfigMap.
pub const ISTIO_NS: &str = "istio-system";
/// The `istio-proxy` image built here, for both `istio-init` and `istio-proxy`.
pub const PROXY_IMAGE: &str = "localhost/meshbench-istio-proxy:1";
/// The image has no base to inherit a PATH from; istio-init runs iptables by name.
const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const XTABLES: &str = "/usr/lib/x86_64-linux-gnu/xtables";
/// The files of Istio's chart the injector's ConfigMap is made of (scripts/install-istio.sh).
const CHART_FILES: [&str; 3] = [
    "injection-template.yaml",
    "gateway-injection-template.yaml",
    "injection-values.yaml",
];
/// How long istiod may take to be ready and publish its root.
const ISTIOD_READY_WITHIN: Duration = Duration::from_secs(90);
/// How long istiod may take to publish its root in a namespace made after it started.
const ROOT_PUBLISHED_WITHIN: Duration = Duration::from_secs(30);

/// Istio's control plane serving the node: istiod on this machine, its webhook declared.
pub struct IstioOnNode {
    /// istiod; stopped when this is dropped.
    pub istiod: RoleProcess,
    /// The mesh's root certificate (PEM), as istiod published it.
    pub root_cert: String,
    /// The image the injected containers run ([`PROXY_IMAGE`]).
    pub proxy_image: &'static str,
    /// Where the pods' agents reach istiod's xDS and CA (on the bridge's address).
    pub xds: SocketAddr,
    /// istiod's injection webhook (loopback, HTTPS, the root's certificate).
    pub webhook: SocketAddr,
    /// istiod's plain HTTP port (`/ready`, `/debug/...`) on loopback.
    pub http: SocketAddr,
    /// istiod's log file.
    pub log: PathBuf,
}

impl IstioOnNode {
    /// Everything the module's header lists, on the node `c`; scratch files under `dir`.
    pub fn install(c: &TestCluster, k: &BlockingClient, dir: &Path) -> IstioOnNode {
        if let Some(e) = istio::unavailable() {
            panic!("{e}");
        }
        for f in CHART_FILES {
            let p = istio::cache().join(f);
            assert!(
                p.is_file(),
                "no {}: run scripts/install-istio.sh",
                p.display()
            );
        }
        c.load_image(
            &istio_proxy_rootfs(dir),
            PROXY_IMAGE,
            "/usr/local/bin/pilot-agent",
            "0:0",
            &[PATH],
        );

        // Istio's CRDs and namespace, and the injector's configuration before istiod starts.
        let crds = std::fs::read_to_string(istio::cache().join("crd-all.gen.yaml")).unwrap();
        k.apply_all(meshbench_k8s::blocking::documents(&crds).unwrap())
            .unwrap();
        k.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ISTIO_NS}}))
            .unwrap();
        let xds: SocketAddr = TcpListener::bind((GATEWAY, 0))
            .expect("the bridge's address is this machine's")
            .local_addr()
            .unwrap();
        k.apply(&injector_config_map(&xds.to_string())).unwrap();
        let istio = start_istiod(dir, c, k, xds);

        // The webhook, as Istio's chart declares it, at istiod's loopback address.
        k.apply(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "meshbench-sidecar-injector"},
            "webhooks": [{
                "name": "namespace.sidecar-injector.istio.io",
                "clientConfig": {
                    "url": format!("https://{}/inject", istio.webhook),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(&istio.root_cert),
                },
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}},
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "admissionReviewVersions": ["v1"],
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10
            }]
        }))
        .unwrap();
        istio
    }

    /// Waits until istiod has published its root (ConfigMap istio-ca-root-cert) in
    /// `namespace`: the injected pods mount it.
    pub fn wait_root_in(&self, k: &BlockingClient, namespace: &str) {
        let deadline = Instant::now() + ROOT_PUBLISHED_WITHIN;
        while k
            .get::<ConfigMap>(namespace, "istio-ca-root-cert")
            .unwrap()
            .is_none()
        {
            assert!(
                Instant::now() < deadline,
                "istiod did not publish its root in {namespace}: {}",
                self.istiod.log_tail(10)
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// The `istio-proxy` image's root filesystem, as Istio's proxyv2 image holds it: pilot-agent
/// (the entrypoint, for both containers), Envoy, the bootstrap template where pilot-agent
/// looks, and nf_tables iptables with its extensions for `istio-init`.
fn istio_proxy_rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("istio-proxy-rootfs");
    for d in [
        "etc/istio/proxy",
        "tmp",
        "var/lib/istio/envoy",
        "var/lib/istio/data",
        "var/run/secrets",
        "usr/sbin",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::set_permissions(
        root.join("tmp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let cache = istio::cache();
    let envoy = std::fs::canonicalize(super::envoy_binary()).unwrap();
    super::copy_with_libraries(&root, &envoy, "/usr/local/bin/envoy");
    super::copy_with_libraries(
        &root,
        &cache.join("bin/pilot-agent"),
        "/usr/local/bin/pilot-agent",
    );
    std::fs::copy(
        cache.join("envoy_bootstrap_tmpl.json"),
        root.join("var/lib/istio/envoy/envoy_bootstrap_tmpl.json"),
    )
    .unwrap();
    super::copy_with_libraries(
        &root,
        Path::new("/usr/sbin/xtables-nft-multi"),
        "/usr/sbin/xtables-nft-multi",
    );
    for name in [
        "iptables",
        "iptables-save",
        "iptables-restore",
        "iptables-nft",
        "iptables-nft-save",
        "iptables-nft-restore",
    ] {
        std::os::unix::fs::symlink("xtables-nft-multi", root.join("usr/sbin").join(name)).unwrap();
    }
    for ext in std::fs::read_dir(XTABLES).unwrap().flatten() {
        let path = ext.path();
        super::copy_with_libraries(&root, &path, &path.display().to_string());
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/tmp:/bin/false\nistio-proxy:x:1337:1337:istio-proxy:/tmp:/bin/false\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nistio-proxy:x:1337:\n").unwrap();
    root
}

/// The injector's ConfigMap, as Istio's istiod chart renders it: the templates `sidecar` (the
/// default) and `gateway`, and the chart's default values with the image and the CA's address
/// set. Both templates read only values these defaults hold (`global`, `revision`,
/// `pilot.env`, `gateways.securityContext`; the gateway's readiness period is
/// `global.proxy.readinessPeriodSeconds`, which no annotation overrides).
fn injector_config_map(ca: &str) -> Value {
    let cache = istio::cache();
    let read = |f: &str| std::fs::read_to_string(cache.join(f)).unwrap();
    let chart: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read("injection-values.yaml")).unwrap();
    let defaults = serde_json::to_value(&chart["_internal_defaults_do_not_set"]).unwrap();
    let mut values = json!({
        "global": defaults["global"],
        "sidecarInjectorWebhook": defaults["sidecarInjectorWebhook"],
        "revision": defaults["revision"],
        // The chart is istiod's own: its top-level values are `pilot`'s.
        "pilot": {"cni": defaults["cni"], "env": {}},
        "gateways": {
            "securityContext": defaults["gateways"]["securityContext"],
            "seccompProfile": defaults["gateways"]["seccompProfile"],
        },
    });
    values["global"]["proxy"]["image"] = PROXY_IMAGE.into();
    values["global"]["proxy_init"]["image"] = PROXY_IMAGE.into();
    values["global"]["caAddress"] = ca.into();
    values["global"]["imagePullPolicy"] = "Never".into();
    let config = json!({
        "policy": "enabled",
        "defaultTemplates": ["sidecar"],
        "alwaysInjectSelector": [],
        "neverInjectSelector": [],
        "injectedAnnotations": {},
        "templates": {
            "sidecar": read("injection-template.yaml"),
            "gateway": read("gateway-injection-template.yaml"),
        },
    });
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "istio-sidecar-injector", "namespace": ISTIO_NS},
        "data": {
            "config": serde_yaml_ng::to_string(&config).unwrap(),
            "values": values.to_string(),
        },
    })
}

/// `GET path` over HTTP/1.1 on a connection closed after it (Envoy refuses HTTP/1.0): the
/// status and the body, de-chunked; None when there is no answer.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let (head, mut rest) = text.split_once("\r\n\r\n")?;
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some((status, rest.to_string()));
    }
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).ok()?;
        if n == 0 || after.len() < n {
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    Some((status, body))
}

/// istiod on this machine against the node's API server, ready, its root published in
/// [`ISTIO_NS`], its injector configured.
fn start_istiod(dir: &Path, c: &TestCluster, k: &BlockingClient, xds: SocketAddr) -> IstioOnNode {
    let (grpc, http, https, monitoring) = (
        super::free_addr(),
        super::free_addr(),
        super::free_addr(),
        super::free_addr(),
    );
    let stats: Vec<String> = STATS_NEEDED.iter().map(|p| format!("\"{p}\"")).collect();
    let cwd = dir.join("istiod");
    std::fs::create_dir_all(&cwd).unwrap();
    // The mesh configuration where an installed istiod reads it, the ConfigMap `istio` in its
    // namespace (istiod falls back to it when its `--meshConfig` file does not exist): what
    // the injector needs, the proxies' stats, and per-hop attribution's log provider, which
    // a run checks for there (issue 48; with no Telemetry naming it, nothing changes).
    let mesh = cwd.join("no-mesh-file.yaml");
    let provider = serde_yaml_ng::to_string(&MeshConfig {
        extension_providers: vec![access_log::istio_provider()],
    })
    .unwrap();
    let mesh_yaml = format!(
        "defaultConfig:\n  discoveryAddress: {xds}\n  proxyStatsMatcher:\n    inclusionPrefixes: [{}]\n{provider}",
        stats.join(", ")
    );
    k.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": MeshConfig::config_map_name(None), "namespace": ISTIO_NS},
        "data": {MeshConfig::KEY: mesh_yaml},
    }))
    .unwrap();
    let addrs = istio::IstiodAddrs {
        grpc,
        secure_grpc: xds,
        http,
        https,
        monitoring,
    };
    let mut cmd = istio::istiod_command(&cwd, &c.kubeconfig, &mesh, &addrs);
    cmd.env("ISTIOD_CUSTOM_HOST", format!("127.0.0.1,{GATEWAY}"))
        .envs(ISTIOD_ENV.iter().copied());
    let log = dir.join("istiod.log");
    let mut istiod = RoleProcess::spawn("istiod", cmd, &log, &Placement::default()).unwrap();
    let deadline = Instant::now() + ISTIOD_READY_WITHIN;
    let root_cert = loop {
        if http_get(http, "/ready").is_some_and(|(s, _)| s == 200) {
            if let Some(pem) = k
                .get::<ConfigMap>(ISTIO_NS, "istio-ca-root-cert")
                .unwrap()
                .and_then(|cm| cm.data?.remove("root-cert.pem"))
            {
                break pem;
            }
        }
        assert!(istiod.exited().is_none(), "istiod: {}", istiod.log_tail(10));
        assert!(
            Instant::now() < deadline,
            "istiod not ready: {}",
            istiod.log_tail(10)
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !text.contains("Skipping sidecar injector"),
        "istiod found no injector configuration: {}",
        istiod.log_tail(10)
    );
    IstioOnNode {
        istiod,
        root_cert,
        proxy_image: PROXY_IMAGE,
        xds,
        webhook: https,
        http,
        log,
    }
}
