//! caddy: a Debian package, installed with apt-get when missing; L7 only (Debian's caddy has no
//! L4 proxy). A hop is one site with `reverse_proxy` to the next hop. The gateway is one site
//! block per domain with its certificate, a path matcher listing the routes, `rewrite * /` and
//! `reverse_proxy` to the backend; 404 for anything else. Automatic HTTPS and the admin
//! endpoint are off (the lab's CA signs everything); storage stays in the role's directory, and
//! GOMAXPROCS is the role's worker count.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{p, Hop, Run};
use crate::gateway::GatewayPlan;
use crate::{install, write_file, LabError};
use meshbench_results::Layer;

/// The gateway's configuration file.
pub const CONFIG: &str = "Caddyfile";
pub const VERSION_FLAG: &str = "version";

/// Where caddy is looked for besides PATH.
pub const LOCATIONS: &[&str] = &["/usr/bin/caddy"];

/// The caddy binary, installing the Debian package first if there is none.
pub fn binary() -> Result<PathBuf, LabError> {
    install::program("caddy", LOCATIONS)
}

/// `caddy run` on the Caddyfile, its home and data in the role's directory.
pub fn command(bin: &Path, run: &Run) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--adapter", "caddyfile", "--config"])
        .arg(run.config)
        .env("HOME", run.dir)
        .env("XDG_DATA_HOME", run.dir.join("caddy-data"))
        .env("XDG_CONFIG_HOME", run.dir.join("caddy-config"))
        .env("GOMAXPROCS", run.workers.max(1).to_string());
    cmd
}

/// A hop: one site, `reverse_proxy` with the upstream's TLS settings (L7 only).
pub fn hop_config(hop: &Hop) -> Result<String, LabError> {
    if hop.layer == Layer::L4 {
        return Err(LabError::Missing {
            program: "caddy layer4".into(),
            hint: "Debian's caddy has no L4 proxy; use haproxy or nginx for tunnels".into(),
        });
    }
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
    // The lines of `transport http { ... }`, then the other lines of `reverse_proxy`.
    let mut transport: Vec<String> = Vec::new();
    let mut proxy: Vec<String> = Vec::new();
    if let Some(t) = &hop.upstream_tls {
        transport.push("tls".into());
        transport.push(format!("tls_trusted_ca_certs {}", p(&t.ca)));
        transport.push(format!("tls_server_name {}", t.server_name));
        if let Some((cert, key)) = &t.client {
            transport.push(format!("tls_client_auth {} {}", p(cert), p(key)));
        }
        if hop.grpc {
            transport.push("versions 2".into());
            // Over HTTP/2 a TLS server answers 421 to a Host its certificate does not name.
            proxy.push(format!("header_up Host {}", t.server_name));
        }
    } else if hop.grpc {
        // HTTP/2 in the clear to the upstream (prior knowledge).
        transport.push("versions h2c 2".into());
    }
    let mut block = String::new();
    if !transport.is_empty() || !proxy.is_empty() {
        block.push_str(" {\n");
        if !transport.is_empty() {
            block.push_str("    transport http {\n");
            for line in &transport {
                let _ = writeln!(block, "      {line}");
            }
            block.push_str("    }\n");
        }
        for line in &proxy {
            let _ = writeln!(block, "    {line}");
        }
        block.push_str("  }");
    }
    Ok(format!(
        "{globals}
{scheme}://:{port} {{
  bind {ip}
{site}  reverse_proxy {up}{block}
}}
",
        globals = globals(
            &hop.dir,
            hop.http2,
            hop.listen_tls.is_some(),
            hop.http3,
            None
        ),
        port = hop.listen.port(),
        ip = hop.listen.ip(),
        up = hop.upstream,
    ))
}

/// The gateway: one `Caddyfile`.
pub fn write_gateway(plan: &GatewayPlan) -> Result<Vec<PathBuf>, LabError> {
    let d = plan.out.display();
    let paths: Vec<String> = plan.path_list().collect();
    let matcher = paths.join(" ");
    let port = plan.listen.port();
    let mut sites = String::new();
    for domain in plan.domain_names() {
        let _ = writeln!(
            sites,
            "{scheme}://{domain}:{port} {{\n  bind {ip}",
            scheme = plan.scheme(),
            ip = plan.listen.ip()
        );
        if plan.tls {
            let (crt, key) = plan.cert_files(&domain);
            let _ = writeln!(sites, "  tls {d}/{crt} {d}/{key}");
        }
        // gRPC: the method's path unchanged, HTTP/2 to the backend (h2c).
        let (rewrite, transport) = if plan.grpc {
            (
                "",
                "      transport http {\n        versions h2c 2\n      }\n",
            )
        } else {
            ("    rewrite * /\n", "")
        };
        // Several replicas: in turn (Caddy's default picks one at random).
        let balance = match plan.backends.len() {
            1 => "",
            _ => "      lb_policy round_robin\n",
        };
        let options = match format!("{balance}{transport}") {
            o if o.is_empty() => o,
            o => format!(" {{\n{o}    }}"),
        };
        let upstreams: Vec<String> = plan.backends.iter().map(|b| b.to_string()).collect();
        let _ = writeln!(
            sites,
            "  @routes path {matcher}\n  handle @routes {{\n{rewrite}    reverse_proxy {}{options}\n  }}\n  respond 404\n}}",
            upstreams.join(" ")
        );
    }
    let conf = format!(
        "# generated by meshbench gen gateway: {domains} domains x {npaths} paths -> {backend}
{globals}

{sites}",
        domains = plan.domains,
        npaths = plan.paths,
        backend = plan.backends_named(),
        globals = globals(
            &plan.out,
            plan.http2 || plan.grpc,
            plan.tls,
            plan.http3,
            Some(&admin_socket(&plan.out)),
        ),
    );
    Ok(vec![write_file(plan.path(CONFIG), conf)?])
}

/// Where a gateway's caddy listens for its admin API (a unix socket in its directory, reached
/// by no one else): what a change is told through.
pub fn admin_socket(dir: &Path) -> PathBuf {
    dir.join("caddy-admin.sock")
}

/// Caddy's global options as the lab runs it: its admin API on `admin`'s socket (a gateway's,
/// which changes are told through) or none, no automatic HTTPS (the lab's CA signs
/// everything), storage in `dir`, the HTTP versions offered (HTTP/3 over UDP on the same port
/// when asked: TLS only), errors only.
fn globals(dir: &Path, http2: bool, tls: bool, http3: bool, admin: Option<&Path>) -> String {
    let protocols = match (http2, tls, http3) {
        (_, true, true) => "h1 h2 h3",
        (true, true, false) => "h1 h2",
        (true, false, _) => "h1 h2c",
        (false, _, _) => "h1",
    };
    let admin = match admin {
        Some(socket) => format!("unix/{}", socket.display()),
        None => "off".into(),
    };
    format!(
        "{{
  admin {admin}
  auto_https off
  storage file_system {d}/caddy-data
  servers {{
    protocols {protocols}
  }}
  log {{
    level ERROR
  }}
}}",
        d = dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::tests::hop;

    #[test]
    fn caddy_plain_hop_is_one_site() {
        let c = hop_config(&hop(Layer::L7, false)).unwrap();
        assert!(
            c.contains("http://:8001 {\n  bind 127.0.0.1\n  reverse_proxy 127.0.0.1:8002\n}"),
            "{c}"
        );
    }
}
