//! `gateway.type: istio` and `proxy.type: istio`: the gateway and the sidecars as Istio runs
//! them. Envoy takes its listeners, routes, clusters and certificates from istiod over ADS, not
//! from a file this project wrote. This is Istio's one home: the lab's rig, the control-plane
//! cost experiment (`crate::control_plane_cost`) and the runner's cluster all use it. The
//! sidecars' pods are [`sidecars`], Istio's objects for the gateway plan [`objects`], the API
//! server [`api_server`], readiness and the one wait for Envoy's ACK [`ready`].
//!
//! The control plane ([`ControlPlane`]) is the smallest one istiod runs against. It has etcd
//! and a kube-apiserver ([`api_server::ApiServer`]) with Istio's CRDs, and istiod (`pilot-discovery`)
//! on loopback. Both are built by scripts/install-k8s.sh and scripts/install-istio.sh. The
//! gateway role is `pilot-agent proxy router`, with the identity a pod would have mounted: a
//! ServiceAccount token and the mesh's root certificate. The agent gets its workload
//! certificate from istiod's CA and starts the project's upstream Envoy. Its CPU and memory are
//! the role's, agent and Envoy together, as the `istio-proxy` container's are in a pod. The
//! generated objects are applied before the agent starts. The role counts as started only once
//! Envoy has accepted all of them ([`ready::wait_agent_acked`]).
//!
//! Upstream Envoy has none of Istio's own filters, so istiod runs with [`ISTIOD_ENV`]
//! (docs/istio.md lists what Envoy refuses otherwise). Every server binds loopback, except
//! istiod's port for the agents, which pods reach on the node's side of a veth. The Gateway
//! binds its servers to the hop's address, not to Istio's wildcard (`servers[].bind`).

pub mod api_server;
pub mod objects;
pub mod ready;
pub mod sidecars;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use meshbench_k8s::k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use meshbench_k8s::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};

use crate::process::{Placement, RoleProcess};
use crate::program::envoy::admin::{self, DumpSection};
use crate::{write_file, LabError};
pub use api_server::ApiServer;

/// The istio.io/istio pseudo-version scripts/install-istio.sh builds.
pub const VERSION: &str = "v0.0.0-20260827124520-eed52ebb66ad";
/// The Kubernetes release scripts/install-k8s.sh builds.
pub const K8S_VERSION: &str = "v1.34.2";
/// Istio's own namespace: istiod, the gateway, its Secrets and the routes.
pub const NAMESPACE: &str = "istio-system";
/// The Kubernetes cluster id istiod and the proxy agree on.
pub const CLUSTER_ID: &str = "Kubernetes";
/// How the gateway identifies itself: its pod and its ServiceAccount.
pub const GATEWAY_POD: &str = "istio-ingressgateway-0";
pub const GATEWAY_SERVICE_ACCOUNT: &str = "istio-ingressgateway";
/// istiod's environment: upstream Envoy refuses clusters and listeners that carry Istio's
/// metadata exchange filters, and listeners that carry its ALPN filter.
pub const ISTIOD_ENV: &[(&str, &str)] = &[
    ("PILOT_ENABLE_ALPN_FILTER", "false"),
    ("PILOT_ENABLE_METADATA_EXCHANGE", "false"),
];
/// The ConfigMap istiod publishes the mesh's root certificate in, in every namespace, and
/// its key.
const ROOT_CERT_CONFIG_MAP: &str = "istio-ca-root-cert";
const ROOT_CERT_KEY: &str = "root-cert.pem";
/// The mesh configuration: Istio's defaults.
const MESH: &str = "{}\n";
/// How long istiod may take to become ready and to publish the mesh's root certificate.
const ISTIOD_WITHIN: Duration = Duration::from_secs(60);
const INSTALL_HINT: &str = "run scripts/install-istio.sh (istiod and pilot-agent from istio.io/istio) and scripts/install-k8s.sh (etcd and kube-apiserver)";

/// What went wrong in Istio's parts, beyond starting a process ([`LabError`] says that).
#[derive(Debug, thiserror::Error)]
pub enum IstioError {
    #[error("Istio's sidecars run in pods: use isolation: netns")]
    NeedsNetns,
    /// A part was asked to start before its control plane (a bug of the caller's order).
    #[error("{0} started without its control plane")]
    NoControlPlane(&'static str),
    #[error("the Istio gateway has no admin port")]
    NoAdminPort,
    /// istiod ended: its status and the tail of its output.
    #[error("{0}")]
    IstiodExited(String),
    #[error("istiod's metrics at {at}: {reason}")]
    IstiodMetrics { at: SocketAddr, reason: String },
    #[error("the probe request to {url}: {source}")]
    Probe {
        url: String,
        source: Box<ureq::Error>,
    },
    #[error("the probe request through Istio's sidecars answered {0}")]
    ProbeStatus(u16),
    /// The probe passed, but a sidecar's own counters did not see it.
    #[error("the probe request answered 200, but {role}'s Envoy did not count it ({why})")]
    ProbeUncounted {
        role: meshbench_results::ChainRole,
        why: String,
    },
    #[error("{}: no VirtualService", .0.display())]
    NoVirtualService(PathBuf),
    #[error("{PROBE_PATH} is already routed")]
    AlreadyRouted,
    #[error("istiod's change (a route on {domain}) did not reach Envoy within {} s", .limit.as_secs())]
    RouteChangeNotServed { domain: String, limit: Duration },
    /// Istio's objects could not be written as YAML.
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
}

/// Where scripts/install-istio.sh puts what it builds and extracts (`$ISTIO_CACHE` if set).
pub fn cache() -> PathBuf {
    std::env::var_os("ISTIO_CACHE").map_or_else(
        || PathBuf::from(format!("/var/cache/meshbench/istio/{VERSION}")),
        PathBuf::from,
    )
}

/// Where scripts/install-k8s.sh puts the Kubernetes binaries (`$K8S_CACHE/bin` if set).
pub fn k8s_bin() -> PathBuf {
    std::env::var_os("K8S_CACHE")
        .map_or_else(
            || PathBuf::from(format!("/var/cache/meshbench/k8s/{K8S_VERSION}")),
            PathBuf::from,
        )
        .join("bin")
}

/// What the Istio gateway needs that is not installed here, as one error naming it all and
/// the scripts that install it; None when everything is there.
pub fn unavailable() -> Option<LabError> {
    let cache = cache();
    let mut missing: Vec<String> = [
        "bin/pilot-discovery",
        "bin/pilot-agent",
        "crd-all.gen.yaml",
        "envoy_bootstrap_tmpl.json",
    ]
    .iter()
    .map(|f| cache.join(f))
    .chain([k8s_bin().join("kube-apiserver")])
    .filter(|p| !p.is_file())
    .map(|p| p.display().to_string())
    .collect();
    if crate::install::find("etcd", &["/usr/bin/etcd"]).is_none() {
        missing.push("etcd".into());
    }
    if let Err(e) = crate::program::envoy::binary() {
        missing.push(format!("envoy ({e})"));
    }
    (!missing.is_empty()).then(|| LabError::Missing {
        program: "istio".into(),
        hint: format!("missing {}; {INSTALL_HINT}", missing.join(", ")),
    })
}

/// `pilot-agent version -s`, or why it could not be read.
pub fn version() -> String {
    let agent = cache().join("bin/pilot-agent");
    Command::new(&agent)
        .args(["version", "-s"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| format!("istio {}", String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| format!("istio {VERSION} ({} did not answer)", agent.display()))
}

/// Whether istiod says it is ready: its plain HTTP endpoint (`--httpAddr`) answers `GET
/// /ready` with 200, within a second to connect and [`ISTIOD_WITHIN`] in all. istiod is not
/// Envoy: this one probe is its only reader.
fn istiod_ready(http: SocketAddr) -> bool {
    istiod_reader(ISTIOD_WITHIN)
        .get(format!("http://{http}/ready"))
        .call()
        .is_ok_and(|answer| answer.status() == 200)
}

/// The one HTTP reader of istiod's plain endpoints (`/ready`, `/metrics`): a second to
/// connect, `within` in all, a status that is not 200 left to the caller.
fn istiod_reader(within: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(1)))
        .timeout_global(Some(within))
        .http_status_as_error(false)
        .user_agent("meshbench")
        .build()
        .into()
}

/// Where istiod serves: plain xDS (Istio's 15010), authenticated xDS and the CA (15012),
/// `/ready` (`--httpAddr`), the webhooks (15017) and its own metrics.
#[derive(Debug, Clone, Copy)]
pub struct IstiodAddrs {
    pub grpc: SocketAddr,
    pub secure_grpc: SocketAddr,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub monitoring: SocketAddr,
}

/// istiod (`pilot-discovery discovery`) in `cwd`, watching the API server `kubeconfig` names,
/// with the mesh configuration `mesh`, as `istiod-0` in Istio's namespace; the caller adds the
/// environment that tunes it ([`ISTIOD_ENV`]).
pub fn istiod_command(cwd: &Path, kubeconfig: &Path, mesh: &Path, at: &IstiodAddrs) -> Command {
    let mut cmd = Command::new(cache().join("bin/pilot-discovery"));
    cmd.current_dir(cwd)
        .arg("discovery")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--meshConfig={}", mesh.display()))
        .arg(format!("--grpcAddr={}", at.grpc))
        .arg(format!("--secureGRPCAddr={}", at.secure_grpc))
        .arg(format!("--httpAddr={}", at.http))
        .arg(format!("--httpsAddr={}", at.https))
        .arg(format!("--monitoringAddr={}", at.monitoring))
        .arg(format!("--clusterID={CLUSTER_ID}"))
        .arg("--keepaliveMaxServerConnectionAge=30m")
        .env("POD_NAMESPACE", NAMESPACE)
        .env("POD_NAME", "istiod-0")
        .env("KUBECONFIG", kubeconfig);
    cmd
}

/// istiod and the API server it watches; everything stops when dropped.
pub struct ControlPlane {
    pub api: ApiServer,
    /// Authenticated xDS and the CA (Istio's 15012).
    pub secure_grpc: SocketAddr,
    /// Plain xDS on loopback (Istio's 15010), which the simulated proxies use.
    pub grpc: SocketAddr,
    /// istiod's own metrics (`/metrics`, Prometheus text).
    pub monitoring: SocketAddr,
    /// The mesh's root certificate, as istiod publishes it (`istio-ca-root-cert`).
    pub root_cert: String,
    /// How long istiod took to become ready.
    pub istiod_ready_in: Duration,
    istiod: RoleProcess,
}

impl ControlPlane {
    /// Starts the API server and istiod in `dir`, with Istio's CRDs, its namespace and the
    /// gateway's ServiceAccount; returns once istiod is ready and has published its root.
    /// istiod serves its agents (xDS and the CA) on `agents_reach`: loopback for a gateway on
    /// this machine's loopback, the node's side of a pod's veth for sidecars in pods.
    pub fn start(dir: &Path, agents_reach: IpAddr) -> Result<ControlPlane, LabError> {
        Self::start_with(dir, agents_reach, ISTIOD_ENV)
    }

    /// As [`start`](Self::start), with `istiod_env` in place of [`ISTIOD_ENV`] (`&[]`:
    /// Istio's defaults, which upstream Envoy refuses in part: docs/istio.md).
    pub fn start_with(
        dir: &Path,
        agents_reach: IpAddr,
        istiod_env: &[(&str, &str)],
    ) -> Result<ControlPlane, LabError> {
        if let Some(e) = unavailable() {
            return Err(e);
        }
        std::fs::create_dir_all(dir).map_err(|e| LabError::Files {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let api = ApiServer::start(dir, &k8s_bin())?;
        api.apply_files(&[cache().join("crd-all.gen.yaml")])?;
        api.client.apply_typed(&Namespace {
            metadata: ObjectMeta {
                name: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        })?;
        api.client.apply_typed(&ServiceAccount {
            metadata: ObjectMeta {
                name: Some(GATEWAY_SERVICE_ACCOUNT.into()),
                namespace: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        })?;

        let free = || crate::port::free_port().map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
        let (grpc, http, https, monitoring) = (free()?, free()?, free()?, free()?);
        let secure_grpc = SocketAddr::new(agents_reach, crate::port::free_port()?);
        let istiod_dir = dir.join("istiod");
        let mesh = write_file(istiod_dir.join("mesh.yaml"), MESH)?;
        let addrs = IstiodAddrs {
            grpc,
            secure_grpc,
            http,
            https,
            monitoring,
        };
        let mut cmd = istiod_command(&istiod_dir, &api.kubeconfig, &mesh, &addrs);
        cmd.envs(istiod_env.iter().copied());
        let began = Instant::now();
        let mut istiod = RoleProcess::spawn(
            "istiod",
            cmd,
            &dir.join("istiod.log"),
            &Placement::default(),
        )?;
        let deadline = began + ISTIOD_WITHIN;
        let root_cert = loop {
            if istiod_ready(http) {
                let published = api
                    .client
                    .get::<ConfigMap>(NAMESPACE, ROOT_CERT_CONFIG_MAP)?
                    .and_then(|cm| cm.data?.remove(ROOT_CERT_KEY));
                if let Some(pem) = published {
                    break pem;
                }
            }
            if let Some(status) = istiod.exited() {
                return Err(LabError::BadConfig {
                    server: "istiod".into(),
                    config: None,
                    log: format!("exited ({status}): {}", istiod.log_tail(5)),
                });
            }
            if Instant::now() > deadline {
                return Err(LabError::NotReady {
                    server: "istiod",
                    awaiting: " with its root certificate",
                    within: ISTIOD_WITHIN,
                    log: istiod.log_tail(5),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        Ok(ControlPlane {
            api,
            secure_grpc,
            grpc,
            monitoring,
            root_cert,
            istiod_ready_in: began.elapsed(),
            istiod,
        })
    }

    /// istiod's process (group leader), for the sampler.
    pub fn istiod_pid(&self) -> u32 {
        self.istiod.pid()
    }

    /// istiod's own metrics now, as Prometheus text.
    pub fn istiod_metrics(&self) -> Result<String, LabError> {
        let failed = |reason: String| {
            LabError::from(IstioError::IstiodMetrics {
                at: self.monitoring,
                reason,
            })
        };
        let mut answer = istiod_reader(Duration::from_secs(10))
            .get(format!("http://{}/metrics", self.monitoring))
            .call()
            .map_err(|e| failed(e.to_string()))?;
        if answer.status() != 200 {
            return Err(failed(format!("status {}", answer.status())));
        }
        answer
            .body_mut()
            .read_to_string()
            .map_err(|e| failed(e.to_string()))
    }

    /// Whether istiod still runs (why not, if it stopped).
    pub fn istiod_exited(&mut self) -> Option<String> {
        self.istiod
            .exited()
            .map(|s| format!("istiod exited ({s}): {}", self.istiod.log_tail(5)))
    }

    /// The gateway's command: `pilot-agent proxy router` in `dir` (its working directory),
    /// Envoy's admin endpoint at `admin`, `workers` Envoy worker threads, every port of the
    /// agent a free one on loopback.
    pub fn gateway_command(
        &self,
        dir: &Path,
        admin: SocketAddr,
        workers: u32,
    ) -> Result<Command, LabError> {
        let free = crate::port::free_port;
        let ports = AgentPorts {
            admin: admin.port(),
            status: free()?,
            envoy_status: free()?,
            prometheus: free()?,
        };
        let gateway = Workload {
            namespace: NAMESPACE,
            pod: GATEWAY_POD,
            service_account: GATEWAY_SERVICE_ACCOUNT,
            ip: admin.ip(),
            labels: r#"{"istio":"ingressgateway","app":"istio-ingressgateway"}"#.into(),
        };
        self.agent_command(AgentRole::Gateway, &gateway, dir, ports, workers)
    }

    /// pilot-agent for `workload` in `dir`, its working directory: there it reads the identity
    /// a pod has mounted (a ServiceAccount token for audience `istio-ca` and the mesh's root
    /// certificate, written here) and writes Envoy's bootstrap. It gets its workload
    /// certificate from istiod's CA and starts the project's Envoy with `workers` threads.
    /// Every path it is given is relative to `dir`, so that a sidecar running as Istio's proxy
    /// user (1337) needs no access to the directories above it.
    pub fn agent_command(
        &self,
        role: AgentRole,
        workload: &Workload,
        dir: &Path,
        ports: AgentPorts,
        workers: u32,
    ) -> Result<Command, LabError> {
        let token = self
            .api
            .token(workload.namespace, workload.service_account, "istio-ca")?;
        // Where pilot-agent reads them by default, relative to its working directory.
        write_file(
            dir.join("var/run/secrets/istio/root-cert.pem"),
            &self.root_cert,
        )?;
        write_file(dir.join("var/run/secrets/tokens/istio-token"), token)?;
        std::fs::create_dir_all(dir.join("etc/istio/proxy")).map_err(|e| LabError::Files {
            path: dir.join("etc/istio/proxy"),
            source: e,
        })?;
        // pilot-agent does not tie Envoy's life to its own: through this wrapper Envoy dies
        // with the agent, so a run killed outright leaves no Envoy behind.
        let envoy = crate::program::envoy::binary()?;
        let wrapper = write_file(
            dir.join("envoy"),
            format!(
                "#!/bin/sh\nexec setpriv --pdeathsig KILL {} \"$@\"\n",
                envoy.display()
            ),
        )?;
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(|e| LabError::Files {
            path: wrapper.clone(),
            source: e,
        })?;
        // The stats the lab reads after each step, beside Istio's own inclusion list (which
        // has no request counts): the same prefixes the lab's own Envoy roles keep.
        let stats: Vec<String> = crate::program::envoy::admin::STATS_NEEDED
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect();
        // A ProxyConfig, as the mesh's `defaultConfig` or a pod's annotation sets it.
        let proxy_config = format!(
            "discoveryAddress: {}\nbinaryPath: ./envoy\nconfigPath: ./etc/istio/proxy\n\
             proxyBootstrapTemplatePath: {}\nproxyAdminPort: {}\nstatusPort: {}\n\
             concurrency: {}\ndrainDuration: 1s\nterminationDrainDuration: 1s\n\
             proxyStatsMatcher: {{inclusionPrefixes: [{}]}}\n",
            self.secure_grpc,
            cache().join("envoy_bootstrap_tmpl.json").display(),
            ports.admin,
            ports.status,
            workers.max(1),
            stats.join(", "),
        );
        let mut cmd = Command::new(cache().join("bin/pilot-agent"));
        cmd.current_dir(dir)
            .args([
                "proxy",
                role.word(),
                "--domain",
                &format!("{}.svc.cluster.local", workload.namespace),
                "--proxyLogLevel=warning",
                "--log_output_level=default:info",
            ])
            .env("PROXY_CONFIG", proxy_config)
            .env("POD_NAME", workload.pod)
            .env("POD_NAMESPACE", workload.namespace)
            .env("INSTANCE_IP", workload.ip.to_string())
            .env("SERVICE_ACCOUNT", workload.service_account)
            .env("ISTIO_META_CLUSTER_ID", CLUSTER_ID)
            .env("ISTIO_META_WORKLOAD_NAME", workload.service_account)
            .env("ISTIO_METAJSON_LABELS", &workload.labels)
            // istiod's serving certificate names its Service, not the address dialled.
            .env("ISTIOD_SAN", format!("istiod.{NAMESPACE}.svc"))
            .env("ENVOY_STATUS_PORT", ports.envoy_status.to_string())
            .env("ENVOY_PROMETHEUS_PORT", ports.prometheus.to_string());
        Ok(cmd)
    }
}

/// Which Envoy pilot-agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentRole {
    /// The ingress gateway (`pilot-agent proxy router`).
    Gateway,
    /// A pod's sidecar (`pilot-agent proxy sidecar`).
    Sidecar,
}

impl AgentRole {
    fn word(self) -> &'static str {
        match self {
            AgentRole::Gateway => "router",
            AgentRole::Sidecar => "sidecar",
        }
    }
}

/// Who an agent is, as its pod tells it: the pod, its namespace and ServiceAccount, its
/// address, and its labels as JSON (`ISTIO_METAJSON_LABELS`).
#[derive(Debug, Clone)]
pub struct Workload<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub service_account: &'a str,
    pub ip: IpAddr,
    pub labels: String,
}

/// The ports an agent and its Envoy listen on.
#[derive(Debug, Clone, Copy)]
pub struct AgentPorts {
    /// Envoy's admin (Istio's 15000), on the agent's loopback.
    pub admin: u16,
    /// The agent's status and health (15020).
    pub status: u16,
    /// Envoy's readiness (15021).
    pub envoy_status: u16,
    /// Envoy's merged Prometheus endpoint (15090).
    pub prometheus: u16,
}

impl AgentPorts {
    /// Istio's own ports, as a sidecar in its pod has them.
    pub const ISTIO: AgentPorts = AgentPorts {
        admin: 15000,
        status: 15020,
        envoy_status: 15021,
        prometheus: 15090,
    };
}

/// The path of the route [`ControlPlane::time_route_change`] adds.
pub const PROBE_PATH: &str = "/meshbench-push-probe";

impl ControlPlane {
    /// istiod's push time for one change, as a user makes one: one more exact-path route on
    /// the first VirtualService of `virtual_services` (a file the lab applied), from the apply
    /// until the gateway's Envoy (admin at `admin`) serves it, read from the one route
    /// configuration that holds it. The route stays (nothing sends to it).
    pub fn time_route_change(
        &self,
        admin: SocketAddr,
        virtual_services: &Path,
        limit: Duration,
    ) -> Result<Duration, LabError> {
        let text = std::fs::read_to_string(virtual_services).map_err(|e| LabError::Files {
            path: virtual_services.to_path_buf(),
            source: e,
        })?;
        let first = serde_yaml_ng::Deserializer::from_str(&text)
            .filter_map(|d| <Value as serde::Deserialize>::deserialize(d).ok())
            .find(|v| !v.is_null())
            .ok_or_else(|| IstioError::NoVirtualService(virtual_services.to_path_buf()))?;
        let domain = first["spec"]["hosts"][0]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut changed = first.clone();
        let template = first["spec"]["http"][0].clone();
        let mut probe = template;
        probe["match"] = json!([{"uri": {"exact": PROBE_PATH}}]);
        if let Some(routes) = changed["spec"]["http"].as_array_mut() {
            routes.push(probe);
        }
        let served = || -> bool {
            // The domain's own route configuration (its dots match themselves too).
            let name_regex = format!(".*{domain}.*");
            admin::config_dump(admin, DumpSection::DynamicRouteConfigs, Some(&name_regex))
                .map(|dump| dump.to_string().contains(PROBE_PATH))
                .unwrap_or(false)
        };
        if served() {
            return Err(IstioError::AlreadyRouted.into());
        }
        let began = Instant::now();
        self.api.apply(&changed)?;
        loop {
            if served() {
                return Ok(began.elapsed());
            }
            if began.elapsed() > limit {
                return Err(IstioError::RouteChangeNotServed { domain, limit }.into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
