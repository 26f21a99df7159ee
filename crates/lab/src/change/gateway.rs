//! A gateway changed under load, the way its users tell it: nginx by `nginx -s reload`,
//! haproxy by its master-worker reload (`SIGUSR2` to the master, which hands its listening
//! sockets to the new workers) or its plain one (a new process with `-sf`), caddy through its
//! admin API (`POST /load` with the Caddyfile), Envoy through file-based xDS (its listeners file
//! replaced by a rename, which Envoy watches for); a control plane's Envoy through its objects
//! on the API server the control plane reads (Istio's Gateways, VirtualServices and Secrets,
//! Contour's HTTPProxies), only those that differ applied. The configuration is rewritten first,
//! from the gateway plan with the change made ([`GatewayChanger`]).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::path::Path;

use meshbench_k8s::blocking::{documents, BlockingClient};
use meshbench_results::{
    ChangeKind, Configuration, ControlPlaneKind, HaproxyReload, Program, Standalone,
};
use serde_json::Value;

use crate::gateway::{self, GatewayPlan, Target};
use crate::pki::{Ca, Issued};
use crate::program::{caddy, envoy, haproxy, nginx};
use crate::LabError;

use super::{tell_failed, told_by, Changer, GatewayProbe, Probe, Relaunch, ServedWhen, Told};

/// A gateway's configuration as it was written: the plan, the CA that signed its domains and
/// the certificates issued (by file stem). A cluster run keeps one for all its steps, each
/// changed step changing a copy.
#[derive(Clone)]
pub struct Written {
    pub plan: GatewayPlan,
    pub ca: Arc<Ca>,
    pub certs: Vec<(String, Issued)>,
}

/// A gateway as the lab wrote and started it, ready to be changed: the plan its configuration
/// was written from (as changed so far), what signs its domains, and how it is told.
pub struct GatewayChanger {
    written: Written,
    /// Paths per domain before any change: a route change adds the one after them.
    paths: usize,
    /// Where a probe reaches the gateway.
    probe_at: std::net::SocketAddr,
    teller: Teller,
}

/// How a gateway is told of a change.
enum Teller {
    /// A program the lab configures: its files rewritten, then told its own way.
    Program {
        program: Standalone,
        /// The gateway's main process (nginx's and haproxy's master).
        pid: u32,
        bin: PathBuf,
        /// haproxy's plain reload: a new process started beside it (else its master-worker
        /// reload).
        relaunch: Option<Box<dyn Relaunch>>,
    },
    /// A control plane's Envoy: the objects that differ applied to the API server the control
    /// plane reads (istiod pushes, Contour translates).
    Objects(Box<Objects>),
}

/// The objects a control plane reads, as a change rewrites and applies them.
struct Objects {
    kind: ControlPlaneKind,
    api: BlockingClient,
    /// What writes them for a plan, and which of its files are applied (the rest is the lab's).
    target: Box<dyn Target>,
    files: Option<Vec<String>>,
    /// Every object as first applied, and as last applied, by its kind, namespace and name.
    first: BTreeMap<String, Value>,
    applied: BTreeMap<String, Value>,
}

impl Objects {
    /// Every object `target` renders for `plan` (its files rewritten), by kind, namespace and
    /// name.
    fn render(
        &self,
        plan: &GatewayPlan,
        certs: &[(String, Issued)],
    ) -> Result<BTreeMap<String, Value>, LabError> {
        let mut out = BTreeMap::new();
        for file in self.target.write(plan, certs)? {
            let name = file.file_name().map(|n| n.to_string_lossy().to_string());
            if let (Some(files), Some(name)) = (&self.files, name) {
                if !files.contains(&name) {
                    continue;
                }
            }
            let text = std::fs::read_to_string(&file).map_err(|source| LabError::Files {
                path: file.clone(),
                source,
            })?;
            for object in documents(&text)? {
                let at = |key: &str| object.pointer(key).and_then(Value::as_str).unwrap_or("");
                let name = format!(
                    "{}/{}/{}",
                    at("/kind"),
                    at("/metadata/namespace"),
                    at("/metadata/name")
                );
                out.insert(name, object);
            }
        }
        Ok(out)
    }
}

/// A gateway on a cluster, configured through objects a control plane reads.
pub struct OnCluster {
    /// Who reads them: istiod or Contour.
    pub kind: ControlPlaneKind,
    pub api: BlockingClient,
    /// What wrote them, and the files of it that were applied.
    pub target: Box<dyn Target>,
    pub files: Vec<String>,
    /// Where a probe reaches the gateway (a port-forward to its pod).
    pub probe_at: std::net::SocketAddr,
}

impl GatewayChanger {
    /// The gateway `program` written as `written` and started as process `pid`, its control
    /// plane (if it has one) reading the API server of `api`; `None` for a gateway meshbench
    /// does not change (a command; Envoy with its listeners in its bootstrap).
    pub fn new(
        program: Program,
        written: Written,
        pid: u32,
        api: Option<&Path>,
        relaunch: Option<Box<dyn Relaunch>>,
    ) -> Result<Option<GatewayChanger>, LabError> {
        let teller = match (program.configuration(), api) {
            (Configuration::Written(program), _) => {
                let bin = match program {
                    Standalone::Nginx => nginx::binary()?,
                    Standalone::Haproxy => haproxy::binary()?,
                    Standalone::Caddy => caddy::binary()?,
                    Standalone::Envoy if written.plan.listeners_file => envoy::binary()?,
                    Standalone::Envoy | Standalone::Command => return Ok(None),
                };
                Teller::Program {
                    program,
                    pid,
                    bin,
                    relaunch,
                }
            }
            (Configuration::ByControlPlane(kind), Some(kubeconfig)) => {
                let api = BlockingClient::from_kubeconfig(kubeconfig).map_err(|e| {
                    tell_failed(told_by(program, HaproxyReload::default()), e.to_string())
                })?;
                objects(kind, api, Box::new(program), None, &written)?
            }
            (Configuration::ByControlPlane(_), None) => return Ok(None),
        };
        Ok(Some(GatewayChanger {
            paths: written.plan.paths,
            probe_at: written.plan.listen,
            written,
            teller,
        }))
    }

    /// A gateway on a cluster written as `written`, changed through its objects on the
    /// cluster's API server.
    pub fn on_cluster(cluster: OnCluster, written: Written) -> Result<GatewayChanger, LabError> {
        let OnCluster {
            kind,
            api,
            target,
            files,
            probe_at,
        } = cluster;
        let teller = objects(kind, api, target, Some(files), &written)?;
        Ok(GatewayChanger {
            paths: written.plan.paths,
            probe_at,
            written,
            teller,
        })
    }

    /// What to ask the gateway, on this name and route, to see a change served.
    fn probe(&self, host: String, path: &str, served_when: ServedWhen) -> Probe {
        Probe::Gateway(GatewayProbe {
            at: self.probe_at,
            ca: self.written.plan.path("ca.pem"),
            host,
            path: path.into(),
            served_when,
        })
    }
}

impl Changer for GatewayChanger {
    /// Puts the gateway's configuration back as it was before the first change, where it
    /// outlives the step (objects on a cluster): what a change added deleted, what it
    /// changed applied again as it was. A gateway the lab started ends with its step.
    fn put_back(&mut self) -> Result<(), LabError> {
        let Teller::Objects(o) = &mut self.teller else {
            return Ok(());
        };
        let failed = |e: meshbench_k8s::ApiError| {
            tell_failed(
                told_by(o.kind.program(), HaproxyReload::default()),
                e.to_string(),
            )
        };
        for (name, object) in &o.applied {
            match o.first.get(name) {
                None => o.api.delete(object).map_err(failed)?,
                Some(first) if first != object => o.api.apply(first).map_err(failed)?,
                Some(_) => {}
            }
        }
        o.applied = o.first.clone();
        Ok(())
    }

    /// How the gateway is told of a change, as a result names it.
    fn told_by(&self) -> &'static str {
        match &self.teller {
            Teller::Program {
                program, relaunch, ..
            } => {
                let reload = match relaunch {
                    Some(_) => HaproxyReload::Plain,
                    None => HaproxyReload::Seamless,
                };
                told_by(program.program(), reload)
            }
            Teller::Objects(o) => told_by(o.kind.program(), HaproxyReload::default()),
        }
    }

    /// Makes the change in the configuration files and tells the gateway. On a failure the
    /// gateway may hold the configuration before or after the change; the next change is
    /// made from the plan as it now stands.
    fn apply(&mut self, kind: ChangeKind) -> Result<Told, LabError> {
        let plan = &mut self.written.plan;
        let first = plan.domain(0);
        let (what, (host, path, served_when)) = match kind {
            ChangeKind::Route => {
                let added = plan.paths == self.paths;
                let route = format!("/get/{}", self.paths + 1);
                plan.paths = if added { self.paths + 1 } else { self.paths };
                (
                    format!(
                        "route {route} {} on every domain",
                        if added { "added" } else { "removed" }
                    ),
                    (
                        first,
                        route,
                        if added {
                            ServedWhen::Answers
                        } else {
                            ServedWhen::Stops
                        },
                    ),
                )
            }
            ChangeKind::Domain => {
                let n = plan.domains;
                let issued = gateway::write_domain_cert(plan, &self.written.ca, n)?;
                self.written.certs.push((plan.domain(n), issued));
                plan.domains += 1;
                let host = plan.domain(n);
                (
                    format!("domain {host} added with its certificate"),
                    (host, "/get/1".into(), ServedWhen::Answers),
                )
            }
            ChangeKind::Certificate => {
                let (stem, issued) = gateway::rotate_cert(plan, &self.written.ca)?;
                let presents = ServedWhen::Presents(issued.cert_der.clone());
                match self.written.certs.iter_mut().find(|(s, _)| *s == stem) {
                    Some((_, old)) => *old = issued,
                    None => self.written.certs.push((stem.clone(), issued)),
                }
                (
                    format!("certificate of {stem} issued again"),
                    (first, "/get/1".into(), presents),
                )
            }
            ChangeKind::Reload => (
                "the same configuration told again".into(),
                (first, "/get/1".into(), ServedWhen::Answers),
            ),
            ChangeKind::Backend | ChangeKind::ServiceEntry => {
                return Err(tell_failed(
                    self.told_by(),
                    format!("a {kind} change is no change of the gateway's configuration"),
                ))
            }
        };
        let probe = self.probe(host, &path, served_when);
        let written = self.tell()?;
        Ok(Told {
            what,
            probe,
            written,
        })
    }
}

impl GatewayChanger {
    /// Writes the changed configuration and tells the gateway, in its own way; when the
    /// writing began.
    fn tell(&mut self) -> Result<Instant, LabError> {
        let told_by = self.told_by();
        let failed = |reason: String| tell_failed(told_by, reason);
        let plan = &self.written.plan;
        let (program, pid, bin, relaunch) = match &mut self.teller {
            Teller::Program {
                program,
                pid,
                bin,
                relaunch,
            } => (*program, *pid, bin, relaunch),
            Teller::Objects(o) => {
                let now = o.render(plan, &self.written.certs)?;
                let changed: Vec<Value> = (now.iter())
                    .filter(|(name, object)| o.applied.get(*name) != Some(object))
                    .map(|(_, object)| object.clone())
                    .collect();
                let written = Instant::now();
                for object in &changed {
                    o.api.apply(object).map_err(|e| failed(e.to_string()))?;
                }
                o.applied = now;
                return Ok(written);
            }
        };
        let written = Instant::now();
        program.program().write(plan, &[])?;
        let told: Result<(), LabError> = match program {
            Standalone::Nginx => {
                let config = plan.path(nginx::CONFIG);
                let out = Command::new(bin)
                    .arg("-p")
                    .arg(&plan.out)
                    .arg("-c")
                    .arg(&config)
                    .args(["-s", "reload"])
                    .output()
                    .map_err(|e| failed(e.to_string()))?;
                if !out.status.success() {
                    return Err(failed(tail(&out.stderr)));
                }
                Ok(())
            }
            Standalone::Haproxy => match relaunch {
                Some(relaunch) => relaunch.relaunch().map_err(failed),
                None => {
                    // SAFETY: a signal to the master process this lab started and still holds.
                    let sent = unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR2) };
                    match sent {
                        0 => Ok(()),
                        _ => Err(failed(std::io::Error::last_os_error().to_string())),
                    }
                }
            },
            Standalone::Caddy => {
                let caddyfile = std::fs::read(plan.path(caddy::CONFIG))
                    .map_err(|e| failed(format!("{}: {e}", plan.path(caddy::CONFIG).display())))?;
                post_load(&caddy::admin_socket(&plan.out), &caddyfile).map_err(failed)
            }
            // Writing was telling: its listeners file was renamed into place, and Envoy
            // watches it for moves.
            Standalone::Envoy | Standalone::Command => Ok(()),
        };
        told.map(|()| written)
    }
}

/// The objects teller for `written`, its objects as `target` renders them (those of `files`,
/// or all) taken as applied.
fn objects(
    kind: ControlPlaneKind,
    api: BlockingClient,
    target: Box<dyn Target>,
    files: Option<Vec<String>>,
    written: &Written,
) -> Result<Teller, LabError> {
    let mut o = Objects {
        kind,
        api,
        target,
        files,
        first: BTreeMap::new(),
        applied: BTreeMap::new(),
    };
    o.first = o.render(&written.plan, &written.certs)?;
    o.applied = o.first.clone();
    Ok(Teller::Objects(Box::new(o)))
}

/// The last line of a program's output, for a message.
fn tail(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_string()
}

/// How long caddy's admin API may take to load a configuration.
const LOAD_WITHIN: Duration = Duration::from_secs(20);

/// `POST /load` of a Caddyfile to caddy's admin API on a unix socket: caddy adapts it and
/// applies it (nothing when it is the configuration it runs). The `Host` is empty: caddy
/// allows no other on a unix socket. An error is the API's answer.
fn post_load(socket: &std::path::Path, caddyfile: &[u8]) -> Result<(), String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    s.set_read_timeout(Some(LOAD_WITHIN))
        .map_err(|e| e.to_string())?;
    let head = format!(
        "POST /load HTTP/1.1\r\nHost: \r\nContent-Type: text/caddyfile\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        caddyfile.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|_| s.write_all(caddyfile))
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&answer);
    let status = text.split_whitespace().nth(1).unwrap_or("");
    if status == "200" {
        Ok(())
    } else {
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("").trim();
        Err(format!("HTTP {status}: {body}"))
    }
}
