//! Starting a generated gateway: the real nginx, haproxy or caddy (installed from Debian packages
//! when missing), or Envoy when an `envoy` binary is on PATH, run in the foreground from the
//! output directory; ready once its port accepts connections; stopped when dropped.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Flavor;
use crate::{install, LabError};

/// A gateway process serving a generated configuration.
pub struct RunningGateway {
    child: Child,
    log: PathBuf,
    pub flavor: Flavor,
    pub listen: SocketAddr,
}

/// The binary for a gateway, installed if missing where Debian packages it.
pub fn binary(flavor: Flavor) -> Result<PathBuf, LabError> {
    match flavor {
        Flavor::Nginx => crate::Nginx::ensure_installed(),
        Flavor::Haproxy => install::ensure("haproxy", "haproxy", || {
            install::find("haproxy", &["/usr/sbin/haproxy"])
        }),
        Flavor::Caddy => install::ensure("caddy", "caddy", || install::find("caddy", &["/usr/bin/caddy"])),
        Flavor::Envoy => install::find("envoy", &[]).ok_or_else(|| LabError::Missing {
            program: "envoy".into(),
            hint: "Envoy has no Debian package; put an envoy binary on PATH (e.g. from the envoyproxy/envoy release images)".into(),
        }),
        Flavor::Istio => Err(LabError::Missing {
            program: "istio".into(),
            hint: "Istio runs in a Kubernetes cluster: apply the generated YAML with kubectl".into(),
        }),
    }
}

/// The command line that runs a gateway generated into `dir`, in the foreground.
pub fn command(flavor: Flavor, dir: &Path) -> Result<Command, LabError> {
    let bin = binary(flavor)?;
    let d = dir.display().to_string();
    let mut cmd = Command::new(&bin);
    cmd.current_dir(dir);
    match flavor {
        Flavor::Nginx => {
            cmd.args([
                "-p",
                &d,
                "-c",
                &format!("{d}/nginx.conf"),
                "-e",
                &format!("{d}/error.log"),
            ]);
        }
        Flavor::Haproxy => {
            cmd.args(["-db", "-f", &format!("{d}/haproxy.cfg")]);
        }
        Flavor::Caddy => {
            cmd.args([
                "run",
                "--adapter",
                "caddyfile",
                "--config",
                &format!("{d}/Caddyfile"),
            ])
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir.join("caddy-data"))
            .env("XDG_CONFIG_HOME", dir.join("caddy-config"));
        }
        Flavor::Envoy => {
            cmd.args([
                "--config-path",
                &format!("{d}/envoy.pb"),
                "--log-level",
                "warn",
            ]);
        }
        Flavor::Istio => unreachable!("binary() refused istio"),
    }
    Ok(cmd)
}

impl RunningGateway {
    /// Starts the gateway whose configuration `gen gateway` wrote into `dir`, listening on
    /// `listen`, and waits up to 30 s for it to accept connections.
    pub fn start(
        flavor: Flavor,
        dir: &Path,
        listen: SocketAddr,
    ) -> Result<RunningGateway, LabError> {
        let mut cmd = command(flavor, dir)?;
        let log = dir.join(format!("{}.log", flavor.name()));
        let out = std::fs::File::create(&log)
            .map_err(|e| LabError::Io(format!("cannot create {}: {e}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| LabError::Io(format!("cannot open {}: {e}", log.display())))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| LabError::Spawn(flavor.name().into(), e))?;
        let mut gw = RunningGateway {
            child,
            log,
            flavor,
            listen,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect_timeout(&listen, Duration::from_millis(200)).is_ok() {
                return Ok(gw);
            }
            if let Ok(Some(_)) = gw.child.try_wait() {
                return Err(LabError::BadConfig {
                    server: flavor.name().into(),
                    log: gw.log_tail(),
                });
            }
            if Instant::now() > deadline {
                return Err(LabError::NotListening {
                    server: flavor.name().into(),
                    addr: listen,
                    log: gw.log_tail(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines the gateway logged.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }
}

impl Drop for RunningGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
