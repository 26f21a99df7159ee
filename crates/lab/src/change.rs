//! A change told to a gateway the lab configures, the way its users tell it: nginx by
//! `nginx -s reload`, haproxy by its master-worker reload (`SIGUSR2` to the master, which hands
//! its listening sockets to the new workers) or its plain one (a new process with `-sf`), caddy through its admin API (`POST /load` with the
//! Caddyfile), Envoy through file-based xDS (its listeners file replaced by a rename, which
//! Envoy watches for); a control plane's Envoy through its objects on the API server the control
//! plane reads (Istio's Gateways, VirtualServices and Secrets, Contour's HTTPProxies), only
//! those that differ applied. The configuration is rewritten first, from the gateway plan with the change made
//! ([`GatewayChanger::apply`]); what to ask to see it served is the [`Probe`] it returns. The
//! runner applies the changes on the step's schedule and times them (`meshbench_runner`).

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

/// What to ask to see a change served: this route on this name, until it answers (`Answers`)
/// or until it no longer does (`Stops`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The host name asked for (the TLS name and the `Host` header).
    pub host: String,
    pub path: String,
    pub served_when: ServedWhen,
}

/// When a probe's answer shows the change served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServedWhen {
    /// A 2xx from the backend: the route or domain was added.
    Answers,
    /// Anything but a 2xx: the route was removed.
    Stops,
    /// An answer on a connection whose handshake presented this certificate (DER): the
    /// certificate was rotated.
    Presents(Vec<u8>),
}

/// A change made and told: what it was, in words, and how to see it served.
#[derive(Debug, Clone)]
pub struct Told {
    pub what: String,
    pub probe: Probe,
    /// When the gateway's configuration began to be written: its first file, or its first
    /// object sent to the API server (after the objects that differ were found).
    pub written: Instant,
}

/// The backend's replicas restarted in turn, the way the place does it: the lab's processes
/// killed and started again at their addresses (`crate::rig::ReplicaRoll`), a cluster's
/// Deployment's rolling update. A roll goes on beside the changes after it: it is begun, then
/// asked whether it is done between them.
pub trait BackendRoll: Send {
    /// How the backend is rolled, as a result names it.
    fn told_by(&self) -> &'static str;

    /// Begins a roll: what it is, in words, and when its first replica was stopped or its
    /// first object written.
    fn begin(&mut self) -> Result<(String, Instant), String>;

    /// Whether the roll begun last is done: every replica new and ready. Between two asks it
    /// may go on a step (the next replica restarted).
    fn done(&mut self) -> Result<bool, String>;
}

/// A gateway started again beside the running one, which it tells to finish (haproxy's plain
/// reload, `crate::rig::GatewayRelaunch`): the new process is the gateway from then on.
pub trait Relaunch: Send {
    fn relaunch(&mut self) -> Result<(), String>;
}

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

    /// Puts the gateway's configuration back as it was before the first change, where it
    /// outlives the step (objects on a cluster): what a change added deleted, what it
    /// changed applied again as it was. A gateway the lab started ends with its step.
    pub fn put_back(&mut self) -> Result<(), LabError> {
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
    pub fn told_by(&self) -> &'static str {
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

    /// Where a probe reaches the gateway (where it listens, or a port-forward to it), and the
    /// CA that signs its names.
    pub fn probe_at(&self) -> std::net::SocketAddr {
        self.probe_at
    }

    pub fn ca_file(&self) -> PathBuf {
        self.written.plan.path("ca.pem")
    }

    /// Makes the change in the configuration files and tells the gateway. On a failure the
    /// gateway may hold the configuration before or after the change; the next change is
    /// made from the plan as it now stands.
    pub fn apply(&mut self, kind: ChangeKind) -> Result<Told, LabError> {
        let plan = &mut self.written.plan;
        let first = plan.domain(0);
        let (what, probe) = match kind {
            ChangeKind::Route => {
                let added = plan.paths == self.paths;
                let route = format!("/get/{}", self.paths + 1);
                plan.paths = if added { self.paths + 1 } else { self.paths };
                (
                    format!(
                        "route {route} {} on every domain",
                        if added { "added" } else { "removed" }
                    ),
                    Probe {
                        host: first,
                        path: route,
                        served_when: if added {
                            ServedWhen::Answers
                        } else {
                            ServedWhen::Stops
                        },
                    },
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
                    Probe {
                        host,
                        path: "/get/1".into(),
                        served_when: ServedWhen::Answers,
                    },
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
                    Probe {
                        host: first,
                        path: "/get/1".into(),
                        served_when: presents,
                    },
                )
            }
            ChangeKind::Reload => (
                "the same configuration told again".into(),
                Probe {
                    host: first,
                    path: "/get/1".into(),
                    served_when: ServedWhen::Answers,
                },
            ),
            ChangeKind::Backend => {
                return Err(tell_failed(
                    self.told_by(),
                    "the backend's roll is no change of the gateway's configuration".into(),
                ))
            }
        };
        let written = self.tell()?;
        Ok(Told {
            what,
            probe,
            written,
        })
    }

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

/// How `program` is told of a change (haproxy: reloaded as `reload` says).
pub fn told_by(program: Program, reload: HaproxyReload) -> &'static str {
    match program {
        Program::Nginx => "nginx -s reload",
        Program::Haproxy if reload == HaproxyReload::Plain => {
            "haproxy plain reload (a new process, -sf)"
        }
        Program::Haproxy => "haproxy master-worker reload (SIGUSR2)",
        Program::Caddy => "caddy admin API (POST /load)",
        Program::Envoy => "envoy file-based xDS (lds.pb renamed into place)",
        Program::Istio => "istio objects on the API server (istiod pushes)",
        Program::Contour => "HTTPProxy objects on the API server (Contour translates)",
        Program::Command => "not changed by meshbench",
    }
}

pub(crate) fn tell_failed(told_by: &'static str, reason: String) -> LabError {
    LabError::Tell { told_by, reason }
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
