//! haproxy: a Debian package, installed with apt-get when missing. A hop is one frontend and
//! one backend, `mode http` with connection reuse at L7 or `mode tcp` at L4. The gateway is one
//! frontend; TLS certificates chosen by SNI from a `crt-list`; requests whose host and path are
//! both known (looked up in `domains.lst` and `paths.lst`, so the configuration stays small at
//! 1,000 x 100) get their path set to `/` and go to the backend over reused connections;
//! anything else gets 404. On a plain port haproxy tells h2c from HTTP/1.1 by the connection
//! preface. Run in the foreground (`-db`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{p, Hop, Run};
use crate::gateway::GatewayPlan;
use crate::{install, write_file, LabError};
use meshbench_results::Layer;

/// The gateway's configuration file.
pub const CONFIG: &str = "haproxy.cfg";
pub const VERSION_FLAG: &str = "-v";

/// Where haproxy is looked for besides PATH.
pub const LOCATIONS: &[&str] = &["/usr/sbin/haproxy"];

/// The haproxy binary, installing the Debian package first if there is none.
pub fn binary() -> Result<PathBuf, LabError> {
    install::program("haproxy", LOCATIONS)
}

/// Master-worker mode: the master re-reads its configuration on `SIGUSR2` and hands its
/// listening sockets to new workers while the old ones finish (haproxy's seamless reload).
pub const MASTER_WORKER: &str = "-W";

/// In the foreground, logging to stderr.
pub fn command(bin: &Path, run: &Run) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("-db").arg("-f").arg(run.config);
    cmd
}

/// A hop: one frontend and one backend, `mode http` (connection reuse on) or `mode tcp`.
/// Certificates are given as PEM files holding the certificate and its key.
pub fn hop_config(hop: &Hop) -> Result<String, LabError> {
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
    if hop.grpc && hop.layer == Layer::L7 {
        // HTTP/2 to the upstream: ALPN over TLS, prior knowledge in the clear.
        server.push_str(if hop.upstream_tls.is_some() {
            " alpn h2"
        } else {
            " proto h2"
        });
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

fn combined_pem(dir: &Path, stem: &str, cert: &Path, key: &Path) -> Result<PathBuf, LabError> {
    let read = |f: &Path| {
        std::fs::read_to_string(f).map_err(|e| LabError::Files {
            path: f.to_path_buf(),
            source: e,
        })
    };
    write_file(
        dir.join(format!("{stem}.pem")),
        format!("{}{}", read(cert)?, read(key)?),
    )
}

/// The gateway: the domain and path lists, the `crt-list` with TLS, and `haproxy.cfg`.
pub fn write_gateway(plan: &GatewayPlan) -> Result<Vec<PathBuf>, LabError> {
    let d = plan.out.display();
    let mut files = Vec::new();
    let mut domains = String::new();
    for name in plan.domain_names() {
        let _ = writeln!(domains, "{name}");
    }
    files.push(write_file(plan.path("domains.lst"), domains)?);
    let mut paths = String::new();
    for p in plan.path_list() {
        let _ = writeln!(paths, "{p}");
    }
    files.push(write_file(plan.path("paths.lst"), paths)?);
    let bind = if plan.tls {
        let mut list = String::new();
        for name in plan.domain_names() {
            let (crt, _) = plan.cert_files(&name);
            let pem = crt.trim_end_matches(".crt");
            let _ = writeln!(list, "{d}/{pem}.pem {name}");
        }
        files.push(write_file(plan.path("crt-list.txt"), list)?);
        format!(
            " ssl crt-list {d}/crt-list.txt alpn {}",
            plan.alpn().join(",")
        )
    } else if plan.grpc {
        // gRPC in the clear: h2c with prior knowledge.
        " proto h2".to_string()
    } else {
        String::new()
    };
    // gRPC: the method's path unchanged, HTTP/2 to the backend (h2c).
    let (set_path, server_proto) = if plan.grpc {
        ("", " proto h2")
    } else {
        ("  http-request set-path /\n", "")
    };
    let cfg = format!(
        "# generated by meshbench gen gateway: {domains} domains x {npaths} paths -> {backend}
global
  maxconn 8000
  nbthread {workers}
  tune.ssl.default-dh-param 2048

defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
  option http-keep-alive

frontend gateway
  bind {listen}{bind}
  http-request set-var(txn.host) req.hdr(host),field(1,:),lower
  acl known_domain var(txn.host) -m str -f {d}/domains.lst
  acl known_path path -m str -f {d}/paths.lst
  http-request deny deny_status 404 unless known_domain known_path
{set_path}  default_backend meshbench_backend

backend meshbench_backend
  balance roundrobin
  http-reuse always
{servers}",
        domains = plan.domains,
        npaths = plan.paths,
        backend = plan.backends_named(),
        servers = plan
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| format!("  server backend{} {b} maxconn 4000{server_proto}\n", i + 1))
            .collect::<String>(),
        workers = plan.workers,
        listen = plan.listen,
    );
    files.push(write_file(plan.path(CONFIG), cfg)?);
    Ok(files)
}
