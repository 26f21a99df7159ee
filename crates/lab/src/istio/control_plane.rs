//! istiod and the API server it watches ([`ControlPlane`]): started with Istio's CRDs, its
//! namespace and the gateway's ServiceAccount, ready once istiod has published the mesh's root
//! certificate; its metrics, whether it still runs, and the time one route change takes to
//! reach a gateway's Envoy. Every wait here looks at the caller's stop.
//!
//! The mesh configuration is Istio's defaults, and with per-hop attribution on
//! ([`MeshOptions`]) attribution's access-log provider, named by a `Telemetry` in Istio's root
//! namespace applied once istiod is ready, before any agent starts: every proxy istiod
//! configures then logs the engine's tagged requests (`program::envoy::access_log`).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use meshbench_k8s::k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use meshbench_k8s::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_k8s::objects::istio::{HttpMatch, HttpRoute, MeshConfig, StringMatch};
use meshbench_results::{Role, Stop};

use super::{
    cache, objects, unavailable, ApiServer, IstioError, CLUSTER_ID, GATEWAY_SERVICE_ACCOUNT,
    ISTIOD_ENV, NAMESPACE,
};
use crate::cgroup::Cgroup;
use crate::process::{Placement, RoleProcess};
use crate::program::envoy::access_log;
use crate::program::envoy::admin::{self, DumpSection};
use crate::sampler::Watch;
use crate::{go_on, write_file, LabError};

/// The ConfigMap istiod publishes the mesh's root certificate in, in every namespace, and
/// its key.
const ROOT_CERT_CONFIG_MAP: &str = "istio-ca-root-cert";
const ROOT_CERT_KEY: &str = "root-cert.pem";
/// What the lab asks of the mesh beyond Istio's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeshOptions {
    /// Per-hop attribution: every proxy logs the engine's tagged requests.
    pub attribution: bool,
}

impl MeshOptions {
    /// istiod's mesh configuration: Istio's defaults, and attribution's provider when on.
    fn mesh_config(&self) -> MeshConfig {
        MeshConfig {
            extension_providers: if self.attribution {
                vec![access_log::istio_provider()]
            } else {
                Vec::new()
            },
        }
    }
}
/// How long istiod may take to become ready and to publish the mesh's root certificate.
const ISTIOD_WITHIN: Duration = Duration::from_secs(60);
/// How long one look at istiod's readiness may take: the wait looks at its stop between two.
const ONE_LOOK: Duration = Duration::from_millis(500);

/// Whether istiod says it is ready: its plain HTTP endpoint (`--httpAddr`) answers `GET
/// /ready` with 200 within [`ONE_LOOK`]. istiod is not Envoy: this one probe is its only
/// reader.
fn istiod_ready(http: SocketAddr) -> bool {
    istiod_reader(ONE_LOOK)
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
    /// What the mesh was started with (the agents' ProxyConfig follows it).
    pub mesh: MeshOptions,
    istiod: RoleProcess,
    /// Its cgroup (`limits.control_plane`), removed after istiod stops.
    cgroup: Option<Cgroup>,
}

impl ControlPlane {
    /// Starts the API server and istiod in `dir`, with Istio's CRDs, its namespace and the
    /// gateway's ServiceAccount; returns once istiod is ready and has published its root.
    /// istiod serves its agents (xDS and the CA) on `agents_reach`: loopback for a gateway on
    /// this machine's loopback, the node's side of a pod's veth for sidecars in pods. A
    /// `stop` ends the start within a second ([`LabError::Stopped`]; what started is stopped).
    pub fn start(
        dir: &Path,
        agents_reach: IpAddr,
        mesh: MeshOptions,
        cgroup: Option<Cgroup>,
        stop: &Stop,
    ) -> Result<ControlPlane, LabError> {
        Self::start_with(dir, agents_reach, ISTIOD_ENV, mesh, cgroup, stop)
    }

    /// As [`start`](Self::start), with `istiod_env` in place of [`ISTIOD_ENV`] (`&[]`:
    /// Istio's defaults, which upstream Envoy refuses in part: docs/istio.md).
    pub fn start_with(
        dir: &Path,
        agents_reach: IpAddr,
        istiod_env: &[(&str, &str)],
        mesh: MeshOptions,
        cgroup: Option<Cgroup>,
        stop: &Stop,
    ) -> Result<ControlPlane, LabError> {
        if let Some(e) = unavailable() {
            return Err(e);
        }
        let api = ApiServer::start_with_crds(dir, &cache().join("crd-all.gen.yaml"), stop)?;
        go_on(stop)?;
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
        go_on(stop)?;

        let free = || crate::port::free_port().map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
        let (grpc, http, https, monitoring) = (free()?, free()?, free()?, free()?);
        let secure_grpc = SocketAddr::new(agents_reach, crate::port::free_port()?);
        let istiod_dir = dir.join("istiod");
        let mesh_yaml = serde_yaml_ng::to_string(&mesh.mesh_config())
            .map_err(|e| LabError::from(IstioError::MeshConfig(e.to_string())))?;
        let mesh_file = write_file(istiod_dir.join("mesh.yaml"), mesh_yaml)?;
        let addrs = IstiodAddrs {
            grpc,
            secure_grpc,
            http,
            https,
            monitoring,
        };
        let mut cmd = istiod_command(&istiod_dir, &api.kubeconfig, &mesh_file, &addrs);
        cmd.envs(istiod_env.iter().copied());
        let began = Instant::now();
        let place = Placement {
            cgroup: cgroup.as_deref(),
            ..Placement::default()
        };
        let mut istiod = RoleProcess::spawn("istiod", cmd, &dir.join("istiod.log"), &place)?;
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
            if !stop.sleep(Duration::from_millis(200)) {
                return Err(LabError::Stopped);
            }
        };
        // Once istiod is ready its CRDs are served; before any agent starts, so that every
        // proxy's first configuration has the log.
        if mesh.attribution {
            api.client
                .apply_typed(&access_log::istio_telemetry(NAMESPACE))?;
        }
        Ok(ControlPlane {
            api,
            secure_grpc,
            grpc,
            monitoring,
            root_cert,
            istiod_ready_in: began.elapsed(),
            mesh,
            istiod,
            cgroup,
        })
    }

    /// istiod's process (group leader), for the sampler.
    pub fn istiod_pid(&self) -> u32 {
        self.istiod.pid()
    }

    /// What the sampler reads of istiod: its process group's CPU and memory (it has no port
    /// on any request's path).
    pub fn watch(&self) -> Watch {
        Watch {
            role: Role::Istiod,
            pgid: self.istiod_pid(),
            cgroup: self.cgroup.as_ref().map(Cgroup::files),
            port: None,
            upstream_port: None,
            veth: None,
        }
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

    /// Asks istiod, the API server and etcd to end, without waiting
    /// ([`RoleProcess::terminate`]); dropping the control plane then waits for them.
    pub fn terminate(&self) {
        self.istiod.terminate();
        self.api.terminate();
    }

    /// Whether istiod still runs (why not, if it stopped).
    pub fn istiod_exited(&mut self) -> Option<String> {
        self.istiod
            .exited()
            .map(|s| format!("istiod exited ({s}): {}", self.istiod.log_tail(5)))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // All three asked at once; the fields' drops then wait for each (the API server, etcd,
        // istiod), overlapping.
        self.terminate();
    }
}

/// The path of the route [`ControlPlane::time_route_change`] adds.
pub const PROBE_PATH: &str = "/meshbench-push-probe";

impl ControlPlane {
    /// istiod's push time for one change, as a user makes one: one more exact-path route on
    /// the first VirtualService of `virtual_services` (a file the lab applied), from the apply
    /// until the gateway's Envoy (admin at `admin`) serves it, read from the one route
    /// configuration that holds it. The route stays (nothing sends to it). A `stop` ends the
    /// wait ([`LabError::Stopped`]).
    pub fn time_route_change(
        &self,
        admin: SocketAddr,
        virtual_services: &Path,
        limit: Duration,
        stop: &Stop,
    ) -> Result<Duration, LabError> {
        let text = std::fs::read_to_string(virtual_services).map_err(|e| LabError::Files {
            path: virtual_services.to_path_buf(),
            source: e,
        })?;
        let mut changed = objects::parse_all::<objects::VirtualService>(&text)
            .ok()
            .and_then(|all| all.into_iter().next())
            .ok_or_else(|| IstioError::NoVirtualService(virtual_services.to_path_buf()))?;
        let domain = changed.spec.hosts.first().cloned().unwrap_or_default();
        if let Some(template) = changed.spec.http.first() {
            let probe = HttpRoute {
                matches: vec![HttpMatch {
                    uri: StringMatch::exact(PROBE_PATH),
                }],
                ..template.clone()
            };
            changed.spec.http.push(probe);
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
        self.api.client.apply_custom(&changed)?;
        loop {
            if served() {
                return Ok(began.elapsed());
            }
            if began.elapsed() > limit {
                return Err(IstioError::RouteChangeNotServed { domain, limit }.into());
            }
            if !stop.sleep(Duration::from_millis(10)) {
                return Err(LabError::Stopped);
            }
        }
    }
}
