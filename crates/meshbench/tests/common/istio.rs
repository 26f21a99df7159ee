//! Istio's own control plane on this machine, for tests/istio_gateway.rs: istiod
//! (`pilot-discovery`) and an ingress gateway (`pilot-agent proxy router` running the upstream
//! Envoy), both built by scripts/install-istio.sh from the Go module istio.io/istio, against the
//! kube-apiserver of [`super::cluster::TestCluster::control_plane`].
//!
//! The contract: every server binds loopback, except the gateway's listeners, which Istio binds
//! to the wildcard address (`0.0.0.0_443`, as in a pod); every process runs in its own scratch
//! directory (both binaries read and write paths relative to their working directory, such as
//! `./etc/istio/proxy` and `./var/run/secrets`), logs to `NAME.log` there, dies with the test
//! (parent-death signal) and is killed with its process group when dropped. Waits are bounded
//! and fail with the tails of the logs.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::Client;
use serde::Deserialize;
use serde_json::Value;

use super::cluster::log_tail;

/// The istio.io/istio pseudo-version scripts/install-istio.sh builds.
pub const VERSION: &str = "v0.0.0-20260827124520-eed52ebb66ad";
/// Istio's own namespace, where the gateway, its Secrets and istiod live.
pub const NAMESPACE: &str = "istio-system";
/// The Kubernetes cluster id istiod and the proxy agree on.
pub const CLUSTER_ID: &str = "Kubernetes";
const LOG_TAIL_LINES: usize = 20;

/// Where scripts/install-istio.sh puts what it builds and extracts.
pub fn istio_cache() -> PathBuf {
    std::env::var_os("ISTIO_CACHE").map_or_else(
        || PathBuf::from(format!("/var/cache/meshbench/istio/{VERSION}")),
        PathBuf::from,
    )
}

/// What the test needs that is not installed, each with how to install it (empty: all there).
pub fn missing() -> Vec<String> {
    let cache = istio_cache();
    let mut out = Vec::new();
    for f in [
        "bin/pilot-discovery",
        "bin/pilot-agent",
        "crd-all.gen.yaml",
        "envoy_bootstrap_tmpl.json",
    ] {
        if !cache.join(f).exists() {
            out.push(format!(
                "{} is missing: run scripts/install-istio.sh",
                cache.join(f).display()
            ));
        }
    }
    out
}

/// A daemon this test started: its own process group, its log, killed when dropped.
pub struct Daemon {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

impl Daemon {
    /// Starts `cmd` in `dir` (its working directory), output in `dir/NAME.log`.
    pub fn spawn(name: &str, mut cmd: Command, dir: &Path) -> Daemon {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        cmd.current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: starting {program}: {e}"));
        Daemon {
            name: name.to_string(),
            log,
            child,
        }
    }

    /// The last lines of its log.
    pub fn tail(&self) -> String {
        log_tail(&self.log, LOG_TAIL_LINES)
    }

    /// Why it is no longer running, if it is not.
    pub fn exited(&mut self) -> Option<String> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|s| format!("{} exited ({s})\n{}", self.name, self.tail()))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // The whole group: pilot-agent's Envoy is its child, in the group made at spawn.
        // SAFETY: kill on the process group this handle created and has not reaped.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Waits until `ready` says Ok(true), at most `limit`. A daemon of `watch` that exits, an
/// Err from `ready`, or the limit fails the test with every watched log's tail. Returns how
/// long it took.
pub fn wait_until(
    what: &str,
    limit: Duration,
    watch: &mut [&mut Daemon],
    mut ready: impl FnMut() -> Result<bool, String>,
) -> Duration {
    let began = Instant::now();
    let mut last = String::new();
    loop {
        match ready() {
            Ok(true) => {
                let took = began.elapsed();
                eprintln!("istio: {what} after {:.1} s", took.as_secs_f64());
                return took;
            }
            Ok(false) => {}
            Err(e) => last = e,
        }
        for d in watch.iter_mut() {
            if let Some(why) = d.exited() {
                panic!("{why}\nwhile waiting for {what} ({last})");
            }
        }
        if began.elapsed() > limit {
            let tails: Vec<String> = watch.iter().map(|d| d.tail()).collect();
            panic!("{what}: not after {limit:?} ({last})\n{}", tails.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A plain HTTP/1.1 GET on loopback, one request a connection (Envoy's admin refuses
/// HTTP/1.0): the status and the body, chunked bodies decoded.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("{addr}{path}: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}{path}: no HTTP answer"))?;
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{addr}{path}: no status in {head:?}"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        code,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    ))
}

/// A chunked body, decoded (sizes in hex, each chunk followed by CRLF).
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

/// Server-side applies every object of a multi-document YAML text (field manager
/// `meshbench-test`), each with its own API resource, retrying for up to `limit` while the API
/// server does not know a kind yet (a CRD just applied). Returns how many were applied.
pub fn apply_yaml(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    text: &str,
    limit: Duration,
) -> Result<usize, String> {
    let pp = PatchParams::apply("meshbench-test").force();
    let mut n = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).map_err(|e| format!("YAML: {e}"))?;
        if v.is_null() {
            continue;
        }
        let api_version = v["apiVersion"].as_str().unwrap_or_default();
        let kind = v["kind"].as_str().unwrap_or_default();
        let name = v["metadata"]["name"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = match v["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let deadline = Instant::now() + limit;
        loop {
            match rt.block_on(api.patch(name, &pp, &Patch::Apply(&v))) {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(300));
                }
                Err(e) => return Err(format!("{kind} {name}: {e}")),
            }
        }
        n += 1;
    }
    Ok(n)
}

/// istiod, on loopback ports of its own.
pub struct Istiod {
    pub daemon: Daemon,
    /// Plain xDS (no authentication), istiod's 15010.
    pub grpc: SocketAddr,
    /// Authenticated xDS and the CA, istiod's 15012.
    pub secure_grpc: SocketAddr,
    /// /ready and /debug (istiod's 8080).
    pub http: SocketAddr,
    pub monitoring: SocketAddr,
}

impl Istiod {
    /// Starts `pilot-discovery discovery` in `dir` with `mesh` as its mesh configuration and
    /// `env` added to its environment. Not waited for: see [`Istiod::wait_ready`].
    pub fn start(dir: &Path, kubeconfig: &Path, mesh: &str, env: &[(&str, &str)]) -> Istiod {
        let free = || super::free_addr();
        let (grpc, secure_grpc, http, https, monitoring) = (free(), free(), free(), free(), free());
        let mesh_file = dir.join("mesh.yaml");
        std::fs::write(&mesh_file, mesh).unwrap();
        let mut cmd = Command::new(istio_cache().join("bin/pilot-discovery"));
        cmd.arg("discovery")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--meshConfig={}", mesh_file.display()))
            .arg(format!("--grpcAddr={grpc}"))
            .arg(format!("--secureGRPCAddr={secure_grpc}"))
            .arg(format!("--httpAddr={http}"))
            .arg(format!("--httpsAddr={https}"))
            .arg(format!("--monitoringAddr={monitoring}"))
            .arg(format!("--clusterID={CLUSTER_ID}"))
            .arg("--keepaliveMaxServerConnectionAge=30m")
            .env("POD_NAMESPACE", NAMESPACE)
            .env("POD_NAME", "istiod-0")
            .env("KUBECONFIG", kubeconfig)
            .envs(env.iter().map(|(k, v)| (OsStr::new(k), OsStr::new(v))));
        Istiod {
            daemon: Daemon::spawn("istiod", cmd, dir),
            grpc,
            secure_grpc,
            http,
            monitoring,
        }
    }

    /// Waits until istiod's /ready answers 200; returns how long that took.
    pub fn wait_ready(&mut self, limit: Duration) -> Duration {
        let http = self.http;
        wait_until("istiod ready", limit, &mut [&mut self.daemon], || {
            http_get(http, "/ready").map(|(code, _)| code == 200)
        })
    }
}

/// Istio's ingress gateway as a pod runs it: `pilot-agent proxy router` (its workload
/// certificate from istiod's CA, its xDS over the authenticated port, Envoy's SDS and ADS
/// through the agent) starting the upstream Envoy.
pub struct IngressGateway {
    pub agent: Daemon,
    /// Envoy's admin endpoint (127.0.0.1).
    pub admin: SocketAddr,
    pub dir: PathBuf,
}

/// How the gateway identifies itself: its pod, namespace, service account and labels.
pub const GATEWAY_POD: &str = "istio-ingressgateway-0";
pub const GATEWAY_SERVICE_ACCOUNT: &str = "istio-ingressgateway";

impl IngressGateway {
    /// Starts the agent in `dir` with what a pod would have mounted: `root_cert` (the
    /// `istio-ca-root-cert` ConfigMap's `root-cert.pem`) and `token` (a projected service-account
    /// token with audience `istio-ca`), at the paths pilot-agent reads by default relative to its
    /// working directory. Envoy is `envoy` (util-linux `setpriv` ties it to the agent); its admin
    /// and status ports are free loopback ports.
    pub fn start(
        dir: &Path,
        istiod: &Istiod,
        root_cert: &str,
        token: &str,
        envoy: &Path,
    ) -> IngressGateway {
        for (path, text) in [
            ("var/run/secrets/istio/root-cert.pem", root_cert),
            ("var/run/secrets/tokens/istio-token", token),
        ] {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::fs::create_dir_all(dir.join("etc/istio/proxy")).unwrap();
        // pilot-agent does not tie Envoy's life to its own: through this wrapper Envoy dies with
        // the agent, so a test killed outright leaves no Envoy holding port 443.
        let wrapper = dir.join("envoy");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec setpriv --pdeathsig KILL {} \"$@\"\n",
                envoy.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let free = || super::free_addr().port();
        let (admin, status, envoy_status, prometheus) = (free(), free(), free(), free());
        // ProxyConfig, as the mesh's `defaultConfig` or a pod's annotation would set it.
        let proxy_config = format!(
            "discoveryAddress: {}\nbinaryPath: {}\nconfigPath: ./etc/istio/proxy\n\
             proxyBootstrapTemplatePath: {}\nproxyAdminPort: {admin}\nstatusPort: {status}\n\
             concurrency: 2\ndrainDuration: 1s\nterminationDrainDuration: 1s\n",
            istiod.secure_grpc,
            wrapper.display(),
            istio_cache().join("envoy_bootstrap_tmpl.json").display(),
        );
        let mut cmd = Command::new(istio_cache().join("bin/pilot-agent"));
        cmd.args([
            "proxy",
            "router",
            "--domain",
            &format!("{NAMESPACE}.svc.cluster.local"),
            "--proxyLogLevel=warning",
            "--log_output_level=default:info",
        ])
        .env("PROXY_CONFIG", proxy_config)
        .env("POD_NAME", GATEWAY_POD)
        .env("POD_NAMESPACE", NAMESPACE)
        .env("INSTANCE_IP", "127.0.0.1")
        .env("SERVICE_ACCOUNT", GATEWAY_SERVICE_ACCOUNT)
        .env("ISTIO_META_CLUSTER_ID", CLUSTER_ID)
        .env("ISTIO_META_WORKLOAD_NAME", "istio-ingressgateway")
        .env(
            "ISTIO_METAJSON_LABELS",
            r#"{"istio":"ingressgateway","app":"istio-ingressgateway"}"#,
        )
        // istiod's serving certificate names its Service, not the loopback address dialled.
        .env("ISTIOD_SAN", format!("istiod.{NAMESPACE}.svc"))
        .env("ENVOY_STATUS_PORT", envoy_status.to_string())
        .env("ENVOY_PROMETHEUS_PORT", prometheus.to_string());
        IngressGateway {
            agent: Daemon::spawn("pilot-agent", cmd, dir),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            dir: dir.to_path_buf(),
        }
    }
}

/// Envoy's /config_dump (with EDS) from the admin endpoint at `admin`, parsed.
pub fn config_dump(admin: SocketAddr) -> Result<Value, String> {
    let (code, body) = http_get(admin, "/config_dump?include_eds")?;
    if code != 200 {
        return Err(format!("/config_dump: {code}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("/config_dump: {e}"))
}

/// Envoy's stats whose name matches `filter` (a regular expression), as (name, value).
pub fn stats(admin: SocketAddr, filter: &str) -> Result<Vec<(String, u64)>, String> {
    let (_, body) = http_get(admin, &format!("/stats?filter={filter}"))?;
    Ok(body
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(": ")?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect())
}

/// The section of a /config_dump whose `@type` is the message `name` (`RoutesConfigDump`, not
/// `ScopedRoutesConfigDump`).
pub fn dump_section<'a>(dump: &'a Value, name: &str) -> Option<&'a Value> {
    dump["configs"].as_array()?.iter().find(|c| {
        c["@type"]
            .as_str()
            .is_some_and(|t| t.ends_with(&format!(".{name}")))
    })
}
