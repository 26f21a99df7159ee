//! gRPC against a server and a client no one here wrote: fortio (built from its Go module by
//! scripts/install-fortio.sh). meshbench calls fortio's gRPC ping server; fortio's gRPC client
//! calls meshbench's backend; both clients read the latency of the same fortio server side by
//! side; statuses are counted by grpc-status.

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

fn fortio_bin() -> PathBuf {
    let path = PathBuf::from(
        std::env::var("FORTIO").unwrap_or_else(|_| "/var/cache/meshbench/fortio/bin/fortio".into()),
    );
    assert!(
        path.exists(),
        "no fortio at {}: run scripts/install-fortio.sh",
        path.display()
    );
    path
}

/// `fortio server` with only its gRPC port open, killed when dropped.
struct FortioServer {
    child: Child,
    port: u16,
}

impl FortioServer {
    fn start() -> FortioServer {
        let port = free_addr().port();
        let child = Command::new(fortio_bin())
            .args(["server", "-grpc-port"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["-http-port", "disabled", "-redirect-port", "disabled"])
            .args(["-tcp-port", "disabled", "-udp-port", "disabled"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fortio server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "fortio's gRPC port did not open");
            std::thread::sleep(Duration::from_millis(50));
        }
        FortioServer { child, port }
    }
}

impl Drop for FortioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fortio load` with `args`; its JSON result.
fn fortio_load(args: &[&str]) -> serde_json::Value {
    let json = temp_json("fortio-load");
    let out = Command::new(fortio_bin())
        .arg("load")
        .args(["-json"])
        .arg(&json)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("fortio load");
    assert!(
        out.status.success(),
        "fortio load {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).expect("fortio's JSON");
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&text).expect("fortio's JSON parses")
}

/// fortio's percentile `p` in milliseconds.
fn fortio_percentile_ms(r: &serde_json::Value, p: f64) -> f64 {
    r["DurationHistogram"]["Percentiles"]
        .as_array()
        .expect("percentiles")
        .iter()
        .find(|x| x["Percentile"].as_f64() == Some(p))
        .and_then(|x| x["Value"].as_f64())
        .expect("the percentile")
        * 1e3
}

/// A PingMessage as protobuf bytes, written by hand: field 4 (`delayNanos`), a varint.
fn ping_with_delay(delay: Duration) -> Vec<u8> {
    let mut out = vec![4 << 3];
    let mut n = delay.as_nanos() as u64;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// `meshbench run` arguments for a gRPC call to `backend` (its TLS flags, no --http2).
fn grpc_args(backend: &ProtoBackend, rest: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = backend
        .args("/", rest)
        .into_iter()
        .filter(|a| a != "--http2")
        .collect();
    a.push("--grpc".into());
    a
}

#[test]
fn meshbench_calls_fortios_grpc_server() {
    let server = FortioServer::start();
    let url = format!("http://127.0.0.1:{}/", server.port);
    let (out, r) = run_json(
        "grpc-fortio",
        &[
            &url,
            "--grpc",
            "--grpc-payload",
            "1000",
            "-c",
            "4",
            "-n",
            "2000",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/requests/total"), 2000, "{}", r["errors"]);
    assert_eq!(u(&r, "/grpc_status/OK"), 2000, "{}", r["grpc_status"]);
    assert_eq!(u(&r, "/requests/errors"), 0);
    assert_eq!(r["settings"]["protocol"], "grpc");
    assert!(r["status_codes"].as_object().unwrap().is_empty());
    // fortio echoes the payload: 1000 bytes each way per call, plus framing and heads.
    assert!(u(&r, "/bytes/sent") >= 2000 * 1000, "{}", r["bytes"]);
    assert!(u(&r, "/bytes/received") >= 2000 * 1000, "{}", r["bytes"]);

    // A method fortio does not have: every call counted as UNIMPLEMENTED, a failure.
    let missing = format!("http://127.0.0.1:{}/nope.Service/Call", server.port);
    let (out, r) = run_json(
        "grpc-fortio-missing",
        &[&missing, "--grpc", "-c", "2", "-n", "200"],
        LIMIT,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing measured: {}",
        stderr(&out)
    );
    assert_eq!(
        u(&r, "/grpc_status/UNIMPLEMENTED"),
        200,
        "{}",
        r["grpc_status"]
    );
    assert_eq!(u(&r, "/requests/errors"), 200);
    assert_eq!(u(&r, "/errors/grpc_status"), 200);
}

#[test]
fn fortios_grpc_client_calls_meshbenchs_backend() {
    let backend = ProtoBackend::start(Proto::H2c, &[]);
    let addr = backend.backend.addr.to_string();
    let r = fortio_load(&[
        "-grpc",
        "-ping",
        "-payload-size",
        "500",
        "-c",
        "2",
        "-n",
        "1000",
        "-qps",
        "0",
        &addr,
    ]);
    let codes = r["RetCodes"].as_object().expect("RetCodes");
    let total: u64 = codes.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(total, 1000, "{codes:?}");
    assert_eq!(codes.get("SERVING").and_then(|v| v.as_u64()), Some(1000));
    // The standard health check too.
    let r = fortio_load(&["-grpc", "-c", "1", "-n", "100", "-qps", "0", &addr]);
    assert_eq!(
        r["RetCodes"]["SERVING"].as_u64(),
        Some(100),
        "{}",
        r["RetCodes"]
    );

    // Over TLS, the backend's generated CA trusted by fortio.
    let tls = ProtoBackend::start(Proto::H2Tls, &[]);
    let ca = tls.tls_dir.join("ca.pem");
    let r = fortio_load(&[
        "-grpc",
        "-ping",
        "-cacert",
        ca.to_str().unwrap(),
        "-c",
        "1",
        "-n",
        "200",
        "-qps",
        "0",
        &format!("https://localhost:{}", tls.backend.addr.port()),
    ]);
    assert_eq!(
        r["RetCodes"]["SERVING"].as_u64(),
        Some(200),
        "{}",
        r["RetCodes"]
    );
    // And meshbench over the same TLS port.
    let (out, r) = run_json_owned(
        "grpc-tls",
        &grpc_args(&tls, &["-c", "2", "-n", "500"]),
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/grpc_status/OK"), 500, "{}", r["errors"]);
    assert_eq!(r["settings"]["tls"], true);
}

#[test]
fn both_clients_read_the_same_latency_from_fortios_server() {
    let server = FortioServer::start();
    let delay = Duration::from_millis(2);
    let dir = scratch_dir("grpc-ping");
    let message = dir.join("ping.bin");
    std::fs::write(&message, ping_with_delay(delay)).unwrap();
    let url = format!("http://127.0.0.1:{}/", server.port);
    let addr = format!("127.0.0.1:{}", server.port);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    // Interleaved, so that the machine's noise falls on both alike.
    for round in 0..3 {
        let (out, r) = run_json(
            &format!("grpc-side-{round}"),
            &[
                &url,
                "--grpc",
                "--body",
                &format!("@{}", message.display()),
                "-c",
                "2",
                "-n",
                "600",
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(u(&r, "/grpc_status/OK"), 600, "{}", r["errors"]);
        ours.push(f(&r, "/latency_us/p50") / 1e3);
        let fr = fortio_load(&[
            "-grpc",
            "-ping",
            "-grpc-ping-delay",
            "2ms",
            "-c",
            "2",
            "-n",
            "600",
            "-qps",
            "0",
            &addr,
        ]);
        theirs.push(fortio_percentile_ms(&fr, 50.0));
    }
    ours.sort_by(f64::total_cmp);
    theirs.sort_by(f64::total_cmp);
    let (a, b) = (ours[1], theirs[1]);
    eprintln!(
        "p50 on fortio's server with a 2 ms ping delay: meshbench {a:.3} ms, fortio {b:.3} ms"
    );
    assert!(a >= 2.0 && b >= 2.0, "both see the delay: {a} {b}");
    assert!(
        (a - b).abs() < 1.0,
        "the same server, the same latency: meshbench {a:.3} ms, fortio {b:.3} ms"
    );
}

#[test]
fn injected_failures_are_counted_by_grpc_status() {
    let backend = ProtoBackend::start(Proto::H2c, &["--status", "503:20%"]);
    let (out, r) = run_json_owned(
        "grpc-status",
        &grpc_args(&backend, &["-c", "4", "-n", "3000"]),
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let unavailable = u(&r, "/grpc_status/UNAVAILABLE");
    let ok = u(&r, "/grpc_status/OK");
    assert_eq!(unavailable + ok, 3000, "{}", r["grpc_status"]);
    assert!(
        (450..=750).contains(&unavailable),
        "about 20 %: {unavailable}"
    );
    assert_eq!(u(&r, "/requests/errors"), unavailable);
    assert_eq!(u(&r, "/errors/grpc_status"), unavailable);
    let text = meshbench(
        &["run", &backend.url("/"), "--grpc", "-c", "1", "-n", "10"],
        LIMIT,
    );
    let summary = stdout(&text);
    assert!(summary.contains("grpc       OK"), "{summary}");
}

#[test]
fn a_call_past_its_deadline_is_deadline_exceeded() {
    // The backend would answer after 200 ms; the deadline (--timeout) is 20 ms. Whether the
    // server's DEADLINE_EXCEEDED or the client's own expiry comes first, the call is counted
    // as DEADLINE_EXCEEDED and its connection is kept.
    let backend = ProtoBackend::start(Proto::H2c, &["--delay", "200ms"]);
    let (out, r) = run_json_owned(
        "grpc-deadline",
        &grpc_args(&backend, &["-c", "2", "-n", "40", "--timeout", "20ms"]),
        LIMIT,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing measured: {}",
        stderr(&out)
    );
    assert_eq!(
        u(&r, "/grpc_status/DEADLINE_EXCEEDED"),
        40,
        "{} {}",
        r["grpc_status"],
        r["errors"]
    );
    assert_eq!(u(&r, "/errors/timeout"), 0);
    assert_eq!(u(&r, "/requests/errors"), 40);
    assert!(
        u(&r, "/connections/opened") <= 4,
        "calls are cancelled, connections kept: {}",
        r["connections"]
    );
}

#[test]
fn grpc_flags_out_of_place_are_one_line_and_exit_2() {
    for args in [
        &[
            "run",
            "http://127.0.0.1:9/",
            "--grpc-payload",
            "10",
            "-n",
            "1",
        ][..],
        &["run", "http://127.0.0.1:9/", "--grpc", "--http2", "-n", "1"][..],
    ] {
        let out = meshbench(args, LIMIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("grpc"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn the_lab_carries_grpc_through_every_proxy_and_mutual_tls() {
    let dir = scratch_dir("grpc-lab");
    for program in ["nginx", "haproxy", "caddy"] {
        let file = dir.join(format!("{program}.yaml"));
        std::fs::write(
            &file,
            format!(
                "name: grpc-{program}\ntopologies: [serveronly, both, gateway]\nduration_secs: 1\nwarmup_secs: 0.3\ncooldown_secs: 0\nload:\n  protocol: grpc\n  mode: open\n  rate_rps: [300]\n  connections: [2]\n  request_bytes: 200\nproxy:\n  type: {program}\n  mtls: true\ngateway:\n  type: {program}\n  domains: 3\n"
            ),
        )
        .unwrap();
        let store = dir.join(format!("{program}.db"));
        let store = store.to_str().unwrap();
        let out = meshbench(
            &["experiment", file.to_str().unwrap(), "--store", store],
            Duration::from_secs(120),
        );
        assert!(out.status.success(), "{program}: {}", stderr(&out));
        let export = meshbench(
            &[
                "results", "export", "latest", "--format", "json", "--store", store,
            ],
            LIMIT,
        );
        let e: serde_json::Value = serde_json::from_slice(&export.stdout).expect("JSON");
        let steps = e["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), 3, "{program}");
        for s in steps {
            let r = &s["result"];
            let total = u(r, "/requests/total");
            // 300 a second for 1 s: the calls went through. Not a rate check (the suite's
            // timed tests make those): on a busy runner one step answered 248 in its window.
            assert!(total >= 150, "{program} {}: {total}", s["topology"]);
            assert_eq!(
                u(r, "/grpc_status/OK"),
                total,
                "{program} {}: {} {}",
                s["topology"],
                r["grpc_status"],
                r["errors"]
            );
            // request_bytes is the ping's payload, echoed back through every hop.
            assert!(u(r, "/bytes/sent") >= total * 200, "{}", r["bytes"]);
            assert!(u(r, "/bytes/received") >= total * 200, "{}", r["bytes"]);
        }
    }
}

/// fortio's ping service as a user would have it: the .proto beside the run.
const PING_PROTO: &str = "syntax = \"proto3\";\npackage fgrpc;\nmessage PingMessage {\n  int64 seq = 1;\n  int64 ts = 2;\n  string payload = 3;\n  int64 delayNanos = 4;\n}\nservice PingServer {\n  rpc Ping (PingMessage) returns (PingMessage) {}\n}\n";

#[test]
fn a_users_proto_and_json_body_make_the_call() {
    let server = FortioServer::start();
    let dir = scratch_dir("grpc-proto");
    let proto = dir.join("ping.proto");
    std::fs::write(&proto, PING_PROTO).unwrap();
    let proto = proto.to_str().unwrap();
    let url = format!("http://127.0.0.1:{}/fgrpc.PingServer/Ping", server.port);
    // fortio's server waits the delayNanos the JSON asks for: the latency shows the message
    // arrived as written.
    let (out, r) = run_json(
        "grpc-proto",
        &[
            &url,
            "--grpc",
            "--proto",
            proto,
            "--body",
            r#"{"payload": "hello", "delayNanos": "3000000"}"#,
            "-c",
            "2",
            "-n",
            "200",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/grpc_status/OK"), 200, "{}", r["errors"]);
    assert!(
        f(&r, "/latency_us/p50") >= 3000.0,
        "the 3 ms delay of the message: {}",
        r["latency_us"]
    );
    // A method the file does not have, a body that is not the message, a broken file: one
    // line each, exit 2.
    let missing = format!("http://127.0.0.1:{}/fgrpc.PingServer/Pong", server.port);
    let broken = dir.join("broken.proto");
    std::fs::write(&broken, "syntax = \"proto3\";\nmessage {\n").unwrap();
    for (args, says) in [
        (
            vec![missing.as_str(), "--grpc", "--proto", proto, "-n", "1"],
            "/fgrpc.PingServer/Ping",
        ),
        (
            vec![
                url.as_str(),
                "--grpc",
                "--proto",
                proto,
                "--body",
                "{\"nope\": 1}",
                "-n",
                "1",
            ],
            "fgrpc.PingMessage",
        ),
        (
            vec![
                url.as_str(),
                "--grpc",
                "--proto",
                broken.to_str().unwrap(),
                "-n",
                "1",
            ],
            "broken.proto",
        ),
    ] {
        let mut all = vec!["run"];
        all.extend(args);
        let out = meshbench(&all, LIMIT);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {err}");
        assert!(err.contains(says), "{all:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn agents_make_grpc_calls_and_merge_their_statuses() {
    let backend = ProtoBackend::start(Proto::H2c, &["--status", "503:10%"]);
    let token = "grpc-agents-token-0123456789";
    let addrs: Vec<String> = (0..2).map(|_| free_addr().to_string()).collect();
    let mut agents: Vec<Child> = addrs
        .iter()
        .map(|a| {
            Command::new(bin())
                .args(["agent", "--listen", a])
                .env("MESHBENCH_AGENT_TOKEN", token)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("an agent")
        })
        .collect();
    for a in &addrs {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(a).is_err() {
            assert!(Instant::now() < deadline, "agent {a} did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let json = temp_json("grpc-agents");
    let mut cmd = Command::new(bin());
    cmd.args([
        "run",
        &backend.url("/"),
        "--grpc",
        "-c",
        "4",
        "-n",
        "2000",
        "-q",
    ])
    .args(["--agents", &addrs.join(","), "--json"])
    .arg(&json)
    .env("MESHBENCH_AGENT_TOKEN", token)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let out = wait_with_limit(&mut cmd.spawn().unwrap(), LIMIT);
    for a in &mut agents {
        let _ = a.kill();
        let _ = a.wait();
    }
    assert!(out.status.success(), "{}", stderr(&out));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_valid(&r);
    let (ok, unavailable) = (u(&r, "/grpc_status/OK"), u(&r, "/grpc_status/UNAVAILABLE"));
    assert_eq!(
        ok + unavailable,
        u(&r, "/requests/total"),
        "{}",
        r["grpc_status"]
    );
    assert!(unavailable > 0, "{}", r["grpc_status"]);
    assert_eq!(u(&r, "/errors/grpc_status"), unavailable);
    let parts = r["agents"]["agents"].as_array().expect("per-agent parts");
    assert_eq!(parts.len(), 2);
    let by_agent: u64 = parts.iter().map(|p| p["requests"].as_u64().unwrap()).sum();
    assert_eq!(by_agent, u(&r, "/requests/total"));
}

#[test]
fn metrics_count_grpc_calls_by_status() {
    use std::io::{Read, Write};
    let backend = ProtoBackend::start(Proto::H2c, &[]);
    let metrics = free_addr();
    let mut args = grpc_args(&backend, &["-c", "2", "-n", "500", "-q"]);
    args.extend([
        "--metrics-listen".into(),
        metrics.to_string(),
        "--metrics-linger".into(),
        "10s".into(),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut all = vec!["run"];
    all.extend(refs);
    let mut run = spawn_meshbench(&all);
    // Scrape until the final count shows (the linger ends with that scrape).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    let found = loop {
        if let Ok(mut s) = std::net::TcpStream::connect(metrics) {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            last.clear();
            let _ = s.read_to_string(&mut last);
            if let Some(line) = last.lines().find(|l| {
                l.starts_with("meshbench_grpc_calls_total{") && l.contains("grpc_status=\"OK\"")
            }) {
                if line.trim_end().ends_with(" 500") {
                    break true;
                }
            }
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = wait_with_limit(&mut run, LIMIT);
    assert!(found, "no final gRPC count in /metrics: {last}");
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn the_generated_gateways_route_grpc_by_domain() {
    // The backend speaks h2c; each gateway terminates TLS for 20 domains and forwards the ping
    // unchanged over HTTP/2.
    let backend = ProtoBackend::start(Proto::H2c, &[]);
    for (program, kind) in [
        ("nginx", meshbench_lab::Program::Nginx),
        ("haproxy", meshbench_lab::Program::Haproxy),
        ("caddy", meshbench_lab::Program::Caddy),
    ] {
        let dir = scratch_dir(&format!("grpc-gw-{program}"));
        let listen = free_addr();
        let out = meshbench(
            &[
                "gen",
                "gateway",
                "--for",
                program,
                "--grpc",
                "--tls",
                "--domains",
                "20",
                "--backend",
                &backend.backend.addr.to_string(),
                "--listen",
                &listen.to_string(),
                "--out",
                dir.to_str().unwrap(),
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{program}: {}", stderr(&out));
        assert!(stdout(&out).contains("40 routes"), "{}", stdout(&out));
        let gw =
            start_gateway(kind, &dir, listen).unwrap_or_else(|e| panic!("{program} starts: {e}"));
        let targets = dir.join("targets.txt");
        let ca = dir.join("ca.pem");
        let (out, r) = run_json(
            &format!("grpc-gw-{program}"),
            &[
                "--targets",
                targets.to_str().unwrap(),
                "--connect-to",
                &format!("::127.0.0.1:{}", listen.port()),
                "--cacert",
                ca.to_str().unwrap(),
                "--grpc",
                "--grpc-payload",
                "64",
                "-n",
                "400",
                "-c",
                "4",
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{program}: {}", stderr(&out));
        assert_eq!(
            u(&r, "/grpc_status/OK"),
            400,
            "{program}: {} {}; log: {}",
            r["grpc_status"],
            r["errors"],
            gw.log_tail()
        );
        assert_eq!(u(&r, "/settings/hosts"), 20, "{program}");
        drop(gw);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// An external variant of an experiment file calls a user's service: its `.proto` (beside the
/// file, named relative to it) and the JSON body of the request message. Run once from this
/// process and once through an agent that has no copy of the file (its working directory and
/// the file's directory differ, and the file is gone before the step): the agent gets the
/// compiled descriptors from the coordinator.
#[test]
fn an_experiment_calls_a_users_proto_locally_and_through_agents() {
    let server = FortioServer::start();
    let dir = scratch_dir("grpc-experiment");
    std::fs::write(dir.join("ping.proto"), PING_PROTO).unwrap();
    let file = dir.join("calls.yaml");
    let write = |agents: &str| {
        std::fs::write(
            &file,
            format!(
                "name: grpc-external\ntopologies: [external]\nduration_secs: 1\nwarmup_secs: 0.2\ncooldown_secs: 0\nload:\n  protocol: grpc\n  mode: open\n  rate_rps: [200]\n  connections: [2]\n  response_bytes: [0]\n{agents}external:\n  prometheus_url: http://127.0.0.1:9\n  variants:\n    - name: baseline\n      url: http://127.0.0.1:{}/fgrpc.PingServer/Ping\n      proto: ping.proto\n      body: '{{\"payload\": \"hello\", \"delayNanos\": \"3000000\"}}'\n",
                server.port
            ),
        )
        .unwrap();
    };
    let stored = |store: &std::path::Path| {
        let s = meshbench_store::Store::open(store).unwrap();
        let e = s.experiment("latest").unwrap();
        let steps = s.steps(e.id).unwrap();
        steps[0].step.result.clone().expect("a result")
    };
    let store = dir.join("local.db");
    write("");
    let out = meshbench(
        &[
            "experiment",
            file.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "-q",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = stored(&store);
    assert!(r.requests.total >= 150, "{:?}", r.requests);
    assert_eq!(
        r.grpc_status.get("OK"),
        Some(&r.requests.total),
        "{:?}",
        r.grpc_status
    );
    // fortio's server waits the delayNanos of the message: the JSON arrived as written.
    assert!(r.latency_us.p50 >= 3000, "{:?}", r.latency_us);

    // The same through an agent that cannot see the file: it runs in its own mount namespace
    // with an empty tmpfs over the file's directory. It gets the compiled descriptors from the
    // coordinator.
    let token = "grpc-experiment-token-0123456789";
    let addr = free_addr().to_string();
    let mut agent = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs none "$1" && test ! -e "$1/ping.proto" && exec "$2" agent --listen "$3""#)
        .args(["agent-without-the-file", dir.to_str().unwrap(), bin(), &addr])
        .env("MESHBENCH_AGENT_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("an agent");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            agent.try_wait().unwrap().is_none(),
            "the agent without the file did not start"
        );
        assert!(Instant::now() < deadline, "agent {addr} did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    write(&format!("agents:\n  addresses: [\"{addr}\"]\n"));
    let store = dir.join("agents.db");
    let mut coordinator = Command::new(bin());
    coordinator
        .args(["experiment", file.to_str().unwrap(), "--store"])
        .arg(&store)
        .arg("-q")
        .env("MESHBENCH_AGENT_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = wait_with_limit(&mut coordinator.spawn().unwrap(), LIMIT);
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let r = stored(&store);
    assert!(r.requests.total >= 150, "{:?}", r.requests);
    assert_eq!(
        r.grpc_status.get("OK"),
        Some(&r.requests.total),
        "{:?}",
        r.grpc_status
    );
    assert!(r.latency_us.p50 >= 3000, "{:?}", r.latency_us);
    assert_eq!(r.agents.as_ref().map(|a| a.agents.len()), Some(1));

    // Mistakes of the section: one line each, exit 2, before any load.
    for (variant, says) in [
        ("      proto: nowhere.proto\n", "nowhere.proto"),
        (
            "      proto: ping.proto\n      body: '{\"nope\": 1}'\n",
            "fgrpc.PingMessage",
        ),
        (
            "      body: '{\"payload\": \"x\"}'\n",
            "give the service's .proto",
        ),
    ] {
        std::fs::write(
            &file,
            format!(
                "name: bad\ntopologies: [external]\nload:\n  protocol: grpc\n  response_bytes: [0]\nexternal:\n  prometheus_url: http://127.0.0.1:9\n  variants:\n    - name: baseline\n      url: http://127.0.0.1:{}/fgrpc.PingServer/Ping\n{variant}",
                server.port
            ),
        )
        .unwrap();
        let out = meshbench(&["experiment", file.to_str().unwrap(), "--dry-run"], LIMIT);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{variant}: {err}");
        assert!(err.contains(says), "{variant}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}
