//! A change told to a gateway the lab configures, the way its users tell it: nginx by
//! `nginx -s reload`, haproxy by its master-worker reload (`SIGUSR2` to the master, which hands
//! its listening sockets to the new workers), caddy through its admin API (`POST /load` with the
//! Caddyfile). The configuration is rewritten first, from the gateway plan with the change made
//! ([`GatewayChanger::apply`]); what to ask to see it served is the [`Probe`] it returns. The
//! runner applies the changes on the step's schedule and times them (`meshbench_runner`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use meshbench_results::{ChangeKind, Standalone};

use crate::gateway::{self, GatewayPlan, Target};
use crate::pki::Ca;
use crate::program::{caddy, haproxy, nginx};
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
}

/// A standalone gateway as the lab wrote and started it, ready to be changed: its program, the
/// plan its configuration was written from, the CA that signs its domains, and its process.
pub struct GatewayChanger {
    program: Standalone,
    /// The configuration as it stands (after the changes made so far).
    plan: GatewayPlan,
    ca: Ca,
    /// Paths per domain before any change: a route change adds the one after them.
    paths: usize,
    /// The gateway's main process (nginx's and haproxy's master).
    pid: u32,
    bin: PathBuf,
}

impl GatewayChanger {
    /// The gateway `program` started on `plan` (certificates signed by `ca`) as process `pid`;
    /// `None` for a program meshbench does not change (a command, a control plane's Envoy).
    pub fn new(
        program: Standalone,
        plan: GatewayPlan,
        ca: Ca,
        pid: u32,
    ) -> Result<Option<GatewayChanger>, LabError> {
        let bin = match program {
            Standalone::Nginx => nginx::binary()?,
            Standalone::Haproxy => haproxy::binary()?,
            Standalone::Caddy => caddy::binary()?,
            Standalone::Envoy | Standalone::Command => return Ok(None),
        };
        Ok(Some(GatewayChanger {
            program,
            paths: plan.paths,
            plan,
            ca,
            pid,
            bin,
        }))
    }

    /// How the gateway is told of a change, as a result names it.
    pub fn told_by(&self) -> &'static str {
        told_by(self.program)
    }

    /// Where the gateway listens (what a probe connects to) and the CA that signs its names.
    pub fn listen(&self) -> std::net::SocketAddr {
        self.plan.listen
    }

    pub fn ca_file(&self) -> PathBuf {
        self.plan.path("ca.pem")
    }

    /// Makes the change in the configuration files and tells the gateway. On a failure the
    /// gateway may hold the configuration before or after the change; the next change is
    /// made from the plan as it now stands.
    pub fn apply(&mut self, kind: ChangeKind) -> Result<Told, LabError> {
        let first = self.plan.domain(0);
        let told = match kind {
            ChangeKind::Route => {
                let added = self.plan.paths == self.paths;
                let route = format!("/get/{}", self.paths + 1);
                self.plan.paths = if added { self.paths + 1 } else { self.paths };
                Told {
                    what: format!(
                        "route {route} {} on every domain",
                        if added { "added" } else { "removed" }
                    ),
                    probe: Probe {
                        host: first,
                        path: route,
                        served_when: if added {
                            ServedWhen::Answers
                        } else {
                            ServedWhen::Stops
                        },
                    },
                }
            }
            ChangeKind::Domain => {
                let n = self.plan.domains;
                gateway::write_domain_cert(&self.plan, &self.ca, n)?;
                self.plan.domains += 1;
                let host = self.plan.domain(n);
                Told {
                    what: format!("domain {host} added with its certificate"),
                    probe: Probe {
                        host,
                        path: "/get/1".into(),
                        served_when: ServedWhen::Answers,
                    },
                }
            }
            ChangeKind::Reload => Told {
                what: "the same configuration told again".into(),
                probe: Probe {
                    host: first,
                    path: "/get/1".into(),
                    served_when: ServedWhen::Answers,
                },
            },
        };
        self.program.program().write(&self.plan, &[])?;
        self.tell()?;
        Ok(told)
    }

    /// Tells the gateway its configuration files changed, in its own way.
    fn tell(&self) -> Result<(), LabError> {
        let failed = |reason: String| LabError::Tell {
            told_by: self.told_by(),
            reason,
        };
        match self.program {
            Standalone::Nginx => {
                let config = self.plan.path(nginx::CONFIG);
                let out = Command::new(&self.bin)
                    .arg("-p")
                    .arg(&self.plan.out)
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
                let sent = unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGUSR2) };
                match sent {
                    0 => Ok(()),
                    _ => Err(failed(std::io::Error::last_os_error().to_string())),
                }
            }
            Standalone::Caddy => {
                let caddyfile = std::fs::read(self.plan.path(caddy::CONFIG)).map_err(|e| {
                    failed(format!("{}: {e}", self.plan.path(caddy::CONFIG).display()))
                })?;
                post_load(&caddy::admin_socket(&self.plan.out), &caddyfile).map_err(failed)
            }
            Standalone::Envoy | Standalone::Command => Ok(()),
        }
    }
}

/// How `program` is told of a change.
pub fn told_by(program: Standalone) -> &'static str {
    match program {
        Standalone::Nginx => "nginx -s reload",
        Standalone::Haproxy => "haproxy master-worker reload (SIGUSR2)",
        Standalone::Caddy => "caddy admin API (POST /load)",
        Standalone::Envoy | Standalone::Command => "not changed by meshbench",
    }
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
