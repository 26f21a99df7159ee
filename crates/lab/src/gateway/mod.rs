//! `meshbench gen gateway`: the configuration of an ingress gateway that serves N domains x M
//! paths, every route sent to one backend with its path rewritten to `/` (as the capacity study's
//! VirtualService does), with a CA and the domains' certificates.
//!
//! One plan ([`GatewayPlan`]) is written for one [`Target`]: a program the lab starts
//! (`program::Program`: nginx, haproxy, caddy and Envoy render their own configuration
//! in their own modules) or Istio ([`crate::istio::objects::Istio`]: Gateway, VirtualService and Secret YAML for
//! a Kubernetes cluster). This module writes what every target shares: the CA, the
//! certificates, and `targets.txt`, a `--targets` file whose templates cover every route once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::pki::{Ca, Issued, Usage};
use crate::{write_file, LabError};

/// Domains per workspace in generated names (`workspace-{w}-domain-{d}.com`, as in the study).
pub const DOMAINS_PER_WORKSPACE: usize = 100;

/// What a gateway configuration is written for (plain data: a change rewrites it from the
/// thread that applies the step's changes).
pub trait Target: Send {
    /// Its name in messages and in the targets file.
    fn name(&self) -> &'static str;

    /// Serves HTTP/3 (QUIC on the listener's port over UDP) when the plan asks for it.
    fn speaks_http3(&self) -> bool {
        false
    }

    /// Why it cannot serve HTTP/3 here, and what to use instead.
    fn no_http3(&self) -> String {
        format!(
            "{} renders no HTTP/3 listener; use caddy or envoy",
            self.name()
        )
    }

    /// Reached by host name on the scheme's default port (a cluster's ingress), rather than
    /// at the plan's `listen` address.
    fn by_name(&self) -> bool {
        false
    }

    /// Writes its configuration for `plan` into the plan's directory, beside the certificates
    /// (`certs`: each file stem with what was issued).
    fn write(
        &self,
        plan: &GatewayPlan,
        certs: &[(String, Issued)],
    ) -> Result<Vec<PathBuf>, LabError>;

    /// Shell lines that start the gateway on what [`Target::write`] wrote (`written`), valid
    /// from any directory.
    fn start(&self, plan: &GatewayPlan, written: &[PathBuf]) -> Result<Vec<String>, LabError>;

    /// What the start lines do, as the heading they are printed under.
    fn start_heading(&self) -> &'static str {
        "start it with"
    }

    /// How `meshbench run` reaches the gateway for the targets' host names: the shell lines
    /// to run first, and the `--connect-to` value as one shell word.
    fn connect_to(&self, plan: &GatewayPlan) -> (Vec<String>, String) {
        (
            Vec::new(),
            shell_word(&format!("::{}:{}", plan.listen.ip(), plan.listen.port())),
        )
    }

    /// What the printed commands alone do not say about where the traffic goes.
    fn notes(&self, _plan: &GatewayPlan) -> Vec<String> {
        Vec::new()
    }
}

/// `word` as one word of a POSIX shell line: as it is when it holds nothing the shell reads,
/// else in single quotes.
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// A command as one POSIX shell line: its environment first (through `env`), then the
/// program and its arguments, each quoted as [`shell_word`] quotes it. The working directory
/// is not part of the line: what it names must hold from anywhere.
pub fn shell_line(cmd: &std::process::Command) -> String {
    let mut words = Vec::new();
    let envs: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            v.map(|v| shell_word(&format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))
        })
        .collect();
    if !envs.is_empty() {
        words.push("env".to_string());
        words.extend(envs);
    }
    words.push(shell_word(&cmd.get_program().to_string_lossy()));
    words.extend(cmd.get_args().map(|a| shell_word(&a.to_string_lossy())));
    words.join(" ")
}

/// How certificates are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertLayout {
    /// One certificate and key per domain, chosen by SNI.
    PerDomain,
    /// One certificate whose names cover every domain.
    Shared,
}

/// Most routes (domains x paths) a generated gateway may serve: every route is a line of the
/// gateway's configuration and a request the load generator prepares, so a mistyped count must
/// not become billions of them. The results crate's, so that the experiment file is checked
/// against it without the lab.
pub use meshbench_results::topology::MAX_ROUTES;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GatewayPlan {
    pub domains: usize,
    pub paths: usize,
    pub tls: bool,
    /// Offer HTTP/2 (ALPN h2 over TLS; h2c where the gateway supports it) besides HTTP/1.1.
    pub http2: bool,
    /// Offer HTTP/3 too: QUIC on the listener's port over UDP (needs `tls`).
    pub http3: bool,
    /// Carry gRPC: each domain's routes are the backend's gRPC methods ([`GRPC_ROUTES`]),
    /// forwarded unchanged over HTTP/2 (h2c to the backend); `paths` does not apply.
    pub grpc: bool,
    pub certs: CertLayout,
    /// Where the backend's replicas listen (at least one), every one on the same port, each
    /// on its own address (a Service, a ServiceEntry and an EndpointSlice name one port): the
    /// gateway balances over them, round robin.
    pub backends: Vec<SocketAddr>,
    /// Where the gateway listens (a program's; Istio's is the cluster's ingress).
    pub listen: SocketAddr,
    /// Worker processes or threads of the gateway.
    pub workers: usize,
    /// Where the gateway's own admin endpoint listens, for the programs that have one
    /// (Envoy's: stats and memory, read by the lab after each step).
    pub admin: Option<SocketAddr>,
    pub out: PathBuf,
    /// Envoy only: per-hop attribution's log of the tagged requests (`None`: off).
    pub access_log: Option<PathBuf>,
    /// Envoy only: its listeners in a file of their own read through file-based xDS (LDS), so
    /// that a change is that file replaced by a rename (`meshbench_lab::change`); off: in the
    /// bootstrap.
    pub listeners_file: bool,
    /// Times each certificate was issued again under load (by file stem: a domain, or
    /// `shared`): a rotated one is read from `certs/STEM.N.crt`, so that every gateway reading
    /// files is told of new names, as a user rotating certificates on disk does.
    pub rotated: BTreeMap<String, usize>,
}

impl GatewayPlan {
    /// The backend's first replica: its port is every replica's.
    pub fn backend(&self) -> SocketAddr {
        self.backends[0]
    }

    /// The backend's replicas, as a file's header names them (`a, b`).
    pub fn backends_named(&self) -> String {
        let names: Vec<String> = self.backends.iter().map(|b| b.to_string()).collect();
        names.join(", ")
    }

    /// The n-th domain name (0-based).
    pub fn domain(&self, n: usize) -> String {
        domain_name(n)
    }

    pub fn domain_names(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.domains).map(domain_name)
    }

    /// Request paths, `/get/1` .. `/get/M`; with gRPC, the methods the backend serves.
    pub fn path_list(&self) -> Box<dyn Iterator<Item = String> + '_> {
        if self.grpc {
            Box::new(GRPC_ROUTES.iter().map(|m| m.to_string()))
        } else {
            Box::new((1..=self.paths).map(|p| format!("/get/{p}")))
        }
    }

    /// Routes per domain.
    pub fn routes_per_domain(&self) -> usize {
        if self.grpc {
            GRPC_ROUTES.len()
        } else {
            self.paths
        }
    }

    /// ALPN protocols the gateway offers.
    pub fn alpn(&self) -> &'static [&'static str] {
        if self.http2 || self.grpc {
            &["h2", "http/1.1"]
        } else {
            &["http/1.1"]
        }
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// The `kubernetes.io/tls` Secret a domain is served with in a control plane's objects
    /// (Istio's credential, Contour's `secretName`): its certificate's, per the layout.
    pub fn secret_name(&self, domain: &str) -> String {
        match self.certs {
            CertLayout::PerDomain => secret_of(domain),
            CertLayout::Shared => secret_of("shared"),
        }
    }

    /// File names of a domain's certificate and key, relative to the output directory.
    pub fn cert_files(&self, domain: &str) -> (String, String) {
        let stem = match self.certs {
            CertLayout::PerDomain => domain,
            CertLayout::Shared => "shared",
        };
        let stem = match self.rotated.get(stem) {
            Some(n) => format!("{stem}.{n}"),
            None => stem.to_string(),
        };
        (format!("certs/{stem}.crt"), format!("certs/{stem}.key"))
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.out.join(relative)
    }
}

/// The Secret that holds the certificate whose file stem is `stem` (a domain, or `shared`).
pub fn secret_of(stem: &str) -> String {
    format!("{stem}-cert")
}

/// The gRPC methods a gRPC gateway routes: fortio's ping and the standard health check, both
/// served by the backend (and by fortio's server).
pub const GRPC_ROUTES: [&str; 2] = ["/fgrpc.PingServer/Ping", "/grpc.health.v1.Health/Check"];

/// `workspace-{w}-domain-{d}.com`, 100 domains per workspace, both counted from 1.
pub fn domain_name(n: usize) -> String {
    format!(
        "workspace-{}-domain-{}.com",
        n / DOMAINS_PER_WORKSPACE + 1,
        n % DOMAINS_PER_WORKSPACE + 1
    )
}

/// What was written, and how to start and load it.
#[derive(Debug, Clone)]
pub struct Generated {
    pub files: Vec<PathBuf>,
    /// Routes configured (domains x paths).
    pub routes: usize,
    /// Where everything was written, absolute: every file refers to the others by this path.
    pub dir: PathBuf,
    /// Shell lines that start the gateway ([`Target::start`]).
    pub start: Vec<String>,
    /// Shell lines to run before `meshbench run` (finding a cluster's ingress).
    pub load_setup: Vec<String>,
    /// The arguments of a `meshbench run` that spreads requests over every route, as shell
    /// words.
    pub load_args: Vec<String>,
    /// What the commands alone do not say ([`Target::notes`]).
    pub notes: Vec<String>,
    /// The certificates issued, by file stem (a domain's name, or `shared`): what a target
    /// that carries them in its objects (Istio's Secrets) is rendered with again.
    pub certs: Vec<(String, Issued)>,
}

impl Generated {
    /// The objects a control plane's target wrote (its `.yaml` files), in the order they are
    /// applied: what one names exists before it.
    pub fn objects(&self) -> Vec<PathBuf> {
        (self.files.iter())
            .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
            .cloned()
            .collect()
    }

    /// The shell lines that load every route, `meshbench` being the program's path.
    pub fn load(&self, meshbench: &str) -> Vec<String> {
        let mut lines = self.load_setup.clone();
        lines.push(format!(
            "{} run {}",
            shell_word(meshbench),
            self.load_args.join(" ")
        ));
        lines
    }
}

/// Why a gateway plan cannot be generated, in the words of its flags.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("--domains and --paths must be at least 1")]
    Empty,
    #[error("--domains x --paths is {0} routes; at most {MAX_ROUTES} are generated")]
    TooManyRoutes(u64),
    #[error("--http3 needs --tls: QUIC is always TLS")]
    Http3WithoutTls,
}

/// Writes the CA, the certificates, the target's configuration and `targets.txt` into the
/// plan's directory, made absolute first so that what refers to a file does so from anywhere.
pub fn generate(plan: &GatewayPlan, target: &dyn Target) -> Result<Generated, LabError> {
    generate_by(plan, target, &Ca::new(CA_NAME)?)
}

/// The gateway CA's name.
pub const CA_NAME: &str = "meshbench gateway CA";

/// [`generate`] with certificates signed by `ca`, which the caller keeps to sign the domains a
/// change adds later ([`write_domain_cert`]).
pub fn generate_by(
    plan: &GatewayPlan,
    target: &dyn Target,
    ca: &Ca,
) -> Result<Generated, LabError> {
    if plan.domains == 0 || plan.paths == 0 {
        return Err(PlanError::Empty.into());
    }
    let routes = (plan.domains as u64).saturating_mul(plan.routes_per_domain() as u64);
    if routes > MAX_ROUTES {
        return Err(PlanError::TooManyRoutes(routes).into());
    }
    if plan.http3 && !plan.tls {
        return Err(PlanError::Http3WithoutTls.into());
    }
    if plan.http3 && !target.speaks_http3() {
        return Err(LabError::Missing {
            program: format!("{} with HTTP/3", target.name()),
            hint: target.no_http3(),
        });
    }
    std::fs::create_dir_all(&plan.out).map_err(|source| LabError::File {
        doing: "create",
        path: plan.out.clone(),
        source,
    })?;
    let dir = std::fs::canonicalize(&plan.out).map_err(|e| LabError::Files {
        path: plan.out.clone(),
        source: e,
    })?;
    let plan = &GatewayPlan {
        out: dir.clone(),
        ..plan.clone()
    };
    let mut files = Vec::new();
    let mut certs = Vec::new();
    if plan.tls {
        ca.write(&plan.out)?;
        files.push(plan.path("ca.pem"));
        certs = issue_certs(plan, ca)?;
        for (name, issued) in &certs {
            files.extend(write_cert(plan, name, issued)?);
        }
    }
    let written = target.write(plan, &certs)?;
    let start = target.start(plan, &written)?;
    files.extend(written);
    files.push(write_file(
        plan.path("targets.txt"),
        targets_file(plan, target),
    )?);
    let path = |p: PathBuf| shell_word(&p.display().to_string());
    let (load_setup, connect_to) = target.connect_to(plan);
    let mut load_args = vec![
        "--targets".to_string(),
        path(plan.path("targets.txt")),
        "--target-order".into(),
        "random".into(),
        "--connect-to".into(),
        connect_to,
    ];
    if plan.tls {
        load_args.extend(["--cacert".to_string(), path(plan.path("ca.pem"))]);
    }
    if plan.http3 {
        load_args.push("--http3".into());
    }
    if plan.grpc {
        load_args.push("--grpc".into());
    }
    Ok(Generated {
        files,
        routes: plan.domains * plan.routes_per_domain(),
        dir,
        start,
        load_setup,
        load_args,
        notes: target.notes(plan),
        certs,
    })
}

/// (file stem, certificate) pairs: one per domain, or one shared.
fn issue_certs(plan: &GatewayPlan, ca: &Ca) -> Result<Vec<(String, Issued)>, LabError> {
    match plan.certs {
        CertLayout::Shared => {
            let names: Vec<String> = plan.domain_names().collect();
            Ok(vec![("shared".into(), ca.issue(&names, Usage::Server)?)])
        }
        CertLayout::PerDomain => plan
            .domain_names()
            .map(|d| Ok((d.clone(), ca.issue(&[d], Usage::Server)?)))
            .collect(),
    }
}

/// Issues the `n`-th domain's certificate with `ca` and writes it where the plan's
/// configuration reads it (per-domain certificates only: a shared one names every domain).
pub fn write_domain_cert(plan: &GatewayPlan, ca: &Ca, n: usize) -> Result<Issued, LabError> {
    let name = domain_name(n);
    let issued = ca.issue(std::slice::from_ref(&name), Usage::Server)?;
    write_cert(plan, &name, &issued)?;
    Ok(issued)
}

/// Issues the first domain's certificate (or the shared one) again with `ca`, writes it under
/// new file names and counts the rotation in the plan: its file stem and the new certificate.
pub fn rotate_cert(plan: &mut GatewayPlan, ca: &Ca) -> Result<(String, Issued), LabError> {
    let (stem, names) = match plan.certs {
        CertLayout::Shared => ("shared".to_string(), plan.domain_names().collect()),
        CertLayout::PerDomain => (plan.domain(0), vec![plan.domain(0)]),
    };
    let issued = ca.issue(&names, Usage::Server)?;
    let n = plan.rotated.get(&stem).map_or(1, |n| n + 1);
    write_cert(plan, &format!("{stem}.{n}"), &issued)?;
    plan.rotated.insert(stem.clone(), n);
    Ok((stem, issued))
}

/// `NAME.crt`, `NAME.key`, and `NAME.pem` (both, as haproxy wants them) under `certs/`.
fn write_cert(plan: &GatewayPlan, name: &str, issued: &Issued) -> Result<Vec<PathBuf>, LabError> {
    Ok(vec![
        write_file(plan.path(&format!("certs/{name}.crt")), &issued.cert_pem)?,
        write_file(plan.path(&format!("certs/{name}.key")), &issued.key_pem)?,
        write_file(
            plan.path(&format!("certs/{name}.pem")),
            format!("{}{}", issued.cert_pem, issued.key_pem),
        )?,
    ])
}

/// One URL template per workspace (or per domain for a partial last workspace), so that the
/// list covers every domain x path exactly once.
pub fn targets_file(plan: &GatewayPlan, target: &dyn Target) -> String {
    let mut out = if plan.grpc {
        format!(
            "# fortio's gRPC ping on every domain of the generated {} gateway: {} domains\n",
            target.name(),
            plan.domains
        )
    } else {
        format!(
            "# every route of the generated {} gateway: {} domains x {} paths\n",
            target.name(),
            plan.domains,
            plan.paths
        )
    };
    let port = if target.by_name() {
        String::new()
    } else {
        format!(":{}", plan.listen.port())
    };
    let full = plan.domains / DOMAINS_PER_WORKSPACE;
    let scheme = plan.scheme();
    // gRPC: the ping (a call is a POST; `meshbench run --grpc` makes it one).
    let path = if plan.grpc {
        GRPC_ROUTES[0].to_string()
    } else {
        format!("/get/{{1..{}}}", plan.paths)
    };
    if full > 0 {
        out.push_str(&format!(
            "GET {scheme}://workspace-{{1..{full}}}-domain-{{1..{DOMAINS_PER_WORKSPACE}}}.com{port}{path}\n"
        ));
    }
    let rest = plan.domains % DOMAINS_PER_WORKSPACE;
    if rest > 0 {
        out.push_str(&format!(
            "GET {scheme}://workspace-{}-domain-{{1..{rest}}}.com{port}{path}\n",
            full + 1
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_the_shell_would_read_them() {
        assert_eq!(shell_word("/tmp/gw/nginx.conf"), "/tmp/gw/nginx.conf");
        assert_eq!(shell_word("::127.0.0.1:8080"), "::127.0.0.1:8080");
        assert_eq!(shell_word("HOME=/tmp/gw"), "HOME=/tmp/gw");
        assert_eq!(shell_word("/tmp/my gw"), "'/tmp/my gw'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
        let mut cmd = std::process::Command::new("/usr/bin/caddy");
        cmd.args(["run", "--config", "/tmp/a b/Caddyfile"])
            .env("HOME", "/tmp/a b")
            .current_dir("/tmp");
        assert_eq!(
            shell_line(&cmd),
            "env 'HOME=/tmp/a b' /usr/bin/caddy run --config '/tmp/a b/Caddyfile'"
        );
    }

    #[test]
    fn domain_names_follow_the_study() {
        assert_eq!(domain_name(0), "workspace-1-domain-1.com");
        assert_eq!(domain_name(99), "workspace-1-domain-100.com");
        assert_eq!(domain_name(100), "workspace-2-domain-1.com");
        assert_eq!(domain_name(999), "workspace-10-domain-100.com");
    }
}
