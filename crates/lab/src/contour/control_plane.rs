//! Contour and the API server it watches ([`ControlPlane`]): started with Contour's CRDs and
//! the gateway plan's objects applied, ready once Contour serves xDS (it listens only once it
//! has built its first configuration from them); the Envoy bootstrap `contour bootstrap`
//! writes, and Envoy's command line on it; Contour's own status of each HTTPProxy; whether
//! Contour still runs. Every wait here looks at the caller's stop.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use meshbench_k8s::objects::contour::{self, NotTaken};
use meshbench_results::{Role, Stop};
use serde_json::{json, Value};

use super::{binary, crds, unavailable, ContourError, NAMESPACE};
use crate::cgroup::Cgroup;
use crate::kube::ApiServer;
use crate::process::{accepts, Placement, RoleProcess};
use crate::program::{envoy, Run};
use crate::sampler::Watch;
use crate::{go_on, write_file, LabError};

/// How long Contour may take to build its first configuration and serve it.
const CONTOUR_WITHIN: Duration = Duration::from_secs(60);
/// How long Contour may take to write its status on every HTTPProxy once Envoy holds them,
/// beside [`STATUS_EACH`] per HTTPProxy: its Kubernetes client writes them one by one, at a
/// bounded rate.
const STATUS_WITHIN: Duration = Duration::from_secs(30);
/// What each HTTPProxy's status adds to [`STATUS_WITHIN`] (client-go's default rate is 5 a
/// second).
const STATUS_EACH: Duration = Duration::from_millis(200);
/// How long `contour bootstrap` (which only writes a file) may take.
const BOOTSTRAP_WITHIN: Duration = Duration::from_secs(30);
/// The service cluster Envoy names itself with (Contour's manifests pass its namespace).
const SERVICE_CLUSTER: &str = "meshbench";

/// Contour and the API server it watches; everything stops when dropped.
pub struct ControlPlane {
    pub api: ApiServer,
    /// Where Contour serves xDS (plain gRPC on loopback: `--insecure`).
    pub xds: SocketAddr,
    /// From applying the plan's objects until they were applied.
    pub applied_in: Duration,
    /// From Contour's start until it served xDS.
    pub contour_ready_in: Duration,
    contour: RoleProcess,
    /// Its cgroup (`limits.control_plane`), removed after Contour stops.
    cgroup: Option<Cgroup>,
}

impl ControlPlane {
    /// Starts the API server in `dir`, applies Contour's CRDs and `objects` (in order), and
    /// starts Contour with its TLS listener at `https` (the gateway's address); returns once
    /// Contour serves xDS. A `stop` ends the start within a second ([`LabError::Stopped`];
    /// what started is stopped).
    pub fn start(
        dir: &Path,
        objects: &[PathBuf],
        https: SocketAddr,
        cgroup: Option<Cgroup>,
        stop: &Stop,
    ) -> Result<ControlPlane, LabError> {
        if let Some(e) = unavailable() {
            return Err(e);
        }
        let api = ApiServer::start_with_crds(dir, &crds(), stop)?;
        go_on(stop)?;
        let began = Instant::now();
        api.apply_files(objects)?;
        let applied_in = began.elapsed();
        go_on(stop)?;

        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let free = || crate::port::free_port();
        let xds = SocketAddr::new(loopback, free()?);
        let mut cmd = Command::new(binary());
        cmd.current_dir(dir)
            .arg("serve")
            .arg(format!("--kubeconfig={}", api.kubeconfig.display()))
            .arg("--insecure")
            .arg("--disable-leader-election")
            .arg(format!("--xds-address={}", xds.ip()))
            .arg(format!("--xds-port={}", xds.port()))
            .arg(format!("--envoy-service-https-address={}", https.ip()))
            .arg(format!("--envoy-service-https-port={}", https.port()));
        // Every other server Contour starts or has Envoy start: loopback, a free port each.
        for (address, port) in [
            ("--http-address", "--http-port"),
            ("--health-address", "--health-port"),
            ("--debug-http-address", "--debug-http-port"),
            ("--stats-address", "--stats-port"),
            ("--envoy-service-http-address", "--envoy-service-http-port"),
        ] {
            cmd.arg(format!("{address}={loopback}"))
                .arg(format!("{port}={}", free()?));
        }
        let began = Instant::now();
        let place = Placement {
            cgroup: cgroup.as_deref(),
            ..Placement::default()
        };
        let mut contour = RoleProcess::spawn("contour", cmd, &dir.join("contour.log"), &place)?;
        contour.wait_listening(xds, CONTOUR_WITHIN, &accepts, stop)?;
        Ok(ControlPlane {
            api,
            xds,
            applied_in,
            contour_ready_in: began.elapsed(),
            contour,
            cgroup,
        })
    }

    /// Envoy's command line on the bootstrap `contour bootstrap` writes into `dir`, its admin
    /// moved from Contour's unix socket to `admin` ([`admin_over_tcp`]), with `workers`
    /// worker threads and the service cluster and node Contour's manifests give it.
    pub fn envoy_command(
        &self,
        dir: &Path,
        admin: SocketAddr,
        workers: u32,
    ) -> Result<Command, LabError> {
        std::fs::create_dir_all(dir).map_err(|e| LabError::Files {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let written = dir.join("contour-bootstrap.json");
        let mut cmd = Command::new(binary());
        cmd.arg("bootstrap")
            .arg(&written)
            .arg(format!("--xds-address={}", self.xds.ip()))
            .arg(format!("--xds-port={}", self.xds.port()))
            .arg(format!(
                "--admin-address={}",
                dir.join("admin.sock").display()
            ))
            .arg(format!("--namespace={NAMESPACE}"));
        let output = crate::process::output_within(cmd, BOOTSTRAP_WITHIN)
            .map_err(|e| LabError::Spawn("contour bootstrap".into(), e))?
            .ok_or_else(|| {
                ContourError::Bootstrap(format!(
                    "did not end within {} s",
                    BOOTSTRAP_WITHIN.as_secs()
                ))
            })?;
        if !output.status.success() {
            return Err(ContourError::Bootstrap(format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
            .into());
        }
        let text = std::fs::read_to_string(&written).map_err(|e| LabError::Files {
            path: written.clone(),
            source: e,
        })?;
        let mut bootstrap: Value = serde_json::from_str(&text)
            .map_err(|e| ContourError::Bootstrap(format!("{}: {e}", written.display())))?;
        let moved = admin_over_tcp(&mut bootstrap, admin);
        if moved == 0 {
            return Err(ContourError::Bootstrap(format!(
                "{} has no admin socket to move",
                written.display()
            ))
            .into());
        }
        let config = write_file(dir.join("envoy.json"), bootstrap.to_string())?;
        let run = Run {
            config: &config,
            dir,
            name: "gateway",
            workers,
        };
        let mut cmd = envoy::command(&envoy::binary()?, &run);
        cmd.current_dir(dir).args([
            "--service-cluster",
            SERVICE_CLUSTER,
            "--service-node",
            "gateway",
        ]);
        Ok(cmd)
    }

    /// Waits until Contour has taken each of the `expected` HTTPProxies in [`NAMESPACE`]
    /// (the rule a cluster's Contour is judged by too,
    /// [`meshbench_k8s::objects::contour::wait_taken`]); those it did not take are
    /// [`ContourError::NotValid`], each as `name: status, description`. A `stop` ends the
    /// wait ([`LabError::Stopped`]).
    pub fn await_valid(&self, expected: usize, stop: &Stop) -> Result<(), LabError> {
        let within = STATUS_WITHIN + STATUS_EACH * expected as u32;
        let polls = (within, Duration::from_millis(200));
        match contour::wait_taken(&self.api.client, NAMESPACE, expected, polls, stop) {
            Ok(()) => Ok(()),
            Err(NotTaken::Api(e)) => Err(e.into()),
            Err(NotTaken::Refused(refused)) => Err(ContourError::NotValid(refused).into()),
            Err(NotTaken::TimedOut { not_valid, .. }) => {
                Err(ContourError::NotValid(not_valid).into())
            }
            Err(NotTaken::Stopped) => Err(LabError::Stopped),
        }
    }

    /// What the sampler reads of Contour: its process group's CPU and memory (it has no
    /// port on any request's path).
    pub fn watch(&self) -> Watch {
        Watch {
            role: Role::Contour,
            pgid: self.contour.pid(),
            cgroup: self.cgroup.as_ref().map(Cgroup::files),
            port: None,
            upstream_port: None,
            veth: None,
        }
    }

    /// Whether Contour still runs (why not, if it stopped).
    pub fn contour_exited(&mut self) -> Option<String> {
        self.contour
            .exited()
            .map(|s| format!("contour exited ({s}): {}", self.contour.log_tail(5)))
    }

    /// Asks Contour, the API server and etcd to end, without waiting
    /// ([`RoleProcess::terminate`]); dropping the control plane then waits for them.
    pub fn terminate(&self) {
        self.contour.terminate();
        self.api.terminate();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Moves every address of `bootstrap` that is Contour's admin socket (`pipe`: the admin
/// itself, and the `envoy-admin` cluster its stats listener reaches the admin through) to
/// `admin` on TCP; returns how many it moved.
pub fn admin_over_tcp(bootstrap: &mut Value, admin: SocketAddr) -> usize {
    match bootstrap {
        Value::Object(map) => {
            if map.contains_key("pipe") && map.len() == 1 {
                *bootstrap = json!({"socket_address": {
                    "address": admin.ip().to_string(),
                    "port_value": admin.port(),
                }});
                return 1;
            }
            map.values_mut().map(|v| admin_over_tcp(v, admin)).sum()
        }
        Value::Array(items) => items.iter_mut().map(|v| admin_over_tcp(v, admin)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_socket_moves_to_tcp_wherever_the_bootstrap_names_it() {
        let pipe = json!({"pipe": {"path": "/x/admin.sock", "mode": 420}});
        let mut bootstrap = json!({
            "admin": {"address": pipe.clone()},
            "static_resources": {"clusters": [
                {"name": "contour", "load_assignment": {"endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8001}}}}]}]}},
                {"name": "envoy-admin", "load_assignment": {"endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": pipe}}]}]}}
            ]}
        });
        let admin: SocketAddr = "127.0.0.1:15000".parse().unwrap();
        assert_eq!(admin_over_tcp(&mut bootstrap, admin), 2);
        let tcp = json!({"socket_address": {"address": "127.0.0.1", "port_value": 15000}});
        assert_eq!(bootstrap["admin"]["address"], tcp);
        let clusters = &bootstrap["static_resources"]["clusters"];
        let address = |i: usize| {
            &clusters[i]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
                ["address"]
        };
        assert_eq!(address(1), &tcp);
        assert_eq!(
            address(0)["socket_address"]["port_value"],
            8001,
            "xDS stays"
        );
    }
}
