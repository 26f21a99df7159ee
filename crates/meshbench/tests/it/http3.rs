//! HTTP/3 against a server no one here wrote (Debian's caddy, quic-go inside, with HTTP/3 on)
//! and against the backend's own HTTP/3 (h3 over quinn: a stack the generator shares no driving
//! code with): closed and open loop, 0-RTT, connection migration, failures counted as data,
//! bad flags refused with one line.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// Debian's caddy serving `body_bytes` bytes over HTTP/1.1, HTTP/2 and HTTP/3 on one port
/// (TCP and UDP), with a certificate of the lab's CA; its access log in `dir/access.log`.
fn caddy_h3(dir: &Path, body_bytes: usize) -> LabRole {
    let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    meshbench_lab::pki::write_lab_set(dir, &names).expect("certificates");
    let addr = free_addr();
    let body = "x".repeat(body_bytes);
    // Without SNI (an IP address) quic-go's caddy picks no certificate: default_sni names one.
    let config = format!(
        "{{\n\tadmin off\n\tauto_https off\n\tdefault_sni 127.0.0.1\n\
         \tstorage file_system {dir}/data\n\tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n\
         https://127.0.0.1:{port} {{\n\ttls {dir}/server.pem {dir}/server-key.pem\n\
         \tlog {{\n\t\toutput file {dir}/access.log\n\t\tformat json\n\t}}\n\
         \trespond \"{body}\" 200\n}}\n",
        dir = dir.display(),
        port = addr.port(),
    );
    let file = dir.join("Caddyfile");
    std::fs::write(&file, config).expect("Caddyfile");
    let mut cmd = Command::new("caddy");
    cmd.args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&file)
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir)
        .env("XDG_CONFIG_HOME", dir);
    LabRole::start("caddy", cmd, addr, dir).expect("caddy starts")
}

fn h3_args(url: String, ca: &Path, rest: &[&str]) -> Vec<String> {
    let mut a = vec![
        url,
        "--http3".to_string(),
        "--cacert".to_string(),
        ca.display().to_string(),
    ];
    a.extend(rest.iter().map(|s| s.to_string()));
    a
}

/// Whether one of the result's error messages says `what`.
fn message(r: &serde_json::Value, what: &str) -> bool {
    r["errors"]["messages"]
        .as_object()
        .is_some_and(|m| m.keys().any(|k| k.contains(what)))
}

#[test]
fn meshbench_speaks_http3_to_caddy() {
    let dir = scratch_dir("h3-caddy");
    let caddy = caddy_h3(&dir, 2048);
    let url = format!("https://127.0.0.1:{}/", caddy.addr.port());
    let args = h3_args(
        url,
        &dir.join("ca.pem"),
        &["-c", "2", "--streams", "8", "-n", "2000"],
    );
    let (out, r) = run_json_owned("h3-caddy", &args, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_valid(&r);
    assert_eq!(r["settings"]["protocol"], "h3");
    assert_eq!(u(&r, "/requests/ok"), 2000, "{}", r["errors"]);
    assert_eq!(u(&r, "/status_codes/200"), 2000);
    assert!(
        u(&r, "/bytes/received") > 2000 * 2048,
        "QUIC payloads carry the bodies"
    );
    // caddy saw HTTP/3, not a TCP protocol.
    let log = std::fs::read_to_string(dir.join("access.log")).expect("caddy's access log");
    let h3 = log.lines().filter(|l| l.contains("\"HTTP/3.0\"")).count();
    assert!(h3 >= 2000, "caddy logged {h3} HTTP/3 requests");
    drop(caddy);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn open_loop_over_http3_counts_from_the_intended_time() {
    // One connection, one stream, 50 ms per answer: 20 req/s at most, asked for 60. The
    // requests queue; their latency counts the wait (coordinated omission corrected) while the
    // service time stays the server's.
    let backend = ProtoBackend::start(Proto::H1Tls, &["--http3", "--delay", "50ms"]);
    let ca = backend.tls_dir.join("ca.pem");
    let args = h3_args(
        backend.url("/"),
        &ca,
        &["-c", "1", "--rate", "60", "-d", "2s", "--timeout", "10s"],
    );
    let (out, r) = run_json_owned("h3-open", &args, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_valid(&r);
    let service_p50 = f(&r, "/service_time_us/p50");
    let latency_p99 = f(&r, "/latency_us/p99");
    assert!(
        (50_000.0..80_000.0).contains(&service_p50),
        "service time p50 {service_p50} µs: the server's 50 ms"
    );
    assert!(
        latency_p99 > 600_000.0,
        "latency p99 {latency_p99} µs: the queue's wait must count"
    );
}

#[test]
fn http3_resumes_with_0rtt_and_follows_migration() {
    let backend = ProtoBackend::start(Proto::H1Tls, &["--http3"]);
    let ca = backend.tls_dir.join("ca.pem");
    // New connections every 20 requests resume the first one's session in 0-RTT.
    let args = h3_args(
        backend.url("/"),
        &ca,
        &[
            "-c",
            "2",
            "-n",
            "400",
            "--h3-0rtt",
            "--requests-per-connection",
            "20",
        ],
    );
    let (out, r) = run_json_owned("h3-0rtt", &args, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/requests/ok"), 400, "{}", r["errors"]);
    let accepted = u(&r, "/connections/quic_0rtt_accepted");
    assert!(accepted >= 10, "{accepted} handshakes with 0-RTT accepted");
    // Every 50 responses each connection moves to a new local port; nothing is lost.
    let args = h3_args(
        backend.url("/"),
        &ca,
        &[
            "-c",
            "2",
            "--streams",
            "2",
            "-n",
            "1000",
            "--h3-rebind-every",
            "50",
        ],
    );
    let (out, r) = run_json_owned("h3-migrate", &args, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/requests/ok"), 1000, "{}", r["errors"]);
    let moved = u(&r, "/connections/quic_migrations");
    assert!(moved >= 15, "{moved} migrations");
}

/// What Debian's caddy (2.6.2, an older quic-go) does when a client migrates: measured, not
/// assumed. It does not follow: the connection stalls after the move, its request times out,
/// and the client reconnects (the backend's quinn follows every move, above). Each lost move
/// is counted as data; nothing else is lost.
#[test]
fn caddy_does_not_follow_a_migrating_http3_client() {
    let dir = scratch_dir("h3-caddy-migrate");
    let caddy = caddy_h3(&dir, 100);
    let url = format!("https://127.0.0.1:{}/", caddy.addr.port());
    let args = h3_args(
        url,
        &dir.join("ca.pem"),
        &[
            "-c",
            "1",
            "-n",
            "600",
            "--h3-rebind-every",
            "100",
            "--timeout",
            "1s",
        ],
    );
    let (out, r) = run_json_owned("h3-caddy-migrate", &args, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let moved = u(&r, "/connections/quic_migrations");
    let (ok, timeouts) = (u(&r, "/requests/ok"), u(&r, "/errors/timeout"));
    assert!(moved >= 5, "{moved} migrations");
    assert_eq!(ok + timeouts, 600, "{}", r["errors"]);
    assert!(timeouts <= moved, "{timeouts} lost for {moved} moves");
    // Each stalled connection was replaced by a new one.
    assert_eq!(
        u(&r, "/connections/opened"),
        timeouts,
        "{}",
        r["connections"]
    );
    drop(caddy);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn http3_failures_are_counted_not_fatal() {
    // Nothing on the UDP port: ICMP port unreachable, counted as connect errors.
    let port = free_addr().port();
    let (out, r) = run_json(
        "h3-nothing",
        &[
            &format!("https://127.0.0.1:{port}/"),
            "--http3",
            "-k",
            "-d",
            "1s",
            "-c",
            "1",
        ],
        LIMIT,
    );
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert!(u(&r, "/errors/connect") > 0, "{}", r["errors"]);
    assert!(
        message(&r, "nothing listens on that UDP port"),
        "{}",
        r["errors"]
    );
    // A certificate from a CA the client does not trust: TLS errors, with the reason.
    let backend = ProtoBackend::start(Proto::H1Tls, &["--http3"]);
    let (out, r) = run_json(
        "h3-untrusted",
        &[&backend.url("/"), "--http3", "-d", "1s", "-c", "1"],
        LIMIT,
    );
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert!(u(&r, "/errors/tls") > 0, "{}", r["errors"]);
    assert!(message(&r, "UnknownIssuer"), "{}", r["errors"]);
}

#[test]
fn bad_http3_flags_get_one_line_and_exit_2() {
    for (args, says) in [
        (
            vec!["http://127.0.0.1:1/", "--http3", "-n", "1"],
            "QUIC is always TLS",
        ),
        (
            vec!["https://127.0.0.1:1/", "--h3-0rtt", "-n", "1"],
            "apply to HTTP/3 only",
        ),
        (
            vec![
                "https://127.0.0.1:1/",
                "--http3",
                "--h3-rebind-every",
                "0",
                "-n",
                "1",
            ],
            "--h3-rebind-every 0",
        ),
        (
            vec!["https://127.0.0.1:1/", "--http3", "--http2", "-n", "1"],
            "cannot be used with",
        ),
    ] {
        let out = meshbench(&[&["run"], args.as_slice()].concat(), LIMIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // gen gateway: HTTP/3 without TLS, or from a program built without QUIC.
    let dir = scratch_dir("h3-gen-bad");
    let out_dir = dir.join("gw");
    let out_dir = out_dir.to_str().unwrap();
    for (args, says) in [
        (vec!["--for", "caddy", "--http3"], "needs --tls"),
        (
            vec!["--for", "nginx", "--http3", "--tls"],
            "built without QUIC",
        ),
        (
            vec!["--for", "haproxy", "--http3", "--tls"],
            "built without QUIC",
        ),
        (vec!["--for", "istio", "--http3", "--tls"], "no HTTP/3"),
    ] {
        let common = [
            "gen",
            "gateway",
            "--backend",
            "127.0.0.1:9",
            "--out",
            out_dir,
        ];
        let out = meshbench(&[common.as_slice(), args.as_slice()].concat(), LIMIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        assert!(!dir.join("gw").exists(), "{args:?}: nothing written");
    }
}

#[test]
fn the_lab_puts_caddy_with_http3_in_front() {
    // baseline: the backend answers HTTP/3 itself; serveronly and both: caddy terminates the
    // client's HTTP/3 and forwards HTTP/1.1 (both: mutual TLS between the two caddies);
    // gateway: caddy's generated gateway offers HTTP/3, each domain's certificate by SNI.
    let dir = scratch_dir("h3-lab");
    let file = dir.join("h3.yaml");
    std::fs::write(
        &file,
        "name: h3-lab\ntopologies: [baseline, serveronly, both, gateway]\nduration_secs: 1\nwarmup_secs: 0.3\ncooldown_secs: 0\nload:\n  protocol: h3\n  mode: open\n  rate_rps: [300]\n  connections: [2]\n  streams: 4\nproxy:\n  type: caddy\n  mtls: true\ngateway:\n  type: caddy\n  domains: 3\n  paths: 2\n",
    )
    .unwrap();
    let store = dir.join("h3.db");
    let store = store.to_str().unwrap();
    let out = meshbench(
        &["experiment", file.to_str().unwrap(), "--store", store],
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let export = meshbench(
        &[
            "results", "export", "latest", "--format", "json", "--store", store,
        ],
        LIMIT,
    );
    let e: serde_json::Value = serde_json::from_slice(&export.stdout).expect("JSON");
    let steps = e["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 4);
    for s in steps {
        let r = &s["result"];
        assert_eq!(r["settings"]["protocol"], "h3", "{}", s["topology"]);
        // Every arrival of the second at 300/s is accounted for (answered or unfinished); most
        // are answered. How many a loaded machine answers in time is not this test's subject.
        let total = u(r, "/requests/total");
        let unfinished = u(r, "/requests/unfinished");
        assert!(
            total + unfinished >= 290 && total >= 150,
            "{}: {total} answered, {unfinished} unfinished",
            s["topology"]
        );
        assert_eq!(
            u(r, "/requests/ok"),
            total,
            "{}: {}",
            s["topology"],
            r["errors"]
        );
    }
    // Every export carries the steps: Istio's CSV labels them h3, fortio's JSON is an HTTP run
    // with every response, SMP's client speaks http.
    let export = |format: &str| {
        let out = meshbench(
            &[
                "results", "export", "latest", "--format", format, "--store", store,
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{format}: {}", stderr(&out));
        stdout(&out)
    };
    let csv = export("csv");
    let labelled = csv.lines().filter(|l| l.contains("_h3_")).count();
    assert_eq!(labelled, 4, "{csv}");
    let fortio_dir = dir.join("fortio");
    let out = meshbench(
        &[
            "results",
            "export",
            "latest",
            "--format",
            "fortio",
            "--store",
            store,
            "--out",
            fortio_dir.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mut runs: Vec<serde_json::Value> = std::fs::read_dir(&fortio_dir)
        .expect("fortio files")
        .map(|f| {
            let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
            serde_json::from_str(&text).expect("fortio JSON")
        })
        .collect();
    assert_eq!(runs.len(), 4);
    let mut ok: Vec<u64> = steps
        .iter()
        .map(|s| u(&s["result"], "/requests/ok"))
        .collect();
    let mut answered: Vec<u64> = runs
        .iter_mut()
        .map(|run| {
            assert_eq!(run["RunType"], "HTTP");
            run["RetCodes"]["200"].as_u64().unwrap()
        })
        .collect();
    ok.sort_unstable();
    answered.sort_unstable();
    assert_eq!(ok, answered);
    let smp: serde_json::Value = serde_json::from_str(&export("smp")).expect("JSON");
    for doc in smp.as_array().expect("documents") {
        assert_eq!(
            doc["performanceTestConfig"]["clients"][0]["protocol"],
            "http"
        );
    }
    // nginx cannot be the HTTP/3 entry here: the step fails with the reason, nothing panics.
    let nginx = dir.join("nginx.yaml");
    std::fs::write(
        &nginx,
        "name: h3-nginx\ntopologies: [serveronly]\nduration_secs: 1\nwarmup_secs: 0\ncooldown_secs: 0\nload:\n  protocol: h3\n  rate_rps: [100]\n  connections: [1]\nproxy:\n  type: nginx\n",
    )
    .unwrap();
    let out = meshbench(
        &["experiment", nginx.to_str().unwrap(), "--store", store],
        Duration::from_secs(60),
    );
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(all.contains("built without QUIC"), "{all}");
    assert!(!all.contains("panicked"), "{all}");
}

/// Starts meshbench as the leader of a process group of its own, as a shell job would be.
fn spawn_in_own_group(args: &[String]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    Command::new(bin())
        .args(args)
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn meshbench")
}

#[test]
fn ctrl_c_to_the_group_mid_http3_run_leaves_the_partial_result() {
    let backend = ProtoBackend::start(Proto::H1Tls, &["--http3"]);
    let ca = backend.tls_dir.join("ca.pem");
    let json = temp_json("h3-sigint");
    let _ = std::fs::remove_file(&json);
    let mut args = vec!["run".to_string(), "-q".to_string()];
    args.extend(h3_args(
        backend.url("/"),
        &ca,
        &[
            "-r",
            "400",
            "-c",
            "4",
            "-d",
            "60s",
            "--json",
            json.to_str().unwrap(),
        ],
    ));
    let mut child = spawn_in_own_group(&args);
    std::thread::sleep(Duration::from_millis(1200));
    let sent = std::time::Instant::now();
    for _ in 0..2 {
        // SAFETY: killpg(2) on the group our own child leads.
        let rc = unsafe { libc::killpg(child.id() as i32, libc::SIGINT) };
        assert_eq!(rc, 0);
    }
    let out = wait_with_limit(&mut child, LIMIT);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        sent.elapsed() < Duration::from_secs(4),
        "{:?}",
        sent.elapsed()
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("partial JSON")).unwrap();
    assert_valid(&r);
    assert_eq!(r["partial"], true);
    assert!(u(&r, "/requests/ok") > 100, "{}", r["requests"]);
    let _ = std::fs::remove_file(&json);
}

#[test]
fn an_http3_server_that_vanishes_mid_run_is_counted_not_fatal() {
    let backend = ProtoBackend::start(Proto::H1Tls, &["--http3"]);
    let ca = backend.tls_dir.join("ca.pem");
    let json = temp_json("h3-vanish");
    let _ = std::fs::remove_file(&json);
    let mut args = vec!["run".to_string(), "-q".to_string()];
    args.extend(h3_args(
        backend.url("/"),
        &ca,
        &[
            "-r",
            "300",
            "-c",
            "2",
            "-d",
            "3s",
            "--timeout",
            "500ms",
            "--json",
            json.to_str().unwrap(),
        ],
    ));
    let mut child = Command::new(bin())
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn meshbench");
    std::thread::sleep(Duration::from_millis(1200));
    // The pod goes away: its port stops answering (the client read the CA at its start).
    drop(backend);
    let out = wait_with_limit(&mut child, LIMIT);
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON")).unwrap();
    assert_valid(&r);
    let ok = u(&r, "/requests/ok");
    let failed = u(&r, "/errors/connect") + u(&r, "/errors/timeout") + u(&r, "/errors/reset");
    // 1.2 s of load before it went: a few hundred answers on a quiet machine, 187 on a busy
    // one; what matters is that they were kept.
    assert!(ok > 50, "measured before it vanished: {}", r["requests"]);
    assert!(failed > 100, "counted after it vanished: {}", r["errors"]);
    assert_eq!(
        ok + u(&r, "/requests/errors"),
        u(&r, "/requests/total"),
        "{}",
        r["requests"]
    );
    let _ = std::fs::remove_file(&json);
}
