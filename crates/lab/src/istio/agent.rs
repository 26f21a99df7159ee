//! pilot-agent's command line for either role (the gateway, a pod's sidecar): the identity a
//! pod has mounted written where the agent reads it, Envoy wrapped to die with its agent, and
//! the ProxyConfig that points it at istiod.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;

use super::{cache, ControlPlane, CLUSTER_ID, GATEWAY_POD, GATEWAY_SERVICE_ACCOUNT, NAMESPACE};
use crate::{write_file, LabError};

impl ControlPlane {
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
        // Attribution's lines are read right after each step (Envoy's default flush: 10 s).
        let proxy_config = if self.mesh.attribution {
            format!(
                "{proxy_config}fileFlushInterval: {}\n",
                crate::program::envoy::access_log::ISTIO_FLUSH_INTERVAL
            )
        } else {
            proxy_config
        };
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
