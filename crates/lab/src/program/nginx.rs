//! nginx: the default proxy, a Debian package installed with apt-get when missing. A hop is an
//! `http` server with an upstream keepalive pool at L7, or a `stream` server at L4 (the
//! libnginx-mod-stream package). The gateway is one `server` block per domain (its certificate
//! chosen by SNI), all including one `routes.conf` with an exact `location` per path that
//! proxies to the backend as `/` (`proxy_pass http://backend/;` replaces the matched path), over
//! pooled keep-alive upstream connections; a default server answers 404 for unknown hosts. A
//! fixed-body server ([`static_config`]) is the plain nginx the black-box tests load. Run in the
//! foreground with its prefix, configuration and early error log in the role's directory.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{p, Hop, Run};
use crate::gateway::GatewayPlan;
use crate::{install, write_file, LabError};
use meshbench_results::Layer;

/// The gateway's configuration file.
pub const CONFIG: &str = "nginx.conf";
pub const VERSION_FLAG: &str = "-v";

/// Where nginx is looked for besides PATH.
pub const LOCATIONS: &[&str] = &[
    "/usr/sbin/nginx",
    "/usr/local/sbin/nginx",
    "/usr/local/nginx/sbin/nginx",
];

/// The nginx binary, installing the Debian package first if there is none.
pub fn binary() -> Result<PathBuf, LabError> {
    install::program("nginx", LOCATIONS)
}

/// In the foreground (`daemon off` is in the configuration), prefix and early log in the
/// role's directory.
pub fn command(bin: &Path, run: &Run) -> Command {
    let d = run.dir.display();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-p".to_string(),
        d.to_string(),
        "-c".to_string(),
        p(run.config),
        "-e".to_string(),
        format!("{d}/{}.error.log", run.name),
    ]);
    cmd
}

/// nginx: `http` with an upstream keepalive pool at L7, `stream` at L4.
pub fn hop_config(hop: &Hop) -> Result<String, LabError> {
    let c = preamble(&hop.dir, hop.workers);
    let mut listen_ssl = if hop.listen_tls.is_some() { " ssl" } else { "" }.to_string();
    if hop.http2 && hop.layer == Layer::L7 {
        listen_ssl.push_str(" http2");
    }
    let (tls_in, tls_out) = (tls_in(hop), tls_out(hop));
    match hop.layer {
        Layer::L7 => Ok(l7_config(hop, c, &listen_ssl, &tls_in, tls_out)),
        Layer::L4 => l4_config(hop, c, &listen_ssl, &tls_in, &tls_out),
    }
}

/// The listener's TLS directives (and the client check for mutual TLS), or "".
fn tls_in(hop: &Hop) -> String {
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
    tls_in
}

/// The upstream's TLS directives (`proxy_ssl_*`, with a client certificate for mutual TLS),
/// or "".
fn tls_out(hop: &Hop) -> String {
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
    tls_out
}

/// An L7 hop: an `http` block that proxies (or, for gRPC, `grpc_pass`es) to the upstream.
fn l7_config(hop: &Hop, mut c: String, listen_ssl: &str, tls_in: &str, tls_out: String) -> String {
    let tls = hop.upstream_tls.is_some();
    // gRPC: grpc_pass speaks HTTP/2 to the upstream and passes trailers through; its
    // TLS directives are the proxy ones under another prefix.
    let (pass, tls_out) = if hop.grpc {
        (
            format!("grpc_pass {}://next;", if tls { "grpcs" } else { "grpc" }),
            tls_out.replace("proxy_ssl_", "grpc_ssl_"),
        )
    } else {
        (
            format!(
                "proxy_pass {}://next;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_set_header Host $host;\n      proxy_buffering off;",
                if tls { "https" } else { "http" }
            ),
            tls_out,
        )
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
      {pass}
{tls_out}    }}
  }}
}}
",
        temp = temp_paths(&hop.dir),
        up = hop.upstream,
        listen = hop.listen,
    );
    c
}

/// An L4 hop: a `stream` block (nginx's stream module, installed when missing).
fn l4_config(
    hop: &Hop,
    c: String,
    listen_ssl: &str,
    tls_in: &str,
    tls_out: &str,
) -> Result<String, LabError> {
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
    let mut c = format!("load_module {module};\n{c}");
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
    Ok(c)
}

/// The gateway: `routes.conf` and `nginx.conf` in the plan's directory.
pub fn write_gateway(plan: &GatewayPlan) -> Result<Vec<PathBuf>, LabError> {
    let d = plan.out.display();
    let mut routes = String::new();
    for path in plan.path_list() {
        if plan.grpc {
            // The method's path unchanged, HTTP/2 to the backend, trailers passed through.
            let _ = writeln!(
                routes,
                "location = {path} {{\n  grpc_pass grpc://meshbench_backend;\n}}"
            );
        } else {
            let _ = writeln!(
                routes,
                "location = {path} {{\n  proxy_pass http://meshbench_backend/;\n  proxy_http_version 1.1;\n  proxy_set_header Connection \"\";\n  proxy_set_header Host $host;\n}}"
            );
        }
    }
    let listen = plan.listen;
    let ssl = match (plan.tls, plan.http2 || plan.grpc) {
        (true, true) => " ssl http2",
        (true, false) => " ssl",
        // gRPC in the clear: h2c with prior knowledge.
        (false, _) if plan.grpc => " http2",
        (false, _) => "",
    };
    let mut servers = String::new();
    for domain in plan.domain_names() {
        let _ = writeln!(
            servers,
            "  server {{\n    listen {listen}{ssl};\n    server_name {domain};"
        );
        if plan.tls {
            let (crt, key) = plan.cert_files(&domain);
            let _ = writeln!(
                servers,
                "    ssl_certificate {d}/{crt};\n    ssl_certificate_key {d}/{key};"
            );
        }
        let _ = writeln!(servers, "    include {d}/routes.conf;\n  }}");
    }
    let default_tls = if plan.tls {
        let (crt, key) = plan.cert_files(&plan.domain(0));
        format!("    ssl_certificate {d}/{crt};\n    ssl_certificate_key {d}/{key};\n")
    } else {
        String::new()
    };
    let conf = format!(
        "# generated by meshbench gen gateway: {domains} domains x {paths} paths -> {backend}
{preamble}http {{
  access_log off;
  server_tokens off;
  keepalive_requests 1000000;
  server_names_hash_max_size 16384;
  server_names_hash_bucket_size 128;
  ssl_session_cache shared:meshbench:32m;
{temp}  upstream meshbench_backend {{
{upstreams}    keepalive 256;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }}
  server {{
    listen {listen}{ssl} default_server backlog=4096;
{default_tls}    return 404;
  }}
{servers}}}
",
        domains = plan.domains,
        paths = plan.paths,
        backend = plan.backends_named(),
        upstreams = plan
            .backends
            .iter()
            .map(|b| format!("    server {b};\n"))
            .collect::<String>(),
        preamble = preamble(&plan.out, plan.workers as u32),
        temp = temp_paths(&plan.out),
    );
    Ok(vec![
        write_file(plan.path("routes.conf"), routes)?,
        write_file(plan.path(CONFIG), conf)?,
    ])
}

/// A plain server answering every request with 200 and a body of `body_bytes` bytes.
pub fn static_config(dir: &Path, listen: SocketAddr, body_bytes: usize, workers: u32) -> String {
    format!(
        "{preamble}http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 65s;
  default_type text/plain;
  server_tokens off;
{temp}  server {{
    listen {listen} backlog=4096;
    location / {{
      return 200 \"{body}\";
    }}
  }}
}}
",
        preamble = preamble(dir, workers),
        temp = temp_paths(dir),
        body = "x".repeat(body_bytes),
    )
}

/// The main context every nginx the lab writes starts with: workers, foreground, pid and error
/// log in `dir`, file and connection limits (and `user root` when run as root, so that workers
/// can read files under a root-only temp dir).
fn preamble(dir: &Path, workers: u32) -> String {
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
fn temp_paths(dir: &Path) -> String {
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

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::tests::hop;

    #[test]
    fn nginx_l7_keeps_upstream_connections_and_asks_for_client_certificates() {
        let c = hop_config(&hop(Layer::L7, true)).unwrap();
        assert!(c.contains("worker_processes 2;"), "{c}");
        assert!(c.contains("keepalive 512;"));
        assert!(c.contains("listen 127.0.0.1:8001 ssl reuseport;"));
        assert!(c.contains("ssl_verify_client on;"));
        assert!(c.contains("proxy_pass http://next;"));
    }
}
