//! A change told to a gateway the lab configures, the way its users tell it: nginx by
//! `nginx -s reload`, haproxy by its master-worker reload (`SIGUSR2` to the master, which hands
//! its listening sockets to the new workers), caddy through its admin API (`POST /load` with the
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
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::path::Path;

use meshbench_k8s::blocking::{documents, BlockingClient};
use meshbench_results::{ChangeKind, Configuration, ControlPlaneKind, Program, Standalone};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedWhen {
    /// A 2xx from the backend: the route or domain was added.
    Answers,
    /// Anything but a 2xx: the route was removed.
    Stops,
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

/// A gateway's configuration as the lab wrote it: the plan, the CA that signed its domains and
/// the certificates issued (by file stem).
pub struct Written {
    pub plan: GatewayPlan,
    pub ca: Ca,
    pub certs: Vec<(String, Issued)>,
}

/// A gateway as the lab wrote and started it, ready to be changed: the plan its configuration
/// was written from (as changed so far), what signs its domains, and how it is told.
pub struct GatewayChanger {
    written: Written,
    /// Paths per domain before any change: a route change adds the one after them.
    paths: usize,
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
    },
    /// A control plane's Envoy: the objects that differ applied to the API server the control
    /// plane reads (istiod pushes, Contour translates).
    Objects {
        kind: ControlPlaneKind,
        api: Box<BlockingClient>,
        /// Every object as last applied, by its kind, namespace and name.
        applied: BTreeMap<String, Value>,
    },
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
                Teller::Program { program, pid, bin }
            }
            (Configuration::ByControlPlane(kind), Some(kubeconfig)) => {
                let api = BlockingClient::from_kubeconfig(kubeconfig)
                    .map_err(|e| tell_failed(told_by(program), e.to_string()))?;
                let applied = by_name(&written.plan, &program, &written.certs)?;
                Teller::Objects {
                    kind,
                    api: Box::new(api),
                    applied,
                }
            }
            (Configuration::ByControlPlane(_), None) => return Ok(None),
        };
        Ok(Some(GatewayChanger {
            paths: written.plan.paths,
            written,
            teller,
        }))
    }

    /// How the gateway is told of a change, as a result names it.
    pub fn told_by(&self) -> &'static str {
        match &self.teller {
            Teller::Program { program, .. } => told_by(program.program()),
            Teller::Objects { kind, .. } => told_by(kind.program()),
        }
    }

    /// Where the gateway listens (what a probe connects to) and the CA that signs its names.
    pub fn listen(&self) -> std::net::SocketAddr {
        self.written.plan.listen
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
            ChangeKind::Reload => (
                "the same configuration told again".into(),
                Probe {
                    host: first,
                    path: "/get/1".into(),
                    served_when: ServedWhen::Answers,
                },
            ),
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
        let (program, pid, bin) = match &mut self.teller {
            Teller::Program { program, pid, bin } => (*program, *pid, bin),
            Teller::Objects { kind, api, applied } => {
                let now = by_name(plan, &kind.program(), &self.written.certs)?;
                let changed: Vec<Value> = (now.iter())
                    .filter(|(name, object)| applied.get(*name) != Some(object))
                    .map(|(_, object)| object.clone())
                    .collect();
                let written = Instant::now();
                for object in &changed {
                    api.apply(object).map_err(|e| failed(e.to_string()))?;
                }
                *applied = now;
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
            Standalone::Haproxy => {
                // SAFETY: a signal to the master process this lab started and still holds.
                let sent = unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR2) };
                match sent {
                    0 => Ok(()),
                    _ => Err(failed(std::io::Error::last_os_error().to_string())),
                }
            }
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

/// How `program` is told of a change.
pub fn told_by(program: Program) -> &'static str {
    match program {
        Program::Nginx => "nginx -s reload",
        Program::Haproxy => "haproxy master-worker reload (SIGUSR2)",
        Program::Caddy => "caddy admin API (POST /load)",
        Program::Envoy => "envoy file-based xDS (lds.pb renamed into place)",
        Program::Istio => "istio objects on the API server (istiod pushes)",
        Program::Contour => "HTTPProxy objects on the API server (Contour translates)",
        Program::Command => "not changed by meshbench",
    }
}

fn tell_failed(told_by: &'static str, reason: String) -> LabError {
    LabError::Tell { told_by, reason }
}

/// Every object `target` renders for `plan` (its files rewritten), by kind, namespace and name.
fn by_name(
    plan: &GatewayPlan,
    target: &Program,
    certs: &[(String, Issued)],
) -> Result<BTreeMap<String, Value>, LabError> {
    let mut out = BTreeMap::new();
    for file in target.write(plan, certs)? {
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
