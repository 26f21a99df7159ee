//! Per-hop attribution proven on known delays, through real Envoys (both sidecars, mutual TLS,
//! each role in its own network namespace): a delay put on one link and a fixed delay in the
//! backend are each attributed to that link or hop, within 10 % or 0.1 ms, with every other
//! hop unchanged within the same bound, and every split request's parts add up to the
//! engine's own latency for it.
//!
//! The link's delay is `tc netem` on the client's link where the kernel has it (this machine's
//! has no `sch_netem`: that test is ignored here), and otherwise a delay line the test runs in
//! front of the first sidecar: it holds each chunk of the request direction for 5 ms, spinning
//! the last 300 µs so that its own lateness stays out of the figure. It logs nothing per
//! request, so its time is the link's, as a kernel's queue would be. The backend's delay is
//! its `?delay=5ms`, waited out spinning (`--delay-mode spin`). 5 ms, so that a tenth of it
//! (0.5 ms) is above how far the other hops' medians move with nothing changed in them on a
//! 2-core VM whose vCPUs are descheduled for milliseconds (0.2 ms seen). Three interleaved
//! rounds, each delayed run compared with its round's plain run, and the median shift judged:
//! a few seconds in which the whole VM is slower move one round, not the answer.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use meshbench_engine::{Stop, StopAt};
use meshbench_lab::cgroup::Limits;
use meshbench_lab::rig::{GatewaySpec, Rig, RigSpec};
use meshbench_lab::{Program, ProgramSpec};
use meshbench_results::attribution::{Attribution, Node, Part, Seen};
use meshbench_results::{ChainRole, Topology};
use meshbench_runner::{measure, LoadOptions, LoadOrigin, LoadSource, TargetSource};

const DELAY: Duration = Duration::from_millis(5);
/// Rounds of (plain, the delay on the link, the delay in the backend), each delayed run compared
/// with the plain run of its own round.
const ROUNDS: usize = 3;
/// One request in this many is split (every one: 500 requests, 25 of them around p50).
const EVERY: u32 = 1;

pub(crate) fn spec(name: &str) -> RigSpec {
    RigSpec {
        topology: Topology::Both,
        proxy: ProgramSpec::from(Program::Envoy),
        proxy_workers: 1,
        proxy_peer_authentication: Default::default(),
        proxy_mtls: true,
        proxy_istio_telemetry: false,
        attribution: true,
        tunnel: ProgramSpec::from(Program::Envoy),
        tunnel_workers: 1,
        tunnel_mtls: true,
        gateway: GatewaySpec {
            program: Program::Envoy,
            domains: 1,
            paths: 1,
            workers: 1,
            changeable: false,
            haproxy_reload: Default::default(),
        },
        backend_exe: PathBuf::from(bin()),
        backend_replicas: 1,
        backend_args: ["--threads", "1", "--delay-mode", "spin"]
            .map(String::from)
            .to_vec(),
        proxy_limits: Limits::default(),
        tunnel_limits: Limits::default(),
        backend_limits: Limits::default(),
        control_plane_limits: Limits::default(),
        http2: false,
        grpc: false,
        http3: false,
        netns: true,
        id: format!("{}-attribution-{name}", std::process::id()),
        dir: scratch_dir(&format!("attribution-{name}")),
    }
}

/// 100 requests a second for 5 s from `source` over 4 connections, every one tagged.
pub(crate) fn load_of(source: TargetSource) -> LoadOptions {
    let mut o = LoadOptions::new(source);
    o.connections = 4;
    o.pace.rate_rps = Some(100.0);
    o.window.stop = StopAt::Duration(Duration::from_secs(5));
    o.window.warmup = Duration::from_millis(500);
    o.send.trace_every = Some(EVERY);
    o
}

/// [`load_of`] `url`; its attribution, with every sampled request split.
fn measured(rig: &Rig, url: &str) -> Attribution {
    let a = attributed(rig, load_of(TargetSource::Url(url.into())), None);
    assert_eq!(
        (a.retried, a.unjoined),
        (0, 0),
        "every sampled request has both sidecars' lines"
    );
    a
}

/// Runs `o` against the rig from the network namespace `netns` (None: this machine's) and
/// returns its attribution: every request answered, at least 90 % of the due ones sampled, and
/// every split request's parts adding up to the engine's latency for it exactly.
pub(crate) fn attributed(rig: &Rig, o: LoadOptions, netns: Option<&str>) -> Attribution {
    let every = o.send.trace_every.expect("a tagged load");
    let StopAt::Duration(run) = o.window.stop else {
        panic!("a timed load")
    };
    let due = o.pace.rate_rps.expect("an open loop") * run.as_secs_f64() / f64::from(every);
    let load = o.resolve().expect("the load resolves");
    let place = LoadOrigin { cpus: None, netns };
    let mut m = measure(
        LoadSource::Local,
        &load,
        Default::default(),
        place,
        Stop::new(),
        |_, _| {},
    )
    .expect("the load runs");
    assert_eq!(m.result.requests.errors, 0, "every request answered");
    let sent = std::mem::take(&mut m.result.traces);
    assert!(
        sent.len() as f64 >= 0.9 * due,
        "{} sampled of {due} due",
        sent.len()
    );
    let a =
        meshbench_runner::attribution::attribute(rig, 1.0 / f64::from(every), &sent, &Stop::new());
    assert_eq!(a.sampled, sent.len() as u64);
    for split in &a.requests {
        let sum: i64 = split.parts_ns.iter().sum();
        assert_eq!(
            sum, split.latency_ns as i64,
            "the parts add up to the latency"
        );
    }
    a
}

/// The split requests of `runs` that have a part below -0.2 ms, asserted to be at most one in
/// 20 of all of them.
///
/// One clock, but the parts come from Envoy's stamps, and on a VM whose vCPUs are descheduled
/// for milliseconds (sleeps end 1-3 ms late at p99) a few requests get a proxy's points
/// milliseconds off: in the suite's optimised build, 11 of 500 had the client sidecar's points
/// about 4.5 ms late together (its link +4.9 ms, the link after it -4.5 ms), and one had them
/// 7 ms early (-7.2 ms and +8.1 ms), which moves that time between the two links around the
/// proxy. (44 µs at most on a steadier VM.) So a part below -0.2 ms is a rare glitch, never
/// the rule.
pub(crate) fn few_glitches<'a>(runs: impl IntoIterator<Item = &'a Attribution>) {
    let runs: Vec<&Attribution> = runs.into_iter().collect();
    let negative: Vec<_> = runs
        .iter()
        .flat_map(|a| &a.requests)
        .filter(|split| split.parts_ns.iter().any(|&p| p < -200_000))
        .map(|split| split.parts_ns.clone())
        .collect();
    let split: usize = runs.iter().map(|a| a.requests.len()).sum();
    assert!(
        negative.len() * 20 <= split,
        "{} of {split} split requests have a part below -0.2 ms: {negative:?}",
        negative.len(),
    );
}

/// At most 2 % of `a`'s sampled requests lack a hop's line or were retried by a proxy, and
/// at least `split` were split.
pub(crate) fn mostly_split(a: &Attribution, split: usize) {
    assert!(a.requests.len() >= split, "{} split", a.requests.len());
    assert!(
        (a.unjoined + a.retried) * 50 <= a.sampled,
        "{} unjoined and {} retried of {}",
        a.unjoined,
        a.retried,
        a.sampled
    );
}

/// Each hop's median time over the split requests (µs), by label: a proxy's legs and connect
/// together, as in the short view ([`Part::hop`]).
///
/// The median of each hop's own times, not its mean share of the run's p50 (`shares`, which
/// the answers print): a mean over the band of requests around p50 moves with the few of
/// them a descheduled vCPU made milliseconds slower, which on a 2-core VM with two Envoys and
/// a spinning backend is noise of the machine's, not a place the delay went.
pub(crate) fn hop_medians(a: &Attribution) -> BTreeMap<String, f64> {
    let mut times: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for split in &a.requests {
        let mut by_hop: BTreeMap<String, i64> = BTreeMap::new();
        for (part, ns) in a.parts.iter().zip(&split.parts_ns) {
            *by_hop.entry(part.hop().hop_label()).or_default() += ns;
        }
        for (label, ns) in by_hop {
            times.entry(label).or_default().push(ns);
        }
    }
    times
        .into_iter()
        .map(|(label, mut ns)| {
            ns.sort_unstable();
            (label, ns[ns.len() / 2] as f64 / 1e3)
        })
        .collect()
}

/// Each hop's shift of its median (µs) from the plain run of the same round, per round.
pub(crate) type Shifts = BTreeMap<String, Vec<f64>>;

/// Adds one round's shift of each hop, `delayed` less `plain`, to `shifts`.
pub(crate) fn add_shifts(
    shifts: &mut Shifts,
    plain: &BTreeMap<String, f64>,
    delayed: &BTreeMap<String, f64>,
) {
    for (label, before) in plain {
        shifts
            .entry(label.clone())
            .or_default()
            .push(delayed[label] - before);
    }
}

/// The median shift over rounds is `delay` in `moved` and nothing in every other hop, each
/// within 10 % of the delay or 0.1 ms, whichever is larger (0.5 ms for 5 ms): no other hop
/// takes a tenth of the delay. (The other hops do move by 0.1-0.2 ms on a 2-core machine: a spinning
/// backend or a delay line changes how the proxies' threads are woken.) The median, because on
/// this VM one 5 s run in six or so has every hop slower together (both links 1 ms, the
/// backend's 5 ms delay 6 ms), which would be a tenth of the delay moved by the machine, not
/// by the attribution.
pub(crate) fn only_moved(shifts: &Shifts, moved: &str, delay: Duration) {
    let want = delay.as_secs_f64() * 1e6;
    let within = (want * 0.1).max(100.0);
    for (label, rounds) in shifts {
        let mut sorted = rounds.clone();
        sorted.sort_by(f64::total_cmp);
        let delta = sorted[sorted.len() / 2];
        if label == moved {
            assert!(
                (delta - want).abs() <= within,
                "{label}: grew {delta:.0} µs at the median, not {want:.0} (every hop's shift by round: {shifts:.0?})"
            );
        } else {
            assert!(
                delta.abs() <= within,
                "{label}: moved {delta:.0} µs at the median although the delay was elsewhere (every hop's shift by round: {shifts:.0?})"
            );
        }
    }
}

/// A TCP relay from a loopback port to `to` that holds each chunk of the request direction
/// for `delay` (the response direction passes at once), until dropped.
struct DelayLine {
    addr: SocketAddr,
    delay: Arc<std::sync::Mutex<Duration>>,
    stop: Arc<AtomicBool>,
}

impl DelayLine {
    fn start(to: SocketAddr) -> DelayLine {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let delay = Arc::new(std::sync::Mutex::new(Duration::ZERO));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, s) = (Arc::clone(&delay), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let server = TcpStream::connect(to).unwrap();
                for st in [&client, &server] {
                    st.set_nodelay(true).unwrap();
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let d = Arc::clone(&d);
                std::thread::spawn(move || pump(client, server, Some(d)));
                std::thread::spawn(move || pump(s2, c2, None));
            }
        });
        DelayLine { addr, delay, stop }
    }

    fn set(&self, delay: Duration) {
        *self.delay.lock().unwrap() = delay;
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies `from` to `to`, each chunk held until `delay` after it was read (sleeping to 300 µs
/// before, spinning the rest).
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Option<Arc<std::sync::Mutex<Duration>>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let read_at = Instant::now();
        if let Some(d) = &delay {
            let until = read_at + *d.lock().unwrap();
            let spin_from = until.checked_sub(Duration::from_micros(300));
            if let Some(t) = spin_from.filter(|t| *t > Instant::now()) {
                std::thread::sleep(t - Instant::now());
            }
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

#[test]
fn a_link_delay_and_a_backend_delay_are_each_attributed_where_they_are() {
    let _ = envoy_binary();
    let rig = Rig::start(&spec("known"), &Stop::new()).expect("the rig starts");
    assert!(
        rig.roles.iter().all(|r| r.namespace.is_some()),
        "each role in its own namespace"
    );
    let line = DelayLine::start(rig.entry);
    let url = |path: &str| format!("http://{}{path}", line.addr);
    let link = Part::Link {
        from: Node::Client,
        to: Node::Hop(ChainRole::ClientProxy),
    };
    let backend = Part::Backend {
        after: Node::Client,
    };
    let (mut link_shifts, mut backend_shifts) = (Shifts::new(), Shifts::new());
    let mut runs = Vec::new();
    for round in 0..ROUNDS {
        let plain = measured(&rig, &url("/"));
        if round == 0 {
            assert_eq!(
                plain
                    .path
                    .iter()
                    .map(|h| (h.role, h.seen))
                    .collect::<Vec<_>>(),
                vec![
                    (ChainRole::ClientProxy, Seen::PerRequest),
                    (ChainRole::ServerProxy, Seen::PerRequest)
                ]
            );
        }
        line.set(DELAY);
        let slow_link = measured(&rig, &url("/"));
        line.set(Duration::ZERO);
        let slow_backend = measured(&rig, &url(&format!("/?delay={}ms", DELAY.as_millis())));
        let plain_p50 = hop_medians(&plain);
        for (what, a, shifts) in [
            ("the delay on the link", &slow_link, &mut link_shifts),
            (
                "the delay in the backend",
                &slow_backend,
                &mut backend_shifts,
            ),
        ] {
            let delayed = hop_medians(a);
            eprintln!(
                "round {round}: each hop's median, {what} (µs): {delayed:.0?}, plain: {plain_p50:.0?}"
            );
            add_shifts(shifts, &plain_p50, &delayed);
        }
        runs.extend([plain, slow_link, slow_backend]);
    }
    few_glitches(&runs);
    only_moved(&link_shifts, &link.hop_label(), DELAY);
    only_moved(&backend_shifts, &backend.hop_label(), DELAY);
}

#[test]
#[ignore = "needs the kernel's sch_netem (tc netem); this machine's kernel has none (`tc qdisc add ... netem`: Specified qdisc kind is unknown)"]
fn a_netem_delay_on_the_client_s_link_is_attributed_to_that_link() {
    let _ = envoy_binary();
    let rig = Rig::start(&spec("netem"), &Stop::new()).expect("the rig starts");
    let first = rig
        .roles
        .iter()
        .find(|r| r.name == ChainRole::ClientProxy)
        .and_then(|r| r.namespace.clone())
        .expect("the client sidecar in its namespace");
    let url = format!("http://{}/", rig.entry);
    let plain = measured(&rig, &url);
    // Only what the client (in this namespace, from the veth's host address) sends to the
    // sidecar waits: an htb class of its own with netem under it, chosen by source address.
    let dev = first.host_veth.as_str();
    let host = format!("{}/32", first.host_addr);
    let tc = |args: &[&str]| {
        let out = std::process::Command::new("tc")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    tc(&[
        "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
    ]);
    for class in ["1:10", "1:20"] {
        tc(&[
            "class", "add", "dev", dev, "parent", "1:", "classid", class, "htb", "rate", "10gbit",
        ]);
    }
    tc(&[
        "qdisc",
        "add",
        "dev",
        dev,
        "parent",
        "1:20",
        "handle",
        "20:",
        "netem",
        "delay",
        &format!("{}ms", DELAY.as_millis()),
    ]);
    tc(&[
        "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
        "ip", "src", &host, "flowid", "1:20",
    ]);
    let delayed = measured(&rig, &url);
    tc(&["qdisc", "del", "dev", dev, "root"]);
    few_glitches([&plain, &delayed]);
    let link = Part::Link {
        from: Node::Client,
        to: Node::Hop(ChainRole::ClientProxy),
    };
    let mut shifts = Shifts::new();
    add_shifts(&mut shifts, &hop_medians(&plain), &hop_medians(&delayed));
    only_moved(&shifts, &link.hop_label(), DELAY);
}

/// An experiment file in a scratch directory with `body` after its name; the directory too.
fn experiment_file(name: &str, body: &str) -> (PathBuf, PathBuf) {
    let dir = scratch_dir(&format!("attribution-exp-{name}"));
    let file = dir.join("experiment.yaml");
    std::fs::write(&file, format!("name: {name}\n{body}")).unwrap();
    (dir, file)
}

const SHORT: &str = "duration_secs: 3
warmup_secs: 1
cooldown_secs: 0
load:
  mode: open
  rate_rps: [200]
  connections: [4]
";

fn run_ok(args: &[&str]) -> String {
    let out = meshbench(args, Duration::from_secs(180));
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn an_experiment_with_attribution_says_where_the_latency_goes_in_every_answer() {
    let _ = envoy_binary();
    let body = format!(
        "topologies: [baseline, serveronly]\n{SHORT}proxy:\n  type: envoy\n  workers: 1\nattribution:\n  sample: 0.5\n"
    );
    let (dir, file) = experiment_file("attr-envoy", &body);
    let store = dir.join("store.db");
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let (file, store_arg) = (s(&file), s(&store));
    run_ok(&["experiment", &file, "--store", &store_arg]);

    let shown = run_ok(&["results", "show", "attr-envoy", "--store", &store_arg]);
    for needle in [
        "Where the latency goes",
        "server_proxy (envoy) per request",
        "link client <-> server_proxy",
        "server_proxy (own time)",
        "backend (and its link)",
        "residual",
    ] {
        assert!(shown.contains(needle), "want {needle:?} in:\n{shown}");
    }

    let json: serde_json::Value = serde_json::from_str(&run_ok(&[
        "results",
        "export",
        "attr-envoy",
        "--format",
        "json",
        "--store",
        &store_arg,
    ]))
    .unwrap();
    let answers = json["attribution"].as_array().unwrap();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[1]["variant"], "serveronly");
    assert_eq!(answers[1]["shares"].as_array().unwrap().len(), 3);
    let step = &json["steps"][1]["attribution"];
    let splits = step["requests"].as_array().unwrap();
    // 200 rps x 3 s, one in 2.
    assert!(splits.len() >= 250, "{} split", splits.len());
    for split in splits {
        let sum: i64 = split["parts_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_i64().unwrap())
            .sum();
        assert_eq!(sum, split["latency_ns"].as_i64().unwrap());
    }
    // The engine's own latency: the sample's median is the run's p50 within 10 %.
    let mut latencies: Vec<i64> = splits
        .iter()
        .map(|s| s["latency_ns"].as_i64().unwrap())
        .collect();
    latencies.sort_unstable();
    let sample_p50_us = latencies[latencies.len() / 2] as f64 / 1000.0;
    let run_p50_us = json["steps"][1]["result"]["latency_us"]["p50"]
        .as_f64()
        .unwrap();
    assert!(
        (sample_p50_us - run_p50_us).abs() <= run_p50_us * 0.1,
        "sampled p50 {sample_p50_us} µs, the run's {run_p50_us} µs"
    );

    let compared = run_ok(&[
        "compare",
        "attr-envoy:baseline",
        "attr-envoy:serveronly",
        "--store",
        &store_arg,
    ]);
    assert!(
        compared.contains("Which hop grew from baseline"),
        "{compared}"
    );

    let report = dir.join("report");
    run_ok(&[
        "report",
        "attr-envoy",
        "--out",
        &s(&report),
        "--store",
        &store_arg,
    ]);
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(html.contains("Where the latency goes"));
    assert!(report.join("plots/where-latency-goes-1.svg").exists());
}

#[test]
fn a_hop_that_logs_nothing_per_request_is_named_as_such_and_its_time_is_in_the_link() {
    let body = format!(
        "topologies: [serveronly]\n{SHORT}proxy:\n  type: nginx\nattribution:\n  sample: 0.5\n"
    );
    let (dir, file) = experiment_file("attr-nginx", &body);
    let store = dir.join("store.db");
    let store_arg = store.to_str().unwrap();
    run_ok(&["experiment", file.to_str().unwrap(), "--store", store_arg]);
    let shown = run_ok(&["results", "show", "attr-nginx", "--store", store_arg]);
    assert!(
        shown.contains("server_proxy (nginx) not logged per request: in the link around it"),
        "{shown}"
    );
    assert!(shown.contains("backend (and its link)"), "{shown}");
    assert!(!shown.contains("server_proxy (own time)"), "{shown}");
}

#[test]
fn attribution_that_cannot_be_done_is_refused_in_one_line_each() {
    let lab = "topologies: [serveronly]\n";
    let external = "topologies: [external]\nexternal:\n  prometheus_url: http://127.0.0.1:9090\n  variants:\n    - {name: direct, url: 'http://127.0.0.1:1/'}\n";
    for (body, needle) in [
        (
            format!("{lab}attribution:\n  sample: 0\n"),
            "attribution.sample: 0 is not a share",
        ),
        (
            format!("{lab}attribution:\n  sample: 1.5\n"),
            "attribution.sample: 1.5 is not a share",
        ),
        (
            format!("{lab}attribution:\n  sample: 0.1\nload:\n  protocol: http3\n"),
            "attribution: not built for HTTP/3 yet",
        ),
        (
            format!("{external}attribution:\n  sample: 0.1\n"),
            "which an external variant's are not",
        ),
    ] {
        let (_, file) = experiment_file("attr-bad", &body);
        let out = meshbench(
            &["experiment", file.to_str().unwrap(), "--dry-run"],
            Duration::from_secs(20),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{body}: {err}");
        assert!(err.contains(needle), "want {needle:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn the_gateway_and_the_waypoint_log_per_request_and_the_tunnels_are_named() {
    let _ = envoy_binary();
    let body = format!(
        "topologies: [gateway, waypoint]\n{SHORT}proxy:\n  type: envoy\n  workers: 1\ntunnel:\n  type: envoy\ngateway:\n  type: envoy\n  domains: 2\n  paths: 2\nattribution:\n  sample: 0.5\n"
    );
    let (dir, file) = experiment_file("attr-edges", &body);
    let store = dir.join("store.db");
    let store_arg = store.to_str().unwrap();
    run_ok(&["experiment", file.to_str().unwrap(), "--store", store_arg]);
    let json: serde_json::Value = serde_json::from_str(&run_ok(&[
        "results",
        "export",
        "attr-edges",
        "--format",
        "json",
        "--store",
        store_arg,
    ]))
    .unwrap();
    let seen = |step: &serde_json::Value| -> Vec<(String, String)> {
        step["attribution"]["path"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["role"].as_str().unwrap().to_string(),
                    h["seen"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let steps = json["steps"].as_array().unwrap();
    let pair = |r: &str, s: &str| (r.to_string(), s.to_string());
    assert_eq!(seen(&steps[0]), vec![pair("gateway", "per_request")]);
    assert_eq!(
        seen(&steps[1]),
        vec![
            pair("ztunnel_client", "connections_only"),
            pair("waypoint", "per_request"),
            pair("ztunnel_server", "connections_only"),
        ]
    );
    for step in steps {
        let a = &step["attribution"];
        let split = a["requests"].as_array().unwrap().len();
        assert!(
            split >= 250,
            "{}: {split} split of {}",
            step["variant"],
            a["sampled"]
        );
        assert_eq!(a["unjoined"], 0, "{}", step["variant"]);
    }
}
