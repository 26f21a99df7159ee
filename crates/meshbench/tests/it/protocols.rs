//! Black-box tests of what the protocol work added: TLS failures reported by kind, HTTP/2
//! servers that send GOAWAY or reset streams, connection churn and session resumption, URL
//! templates, targets files and repeatable target order.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use meshbench_lab::pki::{Ca, Usage};
use meshbench_lab::Program;

const LIMIT: Duration = Duration::from_secs(60);

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("meshbench-proto-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The one error message of a run that failed every request, and the count of that kind.
fn only_error(r: &serde_json::Value, kind: &str) -> String {
    let total = u(r, "/requests/total");
    assert!(total > 0, "some requests were tried: {}", r["errors"]);
    assert_eq!(u(r, &format!("/errors/{kind}")), total, "{}", r["errors"]);
    let messages = r["errors"]["messages"].as_object().unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    messages.keys().next().unwrap().clone()
}

#[test]
fn tls_failures_are_counted_with_what_went_wrong() {
    let backend = ProtoBackend::start(Proto::H1Tls, &[]);
    let port = backend.backend.addr.port();
    let good_ca = path(&backend.tls_dir.join("ca.pem"));

    // A CA that did not sign the server's certificate.
    let other = temp_dir("other-ca");
    Ca::new("someone else").unwrap().write(&other).unwrap();
    let (out, r) = run_json(
        "wrong-ca",
        &[
            &backend.url("/"),
            "--cacert",
            &path(&other.join("ca.pem")),
            "-d",
            "1s",
        ],
        LIMIT,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failing target is data, and nothing but failures measured nothing: {}",
        stderr(&out)
    );
    assert!(
        only_error(&r, "tls").contains("unknown CA"),
        "{}",
        r["errors"]
    );
    assert!(stdout(&out).contains("unknown CA"), "{}", stdout(&out));

    // The certificate names localhost and 127.0.0.1, not this name.
    let url = format!("https://wrong.example:{port}/");
    let connect_to = format!("wrong.example:{port}:127.0.0.1:{port}");
    let (_, r) = run_json(
        "mismatch",
        &[
            &url,
            "--connect-to",
            &connect_to,
            "--cacert",
            &good_ca,
            "-d",
            "1s",
        ],
        LIMIT,
    );
    assert!(only_error(&r, "tls").contains("does not match the host name"));
    // ... which --insecure accepts.
    let (_, r) = run_json(
        "insecure",
        &[&url, "--connect-to", &connect_to, "--insecure", "-n", "200"],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 200, "{}", r["errors"]);

    // An expired certificate.
    let dir = temp_dir("expired");
    let ca = Ca::new("expiry CA").unwrap();
    ca.write(&dir).unwrap();
    ca.issue(&["127.0.0.1".into()], Usage::ExpiredServer)
        .unwrap()
        .write(&dir, "server")
        .unwrap();
    let expired = BackendProc::start(&[
        "--tls",
        "--cert",
        &path(&dir.join("server.pem")),
        "--key",
        &path(&dir.join("server-key.pem")),
    ]);
    let (_, r) = run_json(
        "expired",
        &[
            &format!("https://{}/", expired.addr),
            "--cacert",
            &path(&dir.join("ca.pem")),
            "-d",
            "1s",
        ],
        LIMIT,
    );
    assert!(only_error(&r, "tls").contains("expired"), "{}", r["errors"]);
}

#[test]
fn mutual_tls_needs_the_right_client_certificate() {
    let dir = temp_dir("mtls");
    let d = path(&dir);
    let backend = BackendProc::start(&["--tls", "--tls-dir", &d, "--mtls"]);
    let url = format!("https://{}/", backend.addr);
    let ca = path(&dir.join("ca.pem"));
    let (_, r) = run_json("mtls-none", &[&url, "--cacert", &ca, "-d", "1s"], LIMIT);
    assert!(only_error(&r, "tls").contains("requires a client certificate"));
    let stranger = temp_dir("mtls-stranger");
    let other = Ca::new("stranger").unwrap();
    other
        .issue(&["client".into()], Usage::Client)
        .unwrap()
        .write(&stranger, "client")
        .unwrap();
    let (_, r) = run_json(
        "mtls-stranger",
        &[
            &url,
            "--cacert",
            &ca,
            "--cert",
            &path(&stranger.join("client.pem")),
            "--key",
            &path(&stranger.join("client-key.pem")),
            "-d",
            "1s",
        ],
        LIMIT,
    );
    assert!(only_error(&r, "tls").contains("rejected the client certificate"));
    for h2 in [false, true] {
        let mut args = vec![
            url.clone(),
            "--cacert".into(),
            ca.clone(),
            "--cert".into(),
            path(&dir.join("client.pem")),
            "--key".into(),
            path(&dir.join("client-key.pem")),
            "-n".into(),
            "500".into(),
        ];
        if h2 {
            args.push("--http2".into());
        }
        let (_, r) = run_json_owned(&format!("mtls-ok-{h2}"), &args, LIMIT);
        assert_eq!(u(&r, "/requests/ok"), 500, "h2 {h2}: {}", r["errors"]);
    }
}

/// A raw h2c server: answers the preface and settings, then either refuses every stream with
/// RST_STREAM(REFUSED_STREAM) or sends GOAWAY(last stream 0) at once.
fn raw_h2_server(goaway: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten().take(10_000) {
            std::thread::spawn(move || h2_conn(conn, goaway));
        }
    });
    addr
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn h2_conn(mut conn: std::net::TcpStream, goaway: bool) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut preface = [0u8; 24];
    if conn.read_exact(&mut preface).is_err() {
        return;
    }
    let _ = conn.write_all(&frame(4, 0, 0, &[]));
    if goaway {
        let mut payload = 0u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&0u32.to_be_bytes());
        let _ = conn.write_all(&frame(7, 0, 0, &payload));
    }
    loop {
        let mut head = [0u8; 9];
        if conn.read_exact(&mut head).is_err() {
            return;
        }
        let len = (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize;
        let mut payload = vec![0u8; len];
        if conn.read_exact(&mut payload).is_err() {
            return;
        }
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let reply = match head[3] {
            4 if head[4] & 1 == 0 => frame(4, 1, 0, &[]),
            1 if !goaway => frame(3, 0, stream, &7u32.to_be_bytes()),
            _ => continue,
        };
        if conn.write_all(&reply).is_err() {
            return;
        }
    }
}

#[test]
fn http2_resets_and_goaway_are_counted_by_kind() {
    let reset = raw_h2_server(false);
    let (out, r) = run_json(
        "rst",
        &[
            &format!("http://{reset}/"),
            "--http2",
            "--streams",
            "4",
            "-c",
            "2",
            "-n",
            "400",
        ],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(u(&r, "/errors/stream_reset"), 400, "{}", r["errors"]);
    assert!(
        r["errors"]["messages"]["stream_reset: RST_STREAM (REFUSED_STREAM)"].as_u64() == Some(400),
        "{}",
        r["errors"]
    );
    let away = raw_h2_server(true);
    let (out, r) = run_json(
        "goaway",
        &[&format!("http://{away}/"), "--http2", "-c", "2", "-d", "1s"],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let total = u(&r, "/requests/total");
    assert!(total > 0);
    assert_eq!(u(&r, "/errors/goaway"), total, "{}", r["errors"]);
    assert!(r["errors"]["messages"].to_string().contains("GOAWAY"));
}

#[test]
fn http2_refused_over_alpn_is_a_tls_error() {
    // nginx without http2 offers only http/1.1 over ALPN.
    let dir = temp_dir("alpn");
    let backend = BackendProc::start(&[]);
    let listen = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "nginx",
            "--domains",
            "1",
            "--paths",
            "1",
            "--tls",
            "--no-http2",
            "--backend",
            &backend.addr.to_string(),
            "--listen",
            &listen.to_string(),
            "--out",
            &path(&dir),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let _nginx = start_gateway(Program::Nginx, &dir, listen).expect("nginx starts");
    let url = format!("https://workspace-1-domain-1.com:{}/get/1", listen.port());
    let connect_to = format!("::127.0.0.1:{}", listen.port());
    let ca = path(&dir.join("ca.pem"));
    let (_, r) = run_json(
        "alpn-h1",
        &[
            &url,
            "--connect-to",
            &connect_to,
            "--cacert",
            &ca,
            "-n",
            "50",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 50, "{}", r["errors"]);
    let (_, r) = run_json(
        "alpn-h2",
        &[
            &url,
            "--connect-to",
            &connect_to,
            "--cacert",
            &ca,
            "--http2",
            "-d",
            "1s",
        ],
        LIMIT,
    );
    assert!(
        only_error(&r, "tls").contains("does not speak h2"),
        "{}",
        r["errors"]
    );
}

#[test]
fn connection_churn_and_session_resumption() {
    // A new connection per request, plain.
    let plain = BackendProc::start(&[]);
    let (_, r) = run_json(
        "churn",
        &[
            &plain.url("/"),
            "--requests-per-connection",
            "1",
            "-c",
            "4",
            "-n",
            "1000",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 1000, "{}", r["errors"]);
    let opened = u(&r, "/connections/opened");
    assert!(
        (995..=1000).contains(&opened),
        "one connection per request: {opened}"
    );
    // The last request asks the server to close: it closes first, the client after it.
    assert!(u(&r, "/connections/closed_by_server") >= 995);
    assert_eq!(u(&r, "/connections/closed_by_client"), 0);
    assert_eq!(r["settings"]["requests_per_connection"], 1);
    assert_eq!(r["settings"]["close_first"], "server");
    // TLS with and without resumption.
    for proto in [Proto::H1Tls, Proto::H2Tls] {
        let backend = ProtoBackend::start(proto, &[]);
        for (resume, want) in [("on", true), ("off", false)] {
            let (_, r) = run_json_owned(
                &format!("resume-{proto:?}-{resume}"),
                &backend.args(
                    "/",
                    &[
                        "--requests-per-connection",
                        "1",
                        "-c",
                        "4",
                        "-n",
                        "400",
                        "--tls-resume",
                        resume,
                    ],
                ),
                LIMIT,
            );
            assert_eq!(u(&r, "/requests/ok"), 400, "{proto:?}: {}", r["errors"]);
            let handshakes = u(&r, "/connections/tls_handshakes");
            assert!(
                handshakes >= 395,
                "{proto:?} {resume}: {handshakes} handshakes"
            );
            let ratio = f(&r, "/connections/resumption_ratio");
            if want {
                assert!(ratio > 0.9, "{proto:?}: resumed {ratio}");
            } else {
                assert_eq!(ratio, 0.0, "{proto:?}");
            }
            assert!(u(&r, "/connections/tls_handshake_us/count") >= 395);
            let (by_server, by_client) = (
                u(&r, "/connections/closed_by_server"),
                u(&r, "/connections/closed_by_client"),
            );
            if proto.h2() {
                assert!(by_client >= 395, "{proto:?}: the h2 client closes first");
            } else {
                assert!(
                    by_server >= 395 && by_client == 0,
                    "{proto:?}: {by_server}/{by_client}"
                );
            }
        }
    }
    // HTTP/2: ten requests per connection over four streams.
    let h2 = ProtoBackend::start(Proto::H2c, &[]);
    let (_, r) = run_json_owned(
        "h2-churn",
        &h2.args(
            "/",
            &[
                "--streams",
                "4",
                "-c",
                "2",
                "--requests-per-connection",
                "10",
                "-n",
                "1000",
            ],
        ),
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 1000, "{}", r["errors"]);
    let opened = u(&r, "/connections/opened");
    assert!(
        (98..=102).contains(&opened),
        "about 100 connections: {opened}"
    );
}

#[test]
fn connection_rate_paces_new_connections() {
    let plain = BackendProc::start(&[]);
    let (_, r) = run_json(
        "conn-rate",
        &[
            &plain.url("/"),
            "--requests-per-connection",
            "1",
            "--connection-rate",
            "200",
            "-c",
            "8",
            "-d",
            "2s",
        ],
        LIMIT,
    );
    let rate = f(&r, "/connections/rate_per_sec");
    assert!((rate - 200.0).abs() < 20.0, "connections per second {rate}");
    let total = u(&r, "/requests/total") as f64;
    assert!(
        (total - 400.0).abs() < 40.0,
        "one request per connection: {total}"
    );
}

#[test]
fn a_template_spreads_requests_over_every_host_and_path() {
    let server = RecordingServer::start();
    let port = server.addr.port();
    let url = format!("http://h-{{1..5}}.test:{port}/get/{{1..20}}?x={{a,b}}");
    let (_, r) = run_json(
        "template",
        &[
            &url,
            "--connect-to",
            &format!("::127.0.0.1:{port}"),
            "-n",
            "200",
            "-c",
            "3",
            "-t",
            "1",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 200, "{}", r["errors"]);
    assert_eq!(u(&r, "/settings/targets"), 200);
    assert_eq!(u(&r, "/settings/hosts"), 5);
    let hosts = r["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 5);
    for (i, h) in hosts.iter().enumerate() {
        assert_eq!(h["host"], format!("h-{}.test:{port}", i + 1));
        assert_eq!(h["requests"], 40, "{h}");
        assert_eq!(h["errors"], 0, "{h}");
    }
    let seen = server.take();
    let mut routes: Vec<(String, String)> = seen
        .iter()
        .map(|s| (s.host.clone(), s.target.clone()))
        .collect();
    routes.sort();
    routes.dedup();
    assert_eq!(routes.len(), 200, "round-robin visits every URL once");
    assert!(routes.contains(&(format!("h-5.test:{port}"), "/get/20?x=b".to_string())));
}

#[test]
fn random_order_repeats_with_the_same_seed() {
    let server = RecordingServer::start();
    let url = format!("http://127.0.0.1:{}/item/{{1..1000}}", server.addr.port());
    let mut orders = Vec::new();
    for seed in ["7", "7", "8"] {
        let (_, r) = run_json(
            &format!("seed-{seed}"),
            &[
                &url,
                "--target-order",
                "random",
                "--seed",
                seed,
                "-n",
                "100",
                "-c",
                "1",
                "-t",
                "1",
            ],
            LIMIT,
        );
        assert_eq!(u(&r, "/requests/ok"), 100);
        orders.push(
            server
                .take()
                .into_iter()
                .map(|s| s.target)
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(orders[0], orders[1], "same seed, same order");
    assert_ne!(orders[0], orders[2], "another seed, another order");
    let distinct: std::collections::BTreeSet<_> = orders[0].iter().collect();
    assert!(
        distinct.len() > 90,
        "random picks over 1000 targets: {}",
        distinct.len()
    );
}

#[test]
fn a_targets_file_sends_its_methods_headers_and_bodies() {
    let server = RecordingServer::start();
    let dir = temp_dir("targets");
    std::fs::write(dir.join("body.json"), b"{\"order\": 1}").unwrap();
    let base = format!("http://127.0.0.1:{}", server.addr.port());
    std::fs::write(
        dir.join("targets.txt"),
        format!("# two kinds of request\nGET {base}/list/{{1..3}}\nX-Kind: list\n\nPOST {base}/orders\nContent-Type: application/json\n@body.json\n"),
    )
    .unwrap();
    let (_, r) = run_json(
        "targets-file",
        &[
            "--targets",
            &path(&dir.join("targets.txt")),
            "-n",
            "40",
            "-c",
            "1",
            "-t",
            "1",
            "-H",
            "X-All: yes",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 40, "{}", r["errors"]);
    assert_eq!(u(&r, "/settings/targets"), 4);
    let seen = server.take();
    assert_eq!(seen.len(), 40);
    let posts: Vec<&Seen> = seen.iter().filter(|s| s.method == "POST").collect();
    assert_eq!(posts.len(), 10, "one request in four is the POST");
    let header = |s: &Seen, n: &str| {
        s.headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header(posts[0], "content-length").as_deref(), Some("12"));
    assert_eq!(header(posts[0], "x-all").as_deref(), Some("yes"));
    let list = seen.iter().find(|s| s.method == "GET").unwrap();
    assert_eq!(header(list, "x-kind").as_deref(), Some("list"));
    assert_eq!(header(list, "x-all").as_deref(), Some("yes"));
}

#[test]
fn connections_to_many_hosts_are_reused() {
    // 100 hosts on one backend, 500 connections, an open loop: once each connection is aimed at
    // a host, requests for that host find it through the host index instead of re-connecting.
    let backend = BackendProc::start(&[]);
    let port = backend.addr.port();
    let (_, r) = run_json(
        "many-hosts",
        &[
            &format!("http://h-{{1..100}}.test:{port}/"),
            "--connect-to",
            &format!("::127.0.0.1:{port}"),
            "--target-order",
            "random",
            "-c",
            "500",
            "-r",
            "5000",
            "-n",
            "10000",
            "-t",
            "1",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 10_000, "{}", r["errors"]);
    let opened = u(&r, "/connections/opened");
    assert!(
        opened < 1_500,
        "{opened} connections opened for 10,000 requests over 100 hosts and 500 connections"
    );
    assert!(r["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|h| h["requests"].as_u64().unwrap() > 50));
}

#[test]
fn a_closed_loop_over_a_connection_pool_keeps_connections_per_host() {
    // 100 hosts, 10 requests in flight: with one connection per request in flight, most
    // requests go to a host whose connection is busy or aimed elsewhere and re-aim one; with a
    // pool of 500 connections (--in-flight 10), each host keeps its own.
    let backend = BackendProc::start(&[]);
    let port = backend.addr.port();
    let url = format!("http://h-{{1..100}}.test:{port}/");
    let connect_to = format!("::127.0.0.1:{port}");
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec![
            url.as_str(),
            "--connect-to",
            &connect_to,
            "--target-order",
            "random",
            "-n",
            "5000",
            "-t",
            "1",
        ];
        args.extend_from_slice(extra);
        let (out, r) = run_json(name, &args, LIMIT);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(u(&r, "/requests/ok"), 5000, "{}", r["errors"]);
        (r, stderr(&out))
    };
    let (churning, _) = run("no-pool", &["-c", "10"]);
    let (pooled, _) = run("pool", &["-c", "500", "--in-flight", "10"]);
    // The flag's old name is still read, with one line saying the new one.
    let (old, said) = run("pool-old-name", &["-c", "500", "--concurrency", "10"]);
    assert_eq!(old["settings"]["in_flight"], 10);
    assert!(
        said.lines().any(|l| {
            l
            == "note: --concurrency is an old name, read as --in-flight: write --in-flight instead"
        }),
        "{said}"
    );
    let (a, b) = (
        u(&churning, "/connections/opened"),
        u(&pooled, "/connections/opened"),
    );
    assert!(
        a > 2_000,
        "10 connections over 100 hosts re-aim: {a} opened"
    );
    assert!(b < 1_000, "a pool of 500 keeps them per host: {b} opened");
    assert_eq!(pooled["settings"]["in_flight"], 10);
    assert_eq!(churning["settings"]["in_flight"], serde_json::Value::Null);
}
