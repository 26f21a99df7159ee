//! The live page's server over real sockets: what it serves (the page, the board as JSON with
//! a long poll, the report once there is one) and what it does with clients that are slow,
//! greedy, foreign or not HTTP at all: each is answered or dropped within its budget, and the
//! page keeps being served to everyone else.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use meshbench_engine::recorder::Interval;
use meshbench_live::web::{WebServer, MAX_CONNECTIONS};
use meshbench_live::{Done, Hub, Scope, StepInfo};

fn scope() -> Scope {
    Scope {
        experiment: "e".into(),
        step: 0,
        variant: "baseline".into(),
    }
}

fn started_hub() -> Hub {
    let hub = Hub::new();
    hub.step_started(StepInfo {
        scope: scope(),
        load: "100 rps x 2 conn".into(),
        target_rps: Some(100.0),
        steps: 1,
        step_secs: 30.0,
        left_after_secs: 0.0,
        started_ms: meshbench_results::usage::now_ms(),
    });
    hub
}

fn second(hub: &Hub, n: u32) {
    let mut iv = Interval::new(n);
    for i in 0..100 {
        iv.counts.response(200);
        iv.latency.record(400 + i).unwrap();
    }
    iv.sends = 100;
    hub.second(&scope(), &iv, &[], meshbench_results::usage::now_ms());
}

fn start(hub: &Hub) -> (WebServer, SocketAddr) {
    let server = WebServer::start("127.0.0.1:0".parse().unwrap(), hub.clone()).unwrap();
    let addr = server.local_addr();
    (server, addr)
}

/// A response: status, head (lower-cased), body.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            l.split_once(':')
                .filter(|(n, _)| n.trim() == name)
                .map(|(_, v)| v.trim().to_string())
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON")
    }
}

/// Sends `raw` and reads the whole answer (the server closes every connection).
fn send(addr: SocketAddr, raw: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(raw).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&all[..split]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    Answer {
        status,
        head,
        body: all[split + 4..].to_vec(),
    }
}

fn get(addr: SocketAddr, target: &str) -> Answer {
    send(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
}

#[test]
fn serves_the_page_its_files_and_nothing_else() {
    let hub = started_hub();
    let (_server, addr) = start(&hub);
    let page = get(addr, "/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
    let html = String::from_utf8(page.body).unwrap();
    assert!(html.contains("/page.js") && html.contains("/page.css"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "the page loads nothing from elsewhere"
    );
    for (path, kind) in [("/page.js", "text/javascript"), ("/page.css", "text/css")] {
        let a = get(addr, path);
        assert_eq!(a.status, 200, "{path}");
        assert!(a.header("content-type").unwrap().starts_with(kind));
        assert!(!a.body.is_empty());
    }
    // HEAD: the head only, with the body's length.
    let head = send(
        addr,
        format!("HEAD / HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length").unwrap(),
        html.len().to_string()
    );
    assert_eq!(get(addr, "/../../etc/passwd").status, 404);
    assert_eq!(get(addr, "/nope").status, 404);
    let post = send(
        addr,
        format!("POST /api/board HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 2\r\n\r\n{{}}")
            .as_bytes(),
    );
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow").as_deref(), Some("get, head"));
}

#[test]
fn the_board_is_json_and_a_poll_waits_for_the_next_second() {
    let hub = started_hub();
    second(&hub, 0);
    let (_server, addr) = start(&hub);
    let now = get(addr, "/api/board?since=0");
    assert_eq!(now.status, 200);
    assert_eq!(now.header("cache-control").as_deref(), Some("no-store"));
    let v = now.json();
    assert_eq!(v["frames"].as_array().unwrap().len(), 1);
    assert_eq!(v["current"]["requests"], 100);
    assert_eq!(v["current"]["load"], "100 rps x 2 conn");
    let seq = v["seq"].as_u64().unwrap();

    // A poll from `seq` is held until a second lands, then answers it alone.
    let hub2 = hub.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        second(&hub2, 1);
    });
    let asked = Instant::now();
    let next = get(addr, &format!("/api/board?since={seq}&wait=8000")).json();
    let took = asked.elapsed();
    writer.join().unwrap();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let frames = next["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["second"], 1);
    assert!(next["seq"].as_u64().unwrap() > seq);

    // With nothing new, a poll ends at its wait, empty.
    let seq = next["seq"].as_u64().unwrap();
    let asked = Instant::now();
    let idle = get(addr, &format!("/api/board?since={seq}&wait=300")).json();
    assert!(asked.elapsed() >= Duration::from_millis(250));
    assert!(idle["frames"].as_array().unwrap().is_empty());

    for bad in [
        "/api/board?since=-1",
        "/api/board?wait=soon",
        "/api/board?since=1e99",
    ] {
        let a = get(addr, bad);
        assert_eq!(a.status, 400, "{bad}");
    }
}

#[test]
fn the_report_is_served_once_the_run_names_it() {
    let hub = started_hub();
    let (_server, addr) = start(&hub);
    assert_eq!(get(addr, "/report").status, 404);

    let dir = std::env::temp_dir().join(format!("meshbench-web-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("report.html");
    let html = "<!doctype html><html><body><svg></svg>report</body></html>";
    std::fs::write(&file, html).unwrap();
    hub.finished(Done {
        report: Some(file.display().to_string()),
        outcome: "done".into(),
    });
    let a = get(addr, "/report");
    assert_eq!(a.status, 200);
    assert_eq!(String::from_utf8_lossy(&a.body), html);
    let csp = a.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && !csp.contains("script"));
    let board = get(addr, "/api/board").json();
    assert_eq!(board["done"]["report_url"], "/report");
    assert_eq!(board["done"]["outcome"], "done");

    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(get(addr, "/report").status, 404, "a report gone is a 404");
}

#[test]
fn foreign_hosts_are_refused_on_loopback() {
    let hub = started_hub();
    let (_server, addr) = start(&hub);
    for host in ["evil.example", "evil.example:80", "10.1.2.3"] {
        let a = send(
            addr,
            format!("GET /api/board HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        assert_eq!(a.status, 403, "{host}");
    }
    for host in ["localhost", &format!("localhost:{}", addr.port())] {
        let a = send(
            addr,
            format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        assert_eq!(a.status, 200, "{host}");
    }
}

#[test]
fn hostile_clients_cost_a_bounded_time_and_do_not_stop_the_page() {
    let hub = started_hub();
    let (_server, addr) = start(&hub);

    // Not HTTP: 400. A head over the limit: 431, without reading it all.
    assert_eq!(send(addr, b"SSH-2.0-OpenSSH_9.2\r\n\r\n").status, 400);
    let mut big = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 64 * 1024));
    big.extend_from_slice(b"\r\n\r\n");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(&big); // the server may close before taking it all
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 431"),
        "{:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(40)])
    );

    // A slow client (half a head, then nothing) is dropped at the head's deadline, and the
    // page is served meanwhile.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: loc").unwrap();
    let began = Instant::now();
    assert_eq!(get(addr, "/").status, 200);
    slow.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let held = began.elapsed();
    assert!(rest.is_empty(), "nothing is answered to half a request");
    assert!(
        held >= Duration::from_secs(4) && held < Duration::from_secs(8),
        "dropped after {held:?}"
    );

    // More idle connections than the server takes: the extra ones get a 503 at once, and
    // once the idle ones leave, the page is served again.
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    // Once the server has taken them all (on a busy machine its accept loop may be late), an
    // extra one gets a 503.
    let deadline = Instant::now() + Duration::from_secs(5);
    let extra = loop {
        std::thread::sleep(Duration::from_millis(100));
        let a = get(addr, "/");
        if a.status != 200 || Instant::now() > deadline {
            break a;
        }
    };
    assert_eq!(extra.status, 503);
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let a = get(addr, "/");
        if a.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after the idle left",
            a.status
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn stopping_frees_the_port() {
    let hub = started_hub();
    let (server, addr) = start(&hub);
    assert_eq!(get(addr, "/").status, 200);
    let began = Instant::now();
    server.stop();
    assert!(began.elapsed() < Duration::from_secs(2));
    assert!(
        TcpStream::connect(addr).is_err(),
        "nothing listens after stop"
    );
    // The same address can be taken again at once.
    let again = WebServer::start(addr, hub.clone()).unwrap();
    assert_eq!(again.local_addr(), addr);
}
