//! Envoy as a second witness, against a real Envoy (1.40, from scripts/install-envoy.sh): the
//! test writes its own bootstrap (an admin on a free loopback port, an L7 listener and an L4
//! one in front of the real backend, a route to a dead upstream), sends known requests through
//! it, and checks that `lab::program::envoy::admin` reads exactly those back, typed, in the
//! shape docs/result.schema.json gives; then that `meshbench run`'s own count, warm-up and all,
//! lies within the tolerance `analysis::witness` allows. Envoy missing is a failure that says
//! how to install it, not a skip.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use meshbench_analysis::witness::{Agreement, Tolerance};
use meshbench_lab::program::envoy::admin::{self, AdminError, NotEnvoy};
use meshbench_results::ProxyCounters;

const ENVOY: &str = "/usr/local/bin/envoy";

fn envoy_binary() -> &'static Path {
    let bin = Path::new(ENVOY);
    assert!(
        bin.exists(),
        "Envoy is not installed: run scripts/install-envoy.sh"
    );
    bin
}

/// A real Envoy started from a bootstrap this test writes.
struct Envoy {
    _role: LabRole,
    admin: SocketAddr,
    l7: SocketAddr,
    l4: SocketAddr,
    _dir: PathBuf,
}

impl Envoy {
    /// One worker; `/dead` goes to a port nothing listens on, everything else to `upstream`
    /// (over HTTP on the L7 listener, as bytes on the L4 one).
    fn start(upstream: SocketAddr) -> Envoy {
        let bin = envoy_binary();
        let dir = scratch_dir("envoy-admin");
        let (admin, l7, l4, dead) = (free_addr(), free_addr(), free_addr(), free_addr());
        let socket = |a: SocketAddr| {
            format!(
                "{{socket_address: {{address: {}, port_value: {}}}}}",
                a.ip(),
                a.port()
            )
        };
        let cluster = |name: &str, a: SocketAddr| {
            format!(
                "  - name: {name}
    type: STATIC
    connect_timeout: 0.5s
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {}}}
",
                socket(a)
            )
        };
        let yaml = format!(
            "admin:
  address: {}
static_resources:
  listeners:
  - name: l7
    address: {}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: server_proxy
          route_config:
            virtual_hosts:
            - name: all
              domains: [\"*\"]
              routes:
              - match: {{prefix: /dead}}
                route: {{cluster: dead}}
              - match: {{prefix: /}}
                route: {{cluster: next}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - name: l4
    address: {}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: ztunnel
          cluster: next
  clusters:
{}{}",
            socket(admin),
            socket(l7),
            socket(l4),
            cluster("next", upstream),
            cluster("dead", dead),
        );
        let config = dir.join("envoy.yaml");
        std::fs::write(&config, yaml).unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("--config-path").arg(&config).args([
            "--concurrency",
            "1",
            "--log-level",
            "warn",
            "--disable-hot-restart",
        ]);
        let role = LabRole::start("envoy", cmd, l7, &dir)
            .unwrap_or_else(|e| panic!("Envoy did not start: {e}"));
        // Every listener is bound before Envoy's workers accept: the L4 one is up too.
        Envoy {
            _role: role,
            admin,
            l7,
            l4,
            _dir: dir,
        }
    }
}

/// Sends `GET path` on `s` and reads one response; returns its status.
fn exchange(s: &mut TcpStream, path: &str, close: bool) -> u16 {
    let connection = if close { "close" } else { "keep-alive" };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: {connection}\r\n\r\n"
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before a whole response to {path}");
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut res = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = res.parse(&buf) {
            let length: usize = res
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                .unwrap_or(0);
            if buf.len() >= head + length {
                return res.code.unwrap();
            }
        }
    }
}

/// One request on a connection of its own, closed after the response.
fn get(addr: SocketAddr, path: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    exchange(&mut s, path, true)
}

#[test]
fn a_real_envoy_says_what_went_through_it() {
    let backend = BackendProc::start(&[]);
    let envoy = Envoy::start(backend.addr);
    let before = admin::read(envoy.admin).expect("the admin answers");

    const N: u64 = 40;
    for _ in 0..N {
        assert_eq!(get(envoy.l7, "/"), 200);
    }
    for _ in 0..3 {
        assert_eq!(get(envoy.l7, "/?status=404"), 404);
    }
    for _ in 0..2 {
        assert_eq!(get(envoy.l7, "/dead"), 503, "no upstream: Envoy answers");
    }
    for _ in 0..2 {
        assert_eq!(get(envoy.l4, "/"), 200, "through the tunnel");
    }
    // One connection left open (its one request answered, so Envoy has surely accepted it).
    let mut open = TcpStream::connect(envoy.l7).unwrap();
    open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(exchange(&mut open, "/", false), 200);

    let after = admin::read(envoy.admin).expect("the admin answers again");
    let d = after.since(&before);
    let r = d.requests.expect("an HTTP connection manager");
    assert_eq!(
        (r.total, r.status_2xx, r.status_4xx, r.status_5xx),
        (N + 3 + 2 + 1, N + 1, 3, 2),
        "every request on the L7 listener, none of the admin's own, none of the tunnel's: {d:?}"
    );
    assert_eq!((r.status_1xx, r.status_3xx), (0, 0));
    assert_eq!(d.upstream_failures.connect_fail, 2, "{d:?}");
    // The tunnel's upstream connections, which the backend closes after `Connection: close`,
    // are in the same cluster and may count as `remote_closed_active_rq`.
    assert!(d.upstream_failures.remote_closed_active_rq <= 2, "{d:?}");
    assert!(d.upstream_failures.total() >= 2, "{d:?}");
    assert_eq!(d.tunnel_connections, Some(2));
    assert_eq!(d.connections_active, 1, "the one connection still open");
    assert!(d.memory_allocated_bytes > 1 << 20, "{d:?}");
    assert!(
        d.memory_heap_size_bytes >= d.memory_allocated_bytes,
        "{d:?}"
    );
    // The stored and exported shape is the one the schema publishes.
    let json = serde_json::to_value(&d).unwrap();
    assert_valid_def(&json, "proxy_counters");
    let back: ProxyCounters = serde_json::from_value(json).unwrap();
    assert_eq!(back, d);
    drop(open);
}

#[test]
fn meshbench_run_and_envoy_agree_within_what_the_edges_hold() {
    let backend = BackendProc::start(&[]);
    let envoy = Envoy::start(backend.addr);
    let before = admin::read(envoy.admin).unwrap();
    let url = format!("http://{}/", envoy.l7);
    let (out, json) = run_json(
        "envoy-witness",
        &[
            &url, "--rate", "200", "-d", "1s", "--warmup", "1s", "-c", "4",
        ],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = admin::read(envoy.admin)
        .unwrap()
        .since(&before)
        .requests
        .unwrap()
        .total;
    let result: meshbench_results::RunResult = serde_json::from_value(json).unwrap();
    assert!(
        seen > result.requests.total + 100,
        "Envoy counted the warm-up the engine leaves out: {seen} vs {}",
        result.requests.total
    );
    let t = Tolerance::of(&result, 0, 0);
    assert_eq!(
        t.judge(seen),
        Agreement::Within,
        "{seen} requests seen, tolerance {t:?}"
    );
    // Without the warm-up in the tolerance, the same count would be flagged: the warm-up is
    // what the difference is made of.
    let mut no_warmup = result.clone();
    no_warmup.settings.warmup_secs = 0.0;
    assert_eq!(Tolerance::of(&no_warmup, 0, 0).judge(seen), Agreement::More);
}

#[test]
fn what_is_not_an_envoy_admin_is_said_so() {
    let backend = BackendProc::start(&[]);
    let envoy = Envoy::start(backend.addr);
    // The L7 listener forwards `/stats?...` to the backend, which answers 200 with no stats.
    match admin::read(envoy.l7) {
        Err(AdminError::NotEnvoy {
            why: NotEnvoy::NoServerStats,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let gone = free_addr();
    let err = admin::read(gone).unwrap_err();
    assert!(matches!(err, AdminError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&gone.to_string()), "{err}");
}
