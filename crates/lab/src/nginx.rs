//! A real nginx, configured in a private temporary directory, listening on a free loopback
//! port, with one or more workers; stopped with SIGQUIT (graceful) then SIGKILL on drop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::LabError;

/// What the nginx serves.
#[derive(Debug, Clone)]
pub enum NginxSite {
    /// A reverse proxy to this upstream, with pooled keep-alive upstream connections.
    Proxy(SocketAddr),
    /// `return 200` with a body of this many bytes.
    Fixed(usize),
}

/// A running nginx.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

const CANDIDATES: [&str; 3] = [
    "/usr/sbin/nginx",
    "/usr/local/sbin/nginx",
    "/usr/local/nginx/sbin/nginx",
];

impl Nginx {
    /// The nginx binary, if one is installed.
    pub fn binary() -> Option<PathBuf> {
        let on_path = std::env::var_os("PATH")
            .map(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("nginx"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        on_path
            .into_iter()
            .chain(CANDIDATES.iter().map(PathBuf::from))
            .find(|p| p.is_file())
    }

    /// Returns the nginx binary, installing the Debian package first if there is none.
    pub fn ensure_installed() -> Result<PathBuf, LabError> {
        crate::install::ensure("nginx", "nginx", Self::binary)
    }

    /// Starts nginx with `workers` worker processes serving `site` on a free loopback port.
    pub fn start(site: &NginxSite, workers: usize) -> Result<Nginx, LabError> {
        let binary = Self::ensure_installed()?;
        let dir = std::env::temp_dir().join(format!(
            "meshbench-nginx-{}-{}",
            std::process::id(),
            unique()
        ));
        let files = |source| LabError::Files {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(files)?;
        let port = free_port().map_err(files)?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        std::fs::write(
            dir.join("nginx.conf"),
            render_config(&dir, addr, site, workers),
        )
        .map_err(files)?;
        let child = Command::new(&binary)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| LabError::Spawn("nginx".into(), e))?;
        let mut nginx = Nginx { child, dir, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(nginx);
            }
            let exited = matches!(nginx.child.try_wait(), Ok(Some(_)));
            if exited || Instant::now() > deadline {
                let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
                let tail = log.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                return Err(LabError::NotListening {
                    server: "nginx".into(),
                    addr,
                    log: tail,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// nginx's version string, e.g. "1.22.1".
    pub fn version() -> Option<String> {
        let out = Command::new(Self::binary()?).arg("-v").output().ok()?;
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        text.split('/').nth(1).map(|v| v.trim().to_string())
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: graceful shutdown of master and workers; then make sure.
        unsafe_kill(self.child.id(), 3);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn unsafe_kill(pid: u32, signal: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The nginx.conf for a site.
pub fn render_config(dir: &Path, addr: SocketAddr, site: &NginxSite, workers: usize) -> String {
    let location = match site {
        NginxSite::Proxy(_) => "proxy_pass http://upstream_backend;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";".to_string(),
        NginxSite::Fixed(n) => format!("return 200 \"{}\";", "x".repeat(*n)),
    };
    let upstream = match site {
        NginxSite::Proxy(up) => {
            format!("  upstream upstream_backend {{\n    server {up};\n    keepalive 256;\n  }}\n")
        }
        NginxSite::Fixed(_) => String::new(),
    };
    format!(
        "{preamble}http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 65s;
  default_type text/plain;
  server_tokens off;
{temp}{upstream}  server {{
    listen {addr} backlog=4096;
    location / {{
      {location}
    }}
  }}
}}
",
        preamble = preamble(dir, workers),
        temp = temp_paths(dir),
    )
}

/// The main context every nginx the lab writes starts with: workers, foreground, pid and error
/// log in `dir`, file and connection limits (and `user root` when run as root, so that workers
/// can read files under a root-only temp dir).
pub(crate) fn preamble(dir: &Path, workers: usize) -> String {
    let d = dir.display();
    let user = if is_root() { "user root;\n" } else { "" };
    format!(
        "{user}worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
worker_rlimit_nofile 65536;
events {{ worker_connections 16384; }}
"
    )
}

/// `http` directives that keep nginx's temporary files in `dir`.
pub(crate) fn temp_paths(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "  client_body_temp_path {d}/tmp-body;
  proxy_temp_path {d}/tmp-proxy;
  fastcgi_temp_path {d}/tmp-fastcgi;
  uwsgi_temp_path {d}/tmp-uwsgi;
  scgi_temp_path {d}/tmp-scgi;
"
    )
}
