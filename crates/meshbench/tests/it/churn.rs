//! Connection churn over a real link, not loopback: the generator in one network namespace, the
//! backend in another, joined by a veth pair. On loopback the kernel reuses TIME_WAIT ports
//! (`tcp_tw_reuse` = 2 applies to loopback only), so only a real link shows what a client that
//! closes first costs: one local port for 60 s per connection, ~28,000 connections a minute
//! towards one address. Sysctls are per namespace, so the client's port range can be narrowed
//! to make exhaustion show in a second. Needs root (`ip netns`), as the lab's netns tests do.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use meshbench_lab::process::{Placement, RoleProcess};

const LIMIT: Duration = Duration::from_secs(90);

/// Two namespaces joined by a veth pair: the client's at 10.77.N.1, the target's at 10.77.N.2.
/// Both are deleted when dropped (deleting a namespace deletes its veth end, and so the pair).
struct LinkedPair {
    client: String,
    target: String,
    net: u8,
    client_if: String,
    dir: PathBuf,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl LinkedPair {
    fn new() -> LinkedPair {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{n}", std::process::id() % 100_000);
        let pair = LinkedPair {
            client: format!("mbchurn-{id}-c"),
            target: format!("mbchurn-{id}-t"),
            net: (std::process::id() as usize * 7 + n) as u8 % 200 + 20,
            client_if: format!("mbk{id}c"),
            dir: std::env::temp_dir().join(format!("meshbench-churn-{id}")),
        };
        std::fs::create_dir_all(&pair.dir).unwrap();
        let target_if = format!("mbk{id}t");
        ip(&["netns", "add", &pair.client]);
        ip(&["netns", "add", &pair.target]);
        ip(&[
            "link",
            "add",
            &pair.client_if,
            "type",
            "veth",
            "peer",
            "name",
            &target_if,
        ]);
        for (ns, dev, host) in [
            (&pair.client, &pair.client_if, 1),
            (&pair.target, &target_if, 2),
        ] {
            ip(&["link", "set", dev, "netns", ns]);
            let addr = format!("10.77.{}.{host}/24", pair.net);
            ip(&["-n", ns, "addr", "add", &addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        pair
    }

    fn client_addr(&self, host: u8) -> IpAddr {
        IpAddr::from([10, 77, self.net, host])
    }

    /// Gives the client's end one more address, 10.77.N.`host`.
    fn add_client_addr(&self, host: u8) {
        let addr = format!("{}/24", self.client_addr(host));
        ip(&[
            "-n",
            &self.client,
            "addr",
            "add",
            &addr,
            "dev",
            &self.client_if,
            "noprefixroute",
        ]);
    }

    /// Sets a sysctl in the client's namespace (each namespace has its own).
    fn client_sysctl(&self, key: &str, value: &str) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.client, "sysctl", "-q", "-w"])
            .arg(format!("{key}={value}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The backend in the target's namespace, ready once it says it listens.
    fn backend(&self) -> (RoleProcess, SocketAddr) {
        let addr: SocketAddr = format!("10.77.{}.2:8080", self.net).parse().unwrap();
        let mut cmd = Command::new(bin());
        cmd.args(["backend", "--listen", &addr.to_string(), "--size", "64"]);
        let place = Placement {
            netns: Some(self.target.clone()),
            ..Placement::default()
        };
        let log = self.dir.join("backend.log");
        let mut role =
            RoleProcess::spawn("backend", cmd, &log, &place).expect("the backend starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening on")
        {
            assert!(role.exited().is_none(), "backend: {}", role.log_tail(5));
            assert!(Instant::now() < deadline, "backend: {}", role.log_tail(5));
            std::thread::sleep(Duration::from_millis(10));
        }
        (role, addr)
    }

    /// `meshbench run -q ARGS --json FILE` in the client's namespace: its output and result.
    fn run(&self, name: &str, args: &[&str]) -> (Output, serde_json::Value) {
        let json = self.dir.join(format!("{name}.json"));
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.client, bin(), "run", "-q"])
            .args(args)
            .arg("--json")
            .arg(&json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_with_limit(&mut child, LIMIT);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let result = read_result(&json);
        (out, result)
    }

    /// TIME_WAIT sockets in the client's namespace, by local address.
    fn time_waits(&self) -> Vec<IpAddr> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.client,
                "ss",
                "-Htan",
                "state",
                "time-wait",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(2)?
                    .rsplit_once(':')?
                    .0
                    .parse()
                    .ok()
            })
            .collect()
    }
}

impl Drop for LinkedPair {
    fn drop(&mut self) {
        for ns in [&self.client, &self.target] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_result(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("a result written");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_valid(&json);
    json
}

#[test]
fn sixty_thousand_new_connections_to_another_namespace_leave_no_time_wait_here() {
    let pair = LinkedPair::new();
    // The usual range: 28,232 ports, fewer than the connections, so a client that closed
    // first would run out (each port waits 60 s in TIME_WAIT).
    pair.client_sysctl("net.ipv4.ip_local_port_range", "32768 60999");
    let (_backend, addr) = pair.backend();
    let url = format!("http://{addr}/");
    let started = Instant::now();
    let (out, r) = pair.run(
        "sixty-thousand",
        &[
            "--requests-per-connection",
            "1",
            "-c",
            "32",
            "-n",
            "60000",
            &url,
        ],
    );
    let took = started.elapsed();
    let errors = &r["errors"];
    assert_eq!(u(&r, "/requests/ok"), 60_000, "{errors}");
    assert_eq!(u(&r, "/errors/connect"), 0, "{errors}");
    assert_eq!(u(&r, "/errors/ports_exhausted"), 0, "{errors}");
    assert_eq!(r["settings"]["close_first"], "server");
    let by_server = u(&r, "/connections/closed_by_server");
    let by_client = u(&r, "/connections/closed_by_client");
    assert!(
        by_server >= 59_900,
        "server {by_server}, client {by_client}"
    );
    let waits = pair.time_waits().len();
    assert!(
        waits < 100,
        "{waits} TIME_WAIT sockets on the client side (client closed {by_client} first)"
    );
    assert!(
        stdout(&out).contains("closed first by the server"),
        "{}",
        stdout(&out)
    );
    eprintln!(
        "60,000 connections in {took:.1?}: {} opened/s, {waits} TIME_WAIT here, closed first by the server {by_server}, by the client {by_client}",
        f(&r, "/connections/rate_per_sec")
    );
}

#[test]
fn a_client_closing_first_runs_out_of_ports_and_says_why() {
    let pair = LinkedPair::new();
    pair.client_sysctl("net.ipv4.ip_local_port_range", "40000 40999");
    let (_backend, addr) = pair.backend();
    let url = format!("http://{addr}/");
    // The server closing first: three times the range, no error, no TIME_WAIT here.
    let (_, r) = pair.run(
        "server-first",
        &[
            "--requests-per-connection",
            "1",
            "-c",
            "8",
            "-n",
            "3000",
            &url,
        ],
    );
    assert_eq!(u(&r, "/requests/ok"), 3000, "{}", r["errors"]);
    assert!(
        pair.time_waits().len() < 50,
        "{:?}",
        pair.time_waits().len()
    );
    // The client closing first: a thousand connections, then no port is free.
    let (out, r) = pair.run(
        "client-first",
        &[
            "--requests-per-connection",
            "1",
            "--close-first",
            "client",
            "-c",
            "8",
            "-d",
            "2s",
            &url,
        ],
    );
    let ok = u(&r, "/requests/ok");
    let exhausted = u(&r, "/errors/ports_exhausted");
    assert!((900..=1000).contains(&ok), "{ok} ok: {}", r["errors"]);
    assert!(exhausted > 0, "{}", r["errors"]);
    assert_eq!(u(&r, "/errors/connect"), 0, "{}", r["errors"]);
    assert!(u(&r, "/connections/closed_by_client") >= 900);
    let waits = pair.time_waits().len();
    assert!(waits >= 900, "{waits} TIME_WAIT sockets");
    let warnings = r["generator"]["warnings"].to_string();
    for advice in [
        "no free local port",
        "--source-address",
        "ip_local_port_range",
    ] {
        assert!(warnings.contains(advice), "{advice}: {warnings}");
    }
    assert!(stdout(&out).contains("ports exhausted"), "{}", stdout(&out));
}

#[test]
fn each_source_address_brings_its_own_ports() {
    let pair = LinkedPair::new();
    pair.client_sysctl("net.ipv4.ip_local_port_range", "40000 40999");
    pair.add_client_addr(3);
    pair.add_client_addr(4);
    let (_backend, addr) = pair.backend();
    let url = format!("http://{addr}/");
    let sources = format!("{},{}", pair.client_addr(3), pair.client_addr(4));
    // The client closing first, 1,800 connections from a range of 1,000 ports: only two
    // addresses make it.
    let (_, r) = pair.run(
        "two-sources",
        &[
            "--requests-per-connection",
            "1",
            "--close-first",
            "client",
            "--source-address",
            &sources,
            "-c",
            "8",
            "-n",
            "1800",
            &url,
        ],
    );
    assert_eq!(u(&r, "/requests/ok"), 1800, "{}", r["errors"]);
    assert_eq!(u(&r, "/settings/source_addresses"), 2);
    let waits = pair.time_waits();
    for host in [3, 4] {
        let from = waits
            .iter()
            .filter(|&&a| a == pair.client_addr(host))
            .count();
        assert!(
            (850..=950).contains(&from),
            "{from} of {} TIME_WAIT sockets from .{host}",
            waits.len()
        );
    }
}
