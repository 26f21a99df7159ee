//! `meshbench gen gateway` against the real thing: nginx, haproxy and caddy (Debian packages,
//! installed if missing) and Envoy (scripts/install-envoy.sh) started on the generated
//! configuration at 100 domains x 10 paths over TLS, loaded with the generated targets file so
//! that every route is asked once, while a recording upstream checks what arrived (path
//! rewritten to `/`, host kept). Istio's YAML, which needs a cluster, is parsed back.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use meshbench_lab::program::envoy;
use meshbench_lab::Program;

const LIMIT: Duration = Duration::from_secs(120);
const DOMAINS: usize = 100;
const PATHS: usize = 10;

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("meshbench-gw-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn generate(flavor: &str, backend: SocketAddr, listen: SocketAddr, dir: &Path, extra: &[&str]) {
    let (domains, paths) = (DOMAINS.to_string(), PATHS.to_string());
    let (b, l, o) = (
        backend.to_string(),
        listen.to_string(),
        dir.display().to_string(),
    );
    let mut args = vec![
        "gen",
        "gateway",
        "--for",
        flavor,
        "--domains",
        &domains,
        "--paths",
        &paths,
        "--backend",
        &b,
        "--listen",
        &l,
        "--out",
        &o,
    ];
    args.extend_from_slice(extra);
    let out = meshbench(&args, LIMIT);
    assert!(out.status.success(), "{flavor}: {}", stderr(&out));
    assert!(stdout(&out).contains("1000 routes"), "{}", stdout(&out));
}

/// Loads every route once through a running gateway and checks what reached the upstream.
fn every_route_answers(flavor: Program) {
    let upstream = RecordingServer::start();
    let listen = free_addr();
    let dir = out_dir(flavor.name());
    generate(flavor.name(), upstream.addr, listen, &dir, &["--tls"]);
    let gw = start_gateway(flavor, &dir, listen)
        .unwrap_or_else(|e| panic!("{} starts: {e}", flavor.name()));
    let targets = dir.join("targets.txt").display().to_string();
    let ca = dir.join("ca.pem").display().to_string();
    let connect_to = format!("::127.0.0.1:{}", listen.port());
    let base = [
        "--targets",
        &targets,
        "--connect-to",
        &connect_to,
        "--cacert",
        &ca,
    ];

    // Round-robin over the 1,000 targets with 1,000 requests: each route exactly once.
    let mut args = base.to_vec();
    args.extend(["-n", "1000", "-c", "16", "-t", "1", "--timeout", "20s"]);
    let (out, r) = run_json(&format!("gw-{}", flavor.name()), &args, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        u(&r, "/status_codes/200"),
        1000,
        "{}: {} {}; log: {}",
        flavor.name(),
        r["status_codes"],
        r["errors"],
        gw.log_tail()
    );
    assert_eq!(u(&r, "/settings/targets"), 1000);
    assert_eq!(u(&r, "/settings/hosts"), DOMAINS as u64);
    let hosts = r["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), DOMAINS);
    assert!(
        hosts
            .iter()
            .all(|h| h["requests"] == PATHS as u64 && h["errors"] == 0),
        "every domain answered each of its paths: {hosts:?}"
    );
    let seen = upstream.take();
    assert_eq!(
        seen.len(),
        1000,
        "{}: the upstream saw every request",
        flavor.name()
    );
    assert!(
        seen.iter().all(|s| s.target == "/"),
        "{}: every path rewritten to /: {:?}",
        flavor.name(),
        seen.iter().find(|s| s.target != "/")
    );
    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    for s in &seen {
        let host = s.host.split(':').next().unwrap_or("").to_string();
        *per_host.entry(host).or_default() += 1;
    }
    assert_eq!(
        per_host.len(),
        DOMAINS,
        "{}: hosts {per_host:?}",
        flavor.name()
    );
    assert!(per_host.values().all(|&n| n == PATHS), "{per_host:?}");

    // HTTP/2 over TLS through the gateway, random order.
    let mut args = base.to_vec();
    args.extend([
        "--http2",
        "--streams",
        "4",
        "--target-order",
        "random",
        "-n",
        "1000",
        "-c",
        "4",
    ]);
    let (_, r) = run_json(&format!("gw-h2-{}", flavor.name()), &args, LIMIT);
    assert_eq!(
        u(&r, "/status_codes/200"),
        1000,
        "{}: {}",
        flavor.name(),
        r["errors"]
    );
    assert_eq!(upstream.take().len(), 1000);

    // A path outside the generated routes is not proxied.
    let url = format!(
        "https://workspace-1-domain-7.com:{}/get/{}",
        listen.port(),
        PATHS + 1
    );
    let (_, r) = run_json(
        &format!("gw-404-{}", flavor.name()),
        &[
            &url,
            "--connect-to",
            &connect_to,
            "--cacert",
            &ca,
            "-n",
            "5",
            "-c",
            "1",
        ],
        LIMIT,
    );
    assert_eq!(
        u(&r, "/status_codes/404"),
        5,
        "{}: {}",
        flavor.name(),
        r["status_codes"]
    );
    assert!(upstream.take().is_empty());
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nginx_gateway_routes_every_domain_and_path() {
    every_route_answers(Program::Nginx);
}

#[test]
fn haproxy_gateway_routes_every_domain_and_path() {
    every_route_answers(Program::Haproxy);
}

#[test]
fn caddy_gateway_routes_every_domain_and_path() {
    every_route_answers(Program::Caddy);
}

#[test]
fn plain_http_gateway_with_a_shared_certificate_layout() {
    // Without TLS the same routes work; the shared layout writes one certificate.
    let upstream = RecordingServer::start();
    let listen = free_addr();
    let dir = out_dir("plain");
    generate("haproxy", upstream.addr, listen, &dir, &[]);
    let _gw = start_gateway(Program::Haproxy, &dir, listen).expect("haproxy starts");
    let targets = dir.join("targets.txt").display().to_string();
    let (_, r) = run_json(
        "gw-plain",
        &[
            "--targets",
            &targets,
            "--connect-to",
            &format!("::127.0.0.1:{}", listen.port()),
            "-n",
            "1000",
            "-c",
            "8",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/status_codes/200"), 1000, "{}", r["errors"]);
    assert_eq!(upstream.take().len(), 1000);
    // h2c through the same port: haproxy tells it from HTTP/1.1 by the preface.
    let (_, r) = run_json(
        "gw-h2c",
        &[
            "--targets",
            &targets,
            "--connect-to",
            &format!("::127.0.0.1:{}", listen.port()),
            "--http2",
            "--streams",
            "8",
            "-n",
            "500",
            "-c",
            "2",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/status_codes/200"), 500, "{}", r["errors"]);
    assert_eq!(upstream.take().len(), 500);
    let shared = out_dir("shared");
    generate(
        "nginx",
        upstream.addr,
        listen,
        &shared,
        &["--tls", "--certs", "shared"],
    );
    let certs: Vec<_> = std::fs::read_dir(shared.join("certs")).unwrap().collect();
    assert_eq!(certs.len(), 3, "shared.crt, shared.key, shared.pem");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&shared);
}

/// Regression (issue 23): the bootstrap matched filter chains by SNI without a
/// `tls_inspector`, so Envoy never saw a server name and closed every connection ("no matching
/// filter chain found") while `envoy --mode validate` accepted it. Proven by serving: every
/// route of every domain, through a real Envoy started as the README says, answers 200.
#[test]
fn envoy_gateway_serves_every_domain_and_path_by_sni() {
    let envoy = meshbench_lab::program::envoy::binary()
        .unwrap_or_else(|e| panic!("Envoy is not installed: run scripts/install-envoy.sh ({e})"));
    let dir = out_dir("envoy-validate");
    generate("envoy", free_addr(), free_addr(), &dir, &["--tls"]);
    let check = std::process::Command::new(&envoy)
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "--config-path",
        ])
        .arg(dir.join(envoy::CONFIG))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", stderr(&check));
    every_route_answers(Program::Envoy);
}

/// What `gen gateway` printed under `heading` (its indented lines).
fn printed(out: &str, heading: &str) -> Vec<String> {
    out.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim_start().to_string())
        .collect()
}

/// `line` run by `sh` in `cwd`, its output piped.
fn shell(line: &str, cwd: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", line])
        .current_dir(cwd)
        .stdin(std::process::Stdio::null());
    cmd
}

/// Regression (issue 24): `gen gateway --out gw` (a relative directory, as the README writes
/// it) wrote configurations that named their own files relative to where they were written:
/// nginx looked for gw/gw/routes.conf, haproxy's ACL lists were not found when it started
/// elsewhere ("no such ACL"), and nothing said how to start the gateway. Generated in one
/// directory, then started by the printed start command and loaded by the printed run command
/// from another, every route answers through the real program.
fn printed_commands_work_from_another_directory(program: Program) {
    let upstream = RecordingServer::start();
    let listen = free_addr();
    let (generated_in, started_in) = (scratch_dir("gen-cwd"), scratch_dir("start-cwd"));
    let (b, l, admin) = (
        upstream.addr.to_string(),
        listen.to_string(),
        free_addr().to_string(),
    );
    let mut gen = std::process::Command::new(bin());
    gen.args([
        "gen",
        "gateway",
        "--for",
        program.name(),
        "--domains",
        "3",
        "--paths",
        "2",
        "--tls",
        "--backend",
        &b,
        "--listen",
        &l,
        "--out",
        "gw",
    ]);
    if program == Program::Envoy {
        // Its admin endpoint where no other Envoy is (the default is Istio's 15000).
        gen.args(["--admin", &admin]);
    }
    gen.current_dir(&generated_in)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = wait_with_limit(&mut gen.spawn().unwrap(), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let start = printed(&text, "start it with:");
    let load = printed(&text, "load every route with:");
    assert_eq!(start.len(), 1, "one start command: {text}");
    assert_eq!(load.len(), 1, "one run command: {text}");

    let gw = LabRole::start(
        program.name(),
        shell(&format!("exec {}", start[0]), &started_in),
        listen,
        &started_in,
    )
    .unwrap_or_else(|e| panic!("{} starts as printed ({}): {e}", program.name(), start[0]));
    let json = temp_json(&format!("printed-{}", program.name()));
    let line = format!("{} -n 60 -c 2 -q --json {}", load[0], json.display());
    let run = wait_with_limit(
        &mut shell(&line, &started_in)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        LIMIT,
    );
    assert!(run.status.success(), "{line}: {}", stderr(&run));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(
        u(&r, "/status_codes/200"),
        60,
        "{}: {} {}; log: {}",
        program.name(),
        r["status_codes"],
        r["errors"],
        gw.log_tail()
    );
    assert_eq!(u(&r, "/settings/hosts"), 3, "every domain asked");
    assert_eq!(
        upstream.take().len(),
        60,
        "every request reached the backend"
    );
    drop(gw);
    let _ = std::fs::remove_dir_all(&generated_in);
    let _ = std::fs::remove_dir_all(&started_in);
}

#[test]
fn nginx_gateway_runs_as_printed_from_another_directory() {
    printed_commands_work_from_another_directory(Program::Nginx);
}

#[test]
fn haproxy_gateway_runs_as_printed_from_another_directory() {
    printed_commands_work_from_another_directory(Program::Haproxy);
}

#[test]
fn caddy_gateway_runs_as_printed_from_another_directory() {
    printed_commands_work_from_another_directory(Program::Caddy);
}

#[test]
fn envoy_gateway_runs_as_printed_from_another_directory() {
    envoy::binary()
        .unwrap_or_else(|e| panic!("Envoy is not installed: run scripts/install-envoy.sh ({e})"));
    printed_commands_work_from_another_directory(Program::Envoy);
}

/// Regression (issue 24): `--for istio --backend 127.0.0.1:18080` routed every request to
/// backend.default.svc.cluster.local:18080 without a word, and its run command had no
/// `--connect-to`, so the generated host names reached nothing. Now a ServiceEntry names the
/// backend at the address given, the routes go to it, the output says how the traffic gets
/// there, and the run command connects to the ingress's address asked of the cluster.
#[test]
fn istio_routes_to_the_backend_given_and_its_run_command_reaches_the_ingress() {
    use meshbench_k8s::objects::istio::Resolution;
    use meshbench_lab::istio::objects::{self as istio_objects, ServiceEntry, VirtualService};
    let dir = out_dir("istio-backend");
    let o = dir.display().to_string();
    let out = meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "istio",
            "--domains",
            "2",
            "--paths",
            "2",
            "--tls",
            "--backend",
            "10.1.2.3:18080",
            "--out",
            &o,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let entries: Vec<ServiceEntry> =
        istio_objects::parse_all(&read("istio-serviceentry.yaml")).unwrap();
    assert_eq!(entries.len(), 1);
    // parse_all checks each document's kind (ServiceEntry).
    let spec = &entries[0].spec;
    assert_eq!(spec.resolution, Resolution::Static);
    assert_eq!(spec.endpoints.len(), 1);
    assert_eq!(spec.endpoints[0].address, "10.1.2.3");
    assert_eq!(spec.ports[0].number, 18080);
    let services: Vec<VirtualService> =
        istio_objects::parse_all(&read("istio-virtualservices.yaml")).unwrap();
    for vs in &services {
        for route in &vs.spec.http {
            let to = &route.route[0].destination;
            assert_eq!(
                (to.host.as_str(), to.port.number),
                (spec.hosts[0].as_str(), 18080),
                "every route goes to the ServiceEntry's host"
            );
        }
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("note: ") && l.contains("10.1.2.3")),
        "the output says where the traffic goes: {text}"
    );
    let apply = printed(&text, "apply it to the cluster with:");
    assert_eq!(apply.len(), 1, "{text}");
    for file in [
        "istio-secrets.yaml",
        "istio-serviceentry.yaml",
        "istio-gateways.yaml",
        "istio-virtualservices.yaml",
    ] {
        assert!(
            apply[0].contains(&format!("-f {}", dir.join(file).display())),
            "{file} applied: {}",
            apply[0]
        );
    }
    let load = printed(&text, "load every route with:");
    assert_eq!(load.len(), 2, "the ingress's address, then the run: {text}");
    assert!(
        load[0].starts_with("INGRESS_HOST=$(kubectl "),
        "{}",
        load[0]
    );
    assert!(
        load[1].contains(" --connect-to \"::$INGRESS_HOST:443\""),
        "{}",
        load[1]
    );
    // A loopback backend is each gateway pod itself: said plainly.
    let out = meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "istio",
            "--backend",
            "127.0.0.1:18080",
            "--out",
            &o,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("note: 127.0.0.1 is") && l.contains("--backend")),
        "{}",
        stdout(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn istio_yaml_parses_back_into_gateways_and_virtual_services() {
    use meshbench_lab::istio::objects::{self as istio_objects, Gateway, Secret, VirtualService};
    let dir = out_dir("istio");
    generate(
        "istio",
        "127.0.0.1:8080".parse().unwrap(),
        free_addr(),
        &dir,
        &["--tls"],
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let gateways: Vec<Gateway> = istio_objects::parse_all(&read("istio-gateways.yaml")).unwrap();
    let services: Vec<VirtualService> =
        istio_objects::parse_all(&read("istio-virtualservices.yaml")).unwrap();
    let secrets: Vec<Secret> = istio_objects::parse_all(&read("istio-secrets.yaml")).unwrap();
    assert_eq!(gateways.len(), 1, "100 domains are one workspace");
    // parse_all checks each document's kind (Gateway, VirtualService, Secret).
    assert_eq!(gateways[0].spec.servers.len(), DOMAINS);
    let server = &gateways[0].spec.servers[3];
    assert_eq!(server.hosts, ["workspace-1-domain-4.com"]);
    assert_eq!(
        server.tls.as_ref().unwrap().credential_name,
        "workspace-1-domain-4.com-cert"
    );
    assert_eq!(services.len(), DOMAINS);
    for vs in &services {
        assert_eq!(vs.spec.gateways, ["istio-system/workspace-1-gateway"]);
        assert_eq!(vs.spec.http.len(), PATHS);
        for (i, route) in vs.spec.http.iter().enumerate() {
            assert_eq!(route.matches[0].uri.exact, Some(format!("/get/{}", i + 1)));
            assert_eq!(route.rewrite.as_ref().unwrap().uri, "/");
            assert_eq!(route.route[0].destination.port.number, 8080);
        }
    }
    assert_eq!(secrets.len(), DOMAINS);
    assert_eq!(secrets[0].type_.as_deref(), Some("kubernetes.io/tls"));
    // Read back from base64 as the Secret's type reads `data`.
    let crt = secrets[0].data.as_ref().unwrap()["tls.crt"].0.clone();
    assert!(String::from_utf8(crt)
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));

    // gRPC in the clear: a GRPC port per domain, the methods routed without a rewrite.
    let dir = out_dir("istio-grpc");
    let out = meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "istio",
            "--grpc",
            "--domains",
            "3",
            "--backend",
            "127.0.0.1:8080",
            "--out",
            dir.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let gateways: Vec<Gateway> = istio_objects::parse_all(&read("istio-gateways.yaml")).unwrap();
    assert!(gateways[0]
        .spec
        .servers
        .iter()
        .all(|s| s.port.protocol == "GRPC"));
    let services: Vec<VirtualService> =
        istio_objects::parse_all(&read("istio-virtualservices.yaml")).unwrap();
    for vs in &services {
        let exact: Vec<&str> = vs
            .spec
            .http
            .iter()
            .map(|r| r.matches[0].uri.exact.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(
            exact,
            ["/fgrpc.PingServer/Ping", "/grpc.health.v1.Health/Check"]
        );
        assert!(vs.spec.http.iter().all(|r| r.rewrite.is_none()));
    }
}

#[test]
fn the_study_scale_generates_for_every_gateway() {
    // 1,000 domains x 100 paths: what the capacity study configured.
    for flavor in ["nginx", "haproxy", "caddy", "envoy", "istio"] {
        let dir = out_dir(&format!("study-{flavor}"));
        let (b, l, o) = (
            "127.0.0.1:8080",
            "127.0.0.1:8443",
            dir.display().to_string(),
        );
        let out = meshbench(
            &[
                "gen",
                "gateway",
                "--for",
                flavor,
                "--domains",
                "1000",
                "--paths",
                "100",
                "--tls",
                "--backend",
                b,
                "--listen",
                l,
                "--out",
                &o,
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{flavor}: {}", stderr(&out));
        assert!(stdout(&out).contains("100000 routes"), "{}", stdout(&out));
        let certs = std::fs::read_dir(dir.join("certs")).unwrap().count();
        assert_eq!(certs, 3000, "{flavor}: crt, key and pem per domain");
        let targets = std::fs::read_to_string(dir.join("targets.txt")).unwrap();
        assert!(
            targets.contains("workspace-{1..10}-domain-{1..100}.com"),
            "{targets}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
