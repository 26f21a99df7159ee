//! One proxy hop of a topology: listen here (plain, TLS, or TLS that requires a client
//! certificate), forward there (plain, or TLS with a client certificate), at L7 (HTTP, keeping
//! upstream connections alive) or L4 (bytes, as ztunnel does). Each proxy program gets its own
//! configuration language and command line; `command` takes any program with a template.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{install, nginx, LabError};

/// The program that carries a hop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyKind {
    Nginx,
    Haproxy,
    Caddy,
    Envoy,
    /// `argv` and a configuration template with `{config}`, `{listen_port}`,
    /// `{upstream_port}`, `{listen}`, `{upstream}` and `{workers}` placeholders.
    Command {
        argv: Vec<String>,
        template: String,
    },
}

impl ProxyKind {
    pub fn name(&self) -> &'static str {
        match self {
            ProxyKind::Nginx => "nginx",
            ProxyKind::Haproxy => "haproxy",
            ProxyKind::Caddy => "caddy",
            ProxyKind::Envoy => "envoy",
            ProxyKind::Command { .. } => "command",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// HTTP: requests are parsed and forwarded over kept-alive upstream connections.
    L7,
    /// TCP: each client connection becomes one upstream connection.
    L4,
}

/// The listening side's TLS.
#[derive(Debug, Clone)]
pub struct ListenTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Require a client certificate signed by this CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// The forwarding side's TLS.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    pub ca: PathBuf,
    /// The name the upstream's certificate is checked against (and sent as SNI).
    pub server_name: String,
    /// Client certificate and key (mutual TLS).
    pub client: Option<(PathBuf, PathBuf)>,
}

/// What a hop does.
#[derive(Debug, Clone)]
pub struct Hop {
    /// The role's name, also the stem of its files.
    pub name: String,
    pub layer: Layer,
    pub listen: SocketAddr,
    pub listen_tls: Option<ListenTls>,
    pub upstream: SocketAddr,
    pub upstream_tls: Option<UpstreamTls>,
    /// Accept HTTP/2 from the client: h2c on a plain listener, ALPN h2 with TLS (L7 only).
    pub http2: bool,
    pub workers: u32,
    /// Where its configuration, logs and temporary files go.
    pub dir: PathBuf,
}

/// A hop ready to start: the command line, its configuration written.
pub struct Prepared {
    pub command: Command,
    pub config: PathBuf,
}

/// The program's path, installed from Debian packages where missing.
pub fn binary(kind: &ProxyKind) -> Result<PathBuf, LabError> {
    match kind {
        ProxyKind::Nginx => nginx::Nginx::ensure_installed(),
        ProxyKind::Haproxy => install::ensure("haproxy", "haproxy", || {
            install::find("haproxy", &["/usr/sbin/haproxy"])
        }),
        ProxyKind::Caddy => {
            install::ensure("caddy", "caddy", || install::find("caddy", &["/usr/bin/caddy"]))
        }
        ProxyKind::Envoy => install::find("envoy", &[]).ok_or_else(|| LabError::Missing {
            program: "envoy".into(),
            hint: "Envoy has no Debian package; put an envoy binary on PATH (e.g. from the envoyproxy/envoy release images)".into(),
        }),
        ProxyKind::Command { argv, .. } => {
            let program = argv.first().ok_or_else(|| LabError::Missing {
                program: "command".into(),
                hint: "proxy.command is empty".into(),
            })?;
            let p = Path::new(program);
            if p.is_absolute() {
                return Ok(p.to_path_buf());
            }
            install::find(program, &[]).ok_or_else(|| LabError::Missing {
                program: program.clone(),
                hint: "not found on PATH".into(),
            })
        }
    }
}

/// The version line a program prints (stored with the results).
pub fn version(kind: &ProxyKind) -> String {
    let Ok(bin) = binary(kind) else {
        return "unavailable".into();
    };
    let flag = match kind {
        ProxyKind::Nginx => "-v",
        ProxyKind::Haproxy => "-v",
        ProxyKind::Caddy => "version",
        ProxyKind::Envoy => "--version",
        ProxyKind::Command { .. } => return bin.display().to_string(),
    };
    match Command::new(&bin).arg(flag).output() {
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().unwrap_or("").trim().to_string()
        }
        Err(_) => "unknown".into(),
    }
}

/// Writes the hop's configuration and builds its command line.
pub fn prepare(kind: &ProxyKind, hop: &Hop) -> Result<Prepared, LabError> {
    let bin = binary(kind)?;
    let d = hop.dir.display().to_string();
    let mut command = Command::new(&bin);
    command.current_dir(&hop.dir);
    let config = match kind {
        ProxyKind::Nginx => {
            let path = hop.dir.join(format!("{}.nginx.conf", hop.name));
            write(&path, &nginx_config(hop)?)?;
            command.args([
                "-p",
                &d,
                "-c",
                &path.display().to_string(),
                "-e",
                &format!("{d}/{}.error.log", hop.name),
            ]);
            path
        }
        ProxyKind::Haproxy => {
            let path = hop.dir.join(format!("{}.haproxy.cfg", hop.name));
            write(&path, &haproxy_config(hop)?)?;
            command.args(["-db", "-f", &path.display().to_string()]);
            path
        }
        ProxyKind::Caddy => {
            if hop.layer == Layer::L4 {
                return Err(LabError::Missing {
                    program: "caddy layer4".into(),
                    hint: "Debian's caddy has no L4 proxy; use haproxy or nginx for tunnels".into(),
                });
            }
            let path = hop.dir.join(format!("{}.Caddyfile", hop.name));
            write(&path, &caddy_config(hop))?;
            command
                .args([
                    "run",
                    "--adapter",
                    "caddyfile",
                    "--config",
                    &path.display().to_string(),
                ])
                .env("HOME", &hop.dir)
                .env("XDG_DATA_HOME", hop.dir.join("caddy-data"))
                .env("XDG_CONFIG_HOME", hop.dir.join("caddy-config"))
                .env("GOMAXPROCS", hop.workers.to_string());
            path
        }
        ProxyKind::Envoy => {
            use prost::Message;
            let path = hop.dir.join(format!("{}.envoy.pb", hop.name));
            std::fs::write(&path, crate::envoy_hop::bootstrap(hop).encode_to_vec()).map_err(
                |e| LabError::Files {
                    path: path.clone(),
                    source: e,
                },
            )?;
            command.args([
                "--config-path",
                &path.display().to_string(),
                "--concurrency",
                &hop.workers.max(1).to_string(),
                "--log-level",
                "warn",
                // Several Envoys on one machine: no shared-memory hot restart.
                "--disable-hot-restart",
            ]);
            path
        }
        ProxyKind::Command { argv, template } => {
            let path = hop.dir.join(format!("{}.conf", hop.name));
            let fill = |s: &str| {
                s.replace("{config}", &path.display().to_string())
                    .replace("{listen_port}", &hop.listen.port().to_string())
                    .replace("{upstream_port}", &hop.upstream.port().to_string())
                    .replace("{listen}", &hop.listen.to_string())
                    .replace("{upstream}", &hop.upstream.to_string())
                    .replace("{workers}", &hop.workers.to_string())
                    .replace("{dir}", &d)
            };
            write(&path, &fill(template))?;
            command = Command::new(&bin);
            command.current_dir(&hop.dir);
            command.args(argv[1..].iter().map(|a| fill(a)));
            path
        }
    };
    Ok(Prepared { command, config })
}

fn write(path: &Path, text: &str) -> Result<(), LabError> {
    std::fs::write(path, text).map_err(|e| LabError::Files {
        path: path.to_path_buf(),
        source: e,
    })
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// nginx: `http` with an upstream keepalive pool at L7, `stream` at L4.
pub fn nginx_config(hop: &Hop) -> Result<String, LabError> {
    let mut c = nginx::preamble(&hop.dir, hop.workers as usize);
    let mut listen_ssl = if hop.listen_tls.is_some() { " ssl" } else { "" }.to_string();
    if hop.http2 && hop.layer == Layer::L7 {
        listen_ssl.push_str(" http2");
    }
    let mut tls_in = String::new();
    if let Some(t) = &hop.listen_tls {
        let _ = writeln!(
            tls_in,
            "    ssl_certificate {};\n    ssl_certificate_key {};\n    ssl_session_cache shared:in:10m;",
            p(&t.cert),
            p(&t.key)
        );
        if let Some(ca) = &t.client_ca {
            let _ = writeln!(
                tls_in,
                "    ssl_client_certificate {};\n    ssl_verify_client on;",
                p(ca)
            );
        }
    }
    let mut tls_out = String::new();
    if let Some(t) = &hop.upstream_tls {
        let _ = writeln!(
            tls_out,
            "    proxy_ssl_trusted_certificate {};\n    proxy_ssl_verify on;\n    proxy_ssl_name {};\n    proxy_ssl_server_name on;\n    proxy_ssl_session_reuse on;",
            p(&t.ca),
            t.server_name
        );
        if let Some((cert, key)) = &t.client {
            let _ = writeln!(
                tls_out,
                "    proxy_ssl_certificate {};\n    proxy_ssl_certificate_key {};",
                p(cert),
                p(key)
            );
        }
    }
    match hop.layer {
        Layer::L7 => {
            let scheme = if hop.upstream_tls.is_some() {
                "https"
            } else {
                "http"
            };
            let _ = write!(
                c,
                "http {{
  access_log off;
  keepalive_requests 1000000;
{temp}  upstream next {{
    server {up};
    keepalive 512;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }}
  server {{
    listen {listen}{listen_ssl} reuseport;
{tls_in}    location / {{
      proxy_pass {scheme}://next;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_set_header Host $host;
      proxy_buffering off;
{tls_out}    }}
  }}
}}
",
                temp = nginx::temp_paths(&hop.dir),
                up = hop.upstream,
                listen = hop.listen,
            );
        }
        Layer::L4 => {
            let module = "/usr/lib/nginx/modules/ngx_stream_module.so";
            if !Path::new(module).is_file() {
                install::ensure("libnginx-mod-stream", "ngx_stream_module", || {
                    Path::new(module).is_file().then(|| module.into())
                })?;
            }
            let tls_out = tls_out.replace(
                "proxy_ssl_trusted_certificate",
                "proxy_ssl on;\n    proxy_ssl_trusted_certificate",
            );
            c = format!("load_module {module};\n{c}");
            let _ = write!(
                c,
                "stream {{
  server {{
    listen {listen}{listen_ssl} reuseport;
{tls_in}    proxy_pass {up};
{tls_out}  }}
}}
",
                listen = hop.listen,
                up = hop.upstream,
            );
        }
    }
    Ok(c)
}

/// haproxy: one frontend and one backend, `mode http` (connection reuse on) or `mode tcp`.
/// Certificates are given as PEM files holding the certificate and its key.
pub fn haproxy_config(hop: &Hop) -> Result<String, LabError> {
    let mode = match hop.layer {
        Layer::L7 => "http",
        Layer::L4 => "tcp",
    };
    let mut bind = String::new();
    let h2 = hop.http2 && hop.layer == Layer::L7;
    if let Some(t) = &hop.listen_tls {
        let pem = combined_pem(&hop.dir, &format!("{}-listen", hop.name), &t.cert, &t.key)?;
        let _ = write!(bind, " ssl crt {}", p(&pem));
        if let Some(ca) = &t.client_ca {
            let _ = write!(bind, " ca-file {} verify required", p(ca));
        }
        if h2 {
            bind.push_str(" alpn h2,http/1.1");
        }
    } else if h2 {
        bind.push_str(" proto h2");
    }
    let mut server = String::new();
    if let Some(t) = &hop.upstream_tls {
        let _ = write!(
            server,
            " ssl verify required ca-file {} sni str({name}) verifyhost {name}",
            p(&t.ca),
            name = t.server_name
        );
        if let Some((cert, key)) = &t.client {
            let pem = combined_pem(&hop.dir, &format!("{}-client", hop.name), cert, key)?;
            let _ = write!(server, " crt {}", p(&pem));
        }
    }
    let reuse = if hop.layer == Layer::L7 {
        "  http-reuse always\n"
    } else {
        ""
    };
    Ok(format!(
        "global
  maxconn 8000
  nbthread {workers}
  log stderr format short local0 err
defaults
  mode {mode}
  log global
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend in
  bind {listen}{bind}
  default_backend next
backend next
{reuse}  server next {up}{server} maxconn 4000
",
        workers = hop.workers.max(1),
        listen = hop.listen,
        up = hop.upstream,
    ))
}

/// caddy: one site, `reverse_proxy` with the upstream's TLS settings.
pub fn caddy_config(hop: &Hop) -> String {
    let scheme = if hop.listen_tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut site = String::new();
    if let Some(t) = &hop.listen_tls {
        let _ = write!(site, "  tls {} {}", p(&t.cert), p(&t.key));
        match &t.client_ca {
            Some(ca) => {
                let _ = writeln!(
                    site,
                    " {{\n    client_auth {{\n      mode require_and_verify\n      trusted_ca_cert_file {}\n    }}\n  }}",
                    p(ca)
                );
            }
            None => site.push('\n'),
        }
    }
    let mut transport = String::new();
    if let Some(t) = &hop.upstream_tls {
        let _ = write!(
            transport,
            " {{\n    transport http {{\n      tls\n      tls_trusted_ca_certs {}\n      tls_server_name {}\n",
            p(&t.ca),
            t.server_name
        );
        if let Some((cert, key)) = &t.client {
            let _ = writeln!(transport, "      tls_client_auth {} {}", p(cert), p(key));
        }
        transport.push_str("    }\n  }");
    }
    format!(
        "{globals}
{scheme}://:{port} {{
  bind {ip}
{site}  reverse_proxy {up}{transport}
}}
",
        globals = crate::gateway::caddy::globals(&hop.dir, hop.http2, hop.listen_tls.is_some()),
        port = hop.listen.port(),
        ip = hop.listen.ip(),
        up = hop.upstream,
    )
}

fn combined_pem(dir: &Path, stem: &str, cert: &Path, key: &Path) -> Result<PathBuf, LabError> {
    let read = |f: &Path| {
        std::fs::read_to_string(f).map_err(|e| LabError::Files {
            path: f.to_path_buf(),
            source: e,
        })
    };
    let path = dir.join(format!("{stem}.pem"));
    write(&path, &format!("{}{}", read(cert)?, read(key)?))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(layer: Layer, tls: bool) -> Hop {
        let dir = PathBuf::from("/tmp/x");
        Hop {
            name: "server_proxy".into(),
            layer,
            listen: "127.0.0.1:8001".parse().unwrap(),
            listen_tls: tls.then(|| ListenTls {
                cert: dir.join("s.pem"),
                key: dir.join("s-key.pem"),
                client_ca: Some(dir.join("ca.pem")),
            }),
            upstream: "127.0.0.1:8002".parse().unwrap(),
            upstream_tls: None,
            http2: false,
            workers: 2,
            dir,
        }
    }

    #[test]
    fn nginx_l7_keeps_upstream_connections_and_asks_for_client_certificates() {
        let c = nginx_config(&hop(Layer::L7, true)).unwrap();
        assert!(c.contains("worker_processes 2;"), "{c}");
        assert!(c.contains("keepalive 512;"));
        assert!(c.contains("listen 127.0.0.1:8001 ssl reuseport;"));
        assert!(c.contains("ssl_verify_client on;"));
        assert!(c.contains("proxy_pass http://next;"));
    }

    #[test]
    fn caddy_plain_hop_is_one_site() {
        let c = caddy_config(&hop(Layer::L7, false));
        assert!(
            c.contains("http://:8001 {\n  bind 127.0.0.1\n  reverse_proxy 127.0.0.1:8002\n}"),
            "{c}"
        );
    }
}
