//! The `external` topology against real parts: a real Prometheus (Debian's, from
//! scripts/install-deps.sh) scraping real exporters every second, and the real binary running
//! the experiment. Three cases:
//!
//! - process-exporter against the cgroup sampler: nginx under a 0.25-core quota, read by
//!   PromQL (`process` preset) and by the lab's own sampler over the same window; the figures
//!   agree within 10 %.
//! - a cAdvisor-format fixture: a loopback server writing the kubelet's series at known rates,
//!   so that every Kubernetes preset's queries run for real and return what the fixture
//!   implies; plus a counter that resets, a malformed query and a selector that matches
//!   nothing, each one warning line and the role marked missing.
//! - Prometheus down: the step is kept with its load figures, every role missing, one line,
//!   exit 0.
//!
//! Every process started here is stopped when its guard drops; all traffic stays on loopback.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::prometheus::{Prometheus as TestPrometheus, PrometheusOptions};
use common::{export_json, free_addr, meshbench, BackendProc, LabRole};
use meshbench_lab::cgroup::{Cgroup, Cgroups, Limits};
use meshbench_lab::process::{Placement, RoleProcess};
use meshbench_lab::program::{nginx, ProgramSpec, Run};
use meshbench_lab::sampler::{self, Sampler, Watch};
use meshbench_lab::Program;
use meshbench_results::Role;
use meshbench_runner::place::external::prometheus::Prometheus;
use serde_json::Value;

/// A directory of its own for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("mb-ext-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A real Prometheus on loopback scraping `targets` every second, and its URL.
fn start_prometheus(targets: &[SocketAddr]) -> (TestPrometheus, String) {
    let p = TestPrometheus::start(&PrometheusOptions {
        scrape: targets.to_vec(),
        ..PrometheusOptions::default()
    });
    let url = format!("http://{}", p.addr);
    (p, url)
}

/// Waits (at most 30 s) until `query` returns a series at Prometheus `url`.
fn wait_for_series(url: &str, query: &str) {
    let p = Prometheus::new(url, Duration::from_secs(2), Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = sampler::now_ms() as f64 / 1000.0;
        if p.query(query, now).is_ok_and(|s| !s.is_empty()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no series for {query} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `meshbench experiment FILE` into `store`; its output.
fn experiment(file: &Path, store: &Path) -> std::process::Output {
    meshbench(
        &[
            "experiment",
            file.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "-q",
        ],
        Duration::from_secs(50),
    )
}

fn role<'a>(step: &'a Value, name: &str) -> &'a Value {
    step["usage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["role"] == name)
        .unwrap_or_else(|| panic!("no role {name} in {step}"))
}

fn missing(u: &Value) -> Vec<String> {
    u.get("missing")
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The warnings about the steps: the plan's own (a duration too short for a verdict, which
/// these short tests choose) left out.
fn warnings(stderr: &str) -> Vec<String> {
    common::messages(stderr)
        .into_iter()
        .filter(|l| l.starts_with("warning:") && !l.contains("too short"))
        .collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

#[test]
fn process_exporter_agrees_with_the_cgroup_sampler_on_a_limited_nginx() {
    let scratch = Scratch::new("process");
    let dir = &scratch.0;
    let kind = Cgroups::detect().expect("cgroups can be written (run as root)");
    const CORES: f64 = 0.25;
    let group = Cgroup::create(
        &kind,
        &format!("{}-ext-nginx", std::process::id()),
        &Limits {
            cpus: Some(CORES),
            ..Limits::default()
        },
    )
    .unwrap();
    // nginx, one worker, under the quota; its master's title carries this directory's name,
    // which is how process-exporter finds it (its worker comes along as a child).
    let ndir = dir.join("nginx");
    std::fs::create_dir_all(&ndir).unwrap();
    let addr = free_addr();
    let conf = ndir.join("nginx.conf");
    std::fs::write(&conf, nginx::static_config(&ndir, addr, 64, 1)).unwrap();
    let bin = ProgramSpec::from(Program::Nginx).binary().unwrap();
    let run = Run {
        config: &conf,
        dir: &ndir,
        name: "nginx",
        workers: 1,
    };
    let place = Placement {
        cgroup: Some(&group),
        ..Placement::default()
    };
    let nginx_proc = RoleProcess::start(
        "nginx",
        nginx::command(&bin, &run),
        &dir.join("nginx.log"),
        &place,
        addr,
        &meshbench_results::Stop::new(),
    )
    .unwrap();
    let group_name = format!("mb-ext-{}", std::process::id());
    let exporter_cfg = dir.join("process-exporter.yml");
    let marker = ndir.display().to_string();
    std::fs::write(
        &exporter_cfg,
        format!(
            "process_names:\n  - name: {group_name}\n    cmdline:\n      - '^nginx: master process .*{}'\n",
            marker.replace('.', "\\.")
        ),
    )
    .unwrap();
    let exporter_addr = free_addr();
    let mut cmd = Command::new("/usr/bin/prometheus-process-exporter");
    cmd.arg("-config.path")
        .arg(&exporter_cfg)
        .arg("-web.listen-address")
        .arg(exporter_addr.to_string())
        .arg("-threads=false")
        .arg("-gather-smaps=false");
    let _exporter = LabRole::start("process-exporter", cmd, exporter_addr, dir)
        .expect("prometheus-process-exporter starts (scripts/install-deps.sh installs it)");
    let (_prometheus, url) = start_prometheus(&[exporter_addr]);
    wait_for_series(
        &url,
        &format!("namedprocess_namegroup_num_procs{{groupname=\"{group_name}\"}} >= 2"),
    );

    // The lab's own sampler on the same cgroup, all along.
    let local = Sampler::start(
        vec![Watch {
            role: Role::from_word("nginx"),
            pgid: nginx_proc.pid(),
            cgroup: Some(group.files()),
            port: None,
            upstream_port: None,
            veth: None,
        }],
        Duration::from_millis(500),
    );
    let file = dir.join("e.yaml");
    std::fs::write(
        &file,
        format!(
            "name: ext-process
topologies: [external]
warmup_secs: 4
duration_secs: 8
cooldown_secs: 0
load:
  mode: closed
  connections: [8]
  threads: 1
external:
  prometheus_url: {url}
  scrape_interval_secs: 1
  query_timeout_secs: 5
  variants:
    - name: nginx
      url: http://{addr}/
      roles:
        - name: edge
          preset: process
          match: {{groupname: {group_name}}}
"
        ),
    )
    .unwrap();
    let store = dir.join("results.db");
    let out = experiment(&file, &store);
    let local = local.finish();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(warnings(&stderr).is_empty(), "{stderr}");

    let s = meshbench_store::Store::open(&store).unwrap();
    let e = s.experiment("latest").unwrap();
    let steps = s.steps(e.id).unwrap();
    let step = &steps[0];
    assert_eq!(step.step.variant, "nginx");
    assert!(step.step.result.as_ref().unwrap().requests.ok > 1000);
    let edge_role = meshbench_results::Role::External("edge".into());
    let edge = step
        .step
        .usage
        .iter()
        .find(|u| u.role == edge_role)
        .unwrap();
    assert_eq!(
        edge.program,
        meshbench_results::PlayedBy::External("process".into())
    );
    let grid = &s.samples(step.id).unwrap()[&edge_role];
    let (from, to) = (grid[0].t_ms, grid[grid.len() - 1].t_ms);
    let cgroup = sampler::summarize(&local.roles[&Role::from_word("nginx")], from, to);
    let promql_mc = edge.cpu_millicores().expect("CPU read");
    let promql_mib = edge.memory_mib().expect("resident memory read");
    eprintln!(
        "PromQL (process-exporter): {promql_mc:.1} millicores, {promql_mib:.2} MiB resident; cgroup sampler: {:.1} millicores, {:.2} MiB RSS ({} and {} samples over {} ms)",
        cgroup.cpu_millicores_avg,
        cgroup.rss_mib_avg,
        edge.usage.samples,
        cgroup.samples,
        to - from
    );
    // nginx used most of its quota, so the agreement means something.
    assert!(
        cgroup.cpu_millicores_avg >= 0.6 * CORES * 1000.0,
        "nginx was not driven hard: {cgroup:?}"
    );
    assert!(
        close(promql_mc, cgroup.cpu_millicores_avg, 0.10),
        "CPU: PromQL {promql_mc} vs cgroup {}",
        cgroup.cpu_millicores_avg
    );
    assert!(
        close(promql_mib, cgroup.rss_mib_avg, 0.10),
        "memory: PromQL {promql_mib} vs sampler {}",
        cgroup.rss_mib_avg
    );
    // process-exporter has no network: missing, by design and without a warning.
    assert_eq!(edge.bytes_per_sec(), None);
    drop(nginx_proc);
}

/// One container of the fixture and the rates and sizes it reports.
struct Container {
    preset: &'static str,
    namespace: &'static str,
    pod: &'static str,
    container: &'static str,
    cores: f64,
    working_set_mib: u64,
    rss_mib: u64,
    rx_bytes_per_sec: f64,
    tx_bytes_per_sec: f64,
}

const FIXTURE: &[Container] = &[
    Container {
        preset: "istio-sidecar",
        namespace: "bench",
        pod: "fortioserver-5b8f7c-x2x9q",
        container: "istio-proxy",
        cores: 0.25,
        working_set_mib: 48,
        rss_mib: 40,
        rx_bytes_per_sec: 1.0e6,
        tx_bytes_per_sec: 2.0e6,
    },
    Container {
        preset: "istio-ingressgateway",
        namespace: "istio-system",
        pod: "istio-ingressgateway-6d9c-abcde",
        container: "istio-proxy",
        cores: 0.40,
        working_set_mib: 96,
        rss_mib: 80,
        rx_bytes_per_sec: 3.0e6,
        tx_bytes_per_sec: 3.5e6,
    },
    Container {
        preset: "ztunnel",
        namespace: "istio-system",
        pod: "ztunnel-k2x9p",
        container: "istio-proxy",
        cores: 0.15,
        working_set_mib: 20,
        rss_mib: 18,
        rx_bytes_per_sec: 5.0e5,
        tx_bytes_per_sec: 5.0e5,
    },
    Container {
        preset: "waypoint",
        namespace: "bench",
        pod: "waypoint-7c9d-q8w2e",
        container: "istio-proxy",
        cores: 0.30,
        working_set_mib: 64,
        rss_mib: 60,
        rx_bytes_per_sec: 2.5e6,
        tx_bytes_per_sec: 2.4e6,
    },
    Container {
        preset: "envoy-gateway",
        namespace: "envoy-gateway-system",
        pod: "envoy-default-eg-e41e7b31-x7k2p",
        container: "envoy",
        cores: 0.35,
        working_set_mib: 72,
        rss_mib: 70,
        rx_bytes_per_sec: 4.0e6,
        tx_bytes_per_sec: 4.2e6,
    },
    Container {
        preset: "contour",
        namespace: "projectcontour",
        pod: "envoy-4xk9z",
        container: "envoy",
        cores: 0.20,
        working_set_mib: 56,
        rss_mib: 50,
        rx_bytes_per_sec: 1.5e6,
        tx_bytes_per_sec: 1.6e6,
    },
    Container {
        preset: "ingress-nginx",
        namespace: "ingress-nginx",
        pod: "ingress-nginx-controller-5d88-h2k4m",
        container: "controller",
        cores: 0.45,
        working_set_mib: 128,
        rss_mib: 110,
        rx_bytes_per_sec: 6.0e6,
        tx_bytes_per_sec: 6.5e6,
    },
];

/// The sidecar's neighbour in its pod: its CPU must not be counted as the sidecar's.
const APP_CORES: f64 = 0.5;
/// A sidecar whose counters go back to zero every this many seconds (a restarting container).
const RESTART_EVERY_SECS: f64 = 3.0;
const RESTARTING: Container = Container {
    preset: "istio-sidecar",
    namespace: "bench",
    pod: "restarting-0",
    container: "istio-proxy",
    cores: 0.1,
    working_set_mib: 10,
    rss_mib: 10,
    rx_bytes_per_sec: 1e5,
    tx_bytes_per_sec: 1e5,
};
/// A sidecar whose pod's network series cAdvisor gives only from [`NETWORK_FROM`] on (as it
/// drops and gives again a pod's network series under load), its CPU steady throughout.
const LATE_NETWORK: Container = Container {
    preset: "istio-sidecar",
    namespace: "bench",
    pod: "late-network-0",
    container: "istio-proxy",
    cores: 0.2,
    working_set_mib: 20,
    rss_mib: 20,
    rx_bytes_per_sec: 1e5,
    tx_bytes_per_sec: 1e5,
};
/// When [`LATE_NETWORK`]'s network series begin: set as the experiment starts, so that they
/// come inside its window.
static NETWORK_FROM: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
const MIB: u64 = 1 << 20;

/// The kubelet's cAdvisor exposition at `elapsed` seconds: counters at their rates since a
/// base, gauges at their sizes, network per pod (the sandbox, `container="POD"`).
fn cadvisor_text(elapsed: f64) -> String {
    let mut cpu = String::from("# TYPE container_cpu_usage_seconds_total counter\n");
    let mut ws = String::from("# TYPE container_memory_working_set_bytes gauge\n");
    let mut rss = String::from("# TYPE container_memory_rss gauge\n");
    let mut rx = String::from("# TYPE container_network_receive_bytes_total counter\n");
    let mut tx = String::from("# TYPE container_network_transmit_bytes_total counter\n");
    let labels = |ns: &str, pod: &str, c: &str| {
        format!(
            "container=\"{c}\",id=\"/kubepods/burstable/pod-{pod}/{c}\",image=\"img\",name=\"{c}-{pod}\",namespace=\"{ns}\",pod=\"{pod}\""
        )
    };
    let all = FIXTURE.iter().map(|c| (c, elapsed)).chain([
        (&RESTARTING, elapsed % RESTART_EVERY_SECS),
        (&LATE_NETWORK, elapsed),
    ]);
    for (c, since) in all {
        let l = labels(c.namespace, c.pod, c.container);
        cpu.push_str(&format!(
            "container_cpu_usage_seconds_total{{{l},cpu=\"total\"}} {}\n",
            1000.0 + c.cores * since
        ));
        ws.push_str(&format!(
            "container_memory_working_set_bytes{{{l}}} {}\n",
            c.working_set_mib * MIB
        ));
        rss.push_str(&format!(
            "container_memory_rss{{{l}}} {}\n",
            c.rss_mib * MIB
        ));
        let network_now =
            c.pod != LATE_NETWORK.pod || NETWORK_FROM.get().is_some_and(|t| Instant::now() >= *t);
        if !network_now {
            continue;
        }
        let p = format!("{},interface=\"eth0\"", labels(c.namespace, c.pod, "POD"));
        rx.push_str(&format!(
            "container_network_receive_bytes_total{{{p}}} {}\n",
            1.0e9 + c.rx_bytes_per_sec * since
        ));
        tx.push_str(&format!(
            "container_network_transmit_bytes_total{{{p}}} {}\n",
            1.0e9 + c.tx_bytes_per_sec * since
        ));
    }
    let app = labels("bench", FIXTURE[0].pod, "fortioserver");
    cpu.push_str(&format!(
        "container_cpu_usage_seconds_total{{{app},cpu=\"total\"}} {}\n",
        50.0 + APP_CORES * elapsed
    ));
    ws.push_str(&format!(
        "container_memory_working_set_bytes{{{app}}} {}\n",
        300 * MIB
    ));
    cpu + &ws + &rss + &rx + &tx
}

/// A loopback server answering every request with `body(seconds since it started)`.
struct Exposition {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exposition {
    fn start(body: fn(f64) -> String) -> Exposition {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut req = Vec::new();
                let mut buf = [0u8; 2048];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(n) if n > 0 => req.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let text = body(started.elapsed().as_secs_f64());
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        Exposition {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Exposition {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn every_kubernetes_preset_reads_what_a_cadvisor_fixture_implies() {
    let scratch = Scratch::new("cadvisor");
    let dir = &scratch.0;
    let fixture = Exposition::start(cadvisor_text);
    let (_prometheus, url) = start_prometheus(&[fixture.addr]);
    wait_for_series(&url, "container_cpu_usage_seconds_total");
    let backend = BackendProc::start(&[]);

    let mut roles = String::new();
    for c in FIXTURE {
        // The presets' defaults find the gateways; sidecars and waypoints are named.
        let m = match c.preset {
            "istio-sidecar" => "{namespace: bench, pod: 'fortioserver-.*'}",
            "waypoint" => "{namespace: bench}",
            _ => "{}",
        };
        roles.push_str(&format!(
            "        - {{name: {0}, preset: {0}, match: {m}}}\n",
            c.preset
        ));
    }
    roles.push_str(
        "        - {name: restarting, preset: istio-sidecar, match: {namespace: bench, pod: 'restarting-.*'}}
        - {name: late-network, preset: istio-sidecar, match: {namespace: bench, pod: 'late-network-.*'}}
        - {name: nobody, preset: istio-sidecar, match: {namespace: nowhere, pod: 'x-.*'}}
        - name: whole-pod
          cpu: 'sum(rate(container_cpu_usage_seconds_total{namespace=\"bench\",pod=~\"fortioserver-.*\"}[$window]))'
        - name: broken
          cpu: 'sum(rate(container_cpu_usage_seconds_total[$window])'
",
    );
    let file = dir.join("e.yaml");
    std::fs::write(
        &file,
        format!(
            "name: ext-cadvisor
topologies: [external]
warmup_secs: 4
duration_secs: 6
cooldown_secs: 0
load:
  rate_rps: [100]
  connections: [2]
  threads: 1
external:
  prometheus_url: {url}
  scrape_interval_secs: 1
  query_timeout_secs: 5
  variants:
    - name: meshed
      url: {}
      roles:
{roles}",
            backend.url("/")
        ),
    )
    .unwrap();
    // --dry-run shows every query, the window filled in.
    let dry = meshbench(
        &["experiment", file.to_str().unwrap(), "--dry-run"],
        Duration::from_secs(10),
    );
    let dry_text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{dry_text}");
    assert!(
        dry_text.contains(r#"sum(rate(container_cpu_usage_seconds_total{container="istio-proxy",namespace=~"bench",pod=~"fortioserver-.*"}[4000ms]))"#),
        "{dry_text}"
    );

    let store = dir.join("results.db");
    let started = Instant::now();
    // About when the window opens (after 4 s of warm-up), after the start of its first rate
    // window (4 s before it), so that they came within what the window reads yet give it most
    // of its points.
    NETWORK_FROM
        .set(started + Duration::from_millis(4500))
        .unwrap();
    let out = experiment(&file, &store);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(40));
    // One line for each role that could not be read, naming it and what to check.
    let w = warnings(&stderr);
    eprintln!("{}", w.join("\n"));
    assert_eq!(w.len(), 4, "{stderr}");
    let line = |role: &str| {
        w.iter()
            .find(|l| l.contains(&format!("role {role} ")))
            .unwrap_or_else(|| panic!("no warning for {role}: {stderr}"))
    };
    assert!(line("restarting").contains("counter reset"), "{stderr}");
    // A pod's network series that came in the window: its rx and tx only are missing.
    assert!(
        line("late-network").contains("its rx series came or went during the window")
            && line("late-network").contains("its tx series came or went"),
        "{stderr}"
    );
    assert!(
        line("broken").contains("Prometheus refused its cpu query"),
        "{stderr}"
    );
    assert!(
        line("nobody").contains("no series for cpu, memory, rss, rx, tx"),
        "{stderr}"
    );

    let doc = export_json(&store);
    let step = &doc["steps"][0];
    assert_eq!(step["topology"], "external");
    assert_eq!(step["variant"], "meshed");
    assert_eq!(step["status"], "ok");
    assert!(step["summary"]["requests"].as_u64().unwrap() > 0);
    for c in FIXTURE {
        let u = role(step, c.preset);
        assert_eq!(u["program"], c.preset);
        let mc = u["cpu_millicores_avg"].as_f64().unwrap();
        assert!(
            close(mc, c.cores * 1000.0, 0.03),
            "{}: {mc} millicores",
            c.preset
        );
        assert_eq!(
            u["working_set_mib_avg"].as_f64(),
            Some(c.working_set_mib as f64),
            "{}",
            c.preset
        );
        assert_eq!(
            u["rss_mib_max"].as_f64(),
            Some(c.rss_mib as f64),
            "{}",
            c.preset
        );
        let gone = missing(u);
        assert!(gone.contains(&"connections".to_string()), "{}", c.preset);
        if c.preset == "ztunnel" {
            assert!(gone.contains(&"rx".to_string()) && gone.contains(&"tx".to_string()));
        } else {
            let rx = u["rx_bytes_per_sec"].as_f64().unwrap();
            let tx = u["tx_bytes_per_sec"].as_f64().unwrap();
            assert!(close(rx, c.rx_bytes_per_sec, 0.03), "{}: rx {rx}", c.preset);
            assert!(close(tx, c.tx_bytes_per_sec, 0.03), "{}: tx {tx}", c.preset);
            assert_eq!(gone, ["connections"], "{}", c.preset);
        }
        eprintln!(
            "{}: {mc:.1} millicores (fixture {}), {} MiB",
            c.preset,
            c.cores * 1000.0,
            u["working_set_mib_avg"]
        );
    }
    let whole = role(step, "whole-pod");
    let expect = (FIXTURE[0].cores + APP_CORES) * 1000.0;
    let mc = whole["cpu_millicores_avg"].as_f64().unwrap();
    assert!(close(mc, expect, 0.03), "whole pod: {mc} vs {expect}");
    assert_eq!(whole["program"], "promql");
    for name in ["restarting", "nobody"] {
        assert_eq!(
            missing(role(step, name)),
            ["connections", "cpu", "memory", "rss", "rx", "tx"],
            "{name}"
        );
    }
    assert!(missing(role(step, "broken")).contains(&"cpu".to_string()));
    let late = role(step, "late-network");
    assert_eq!(missing(late), ["connections", "rx", "tx"], "{late}");
    let mc = late["cpu_millicores_avg"].as_f64().unwrap();
    assert!(
        close(mc, LATE_NETWORK.cores * 1000.0, 0.03),
        "late-network: {mc}"
    );

    // The table and the CSV say `-` and nothing where figures are missing.
    let show = meshbench(
        &[
            "results",
            "show",
            "latest",
            "--store",
            store.to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    let show_text = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{show_text}");
    assert!(show_text.contains("restarting -/-"), "{show_text}");
    assert!(show_text.contains("istio-sidecar 2"), "{show_text}");
    let csv = meshbench(
        &[
            "results",
            "export",
            "latest",
            "--format",
            "csv",
            "--store",
            store.to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    let csv_text = String::from_utf8_lossy(&csv.stdout);
    let mut lines = csv_text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    let cell = |col: &str| row[head.iter().position(|h| *h == col).unwrap()];
    assert_eq!(cell("cpu_mili_avg_restarting"), "");
    let sidecar: f64 = cell("cpu_mili_avg_istio-sidecar").parse().unwrap();
    assert!(close(sidecar, FIXTURE[0].cores * 1000.0, 0.03));
}

#[test]
fn prometheus_down_keeps_the_step_and_marks_its_roles_missing() {
    let scratch = Scratch::new("down");
    let dir = &scratch.0;
    let backend = BackendProc::start(&[]);
    let closed = free_addr(); // nothing listens there any more
    let file = dir.join("e.yaml");
    std::fs::write(
        &file,
        format!(
            "name: ext-down
topologies: [external]
warmup_secs: 2
duration_secs: 2
cooldown_secs: 0
load:
  rate_rps: [100]
  connections: [2]
  threads: 1
external:
  prometheus_url: http://{closed}
  scrape_interval_secs: 0.25
  variants:
    - name: baseline
      url: {0}
    - name: sidecar
      url: {0}
      roles:
        - {{name: edge, preset: process, match: {{groupname: nginx}}}}
        - {{name: proxy, preset: istio-sidecar, match: {{namespace: bench, pod: 'p-.*'}}}}
",
            backend.url("/")
        ),
    )
    .unwrap();
    let store = dir.join("results.db");
    let started = Instant::now();
    let out = experiment(&file, &store);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Documented: exit 0; missing resources are not a failed step.
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let w = warnings(&stderr);
    eprintln!("{}", w.join("\n"));
    assert_eq!(w.len(), 1, "{stderr}");
    for words in [
        &format!("Prometheus at http://{closed} did not answer"),
        "the resources of edge, proxy are marked missing",
        "check external.prometheus_url",
    ] {
        assert!(w[0].contains(words), "{words}: {}", w[0]);
    }
    // The external variant named baseline is what the other is compared with.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Latency added over the baseline"),
        "{stdout}"
    );
    let doc = export_json(&store);
    let step = &doc["steps"][1];
    assert_eq!(step["variant"], "sidecar");
    assert_eq!(step["status"], "ok");
    assert!(step["summary"]["requests"].as_u64().unwrap() > 0);
    for name in ["edge", "proxy"] {
        let gone = missing(role(step, name));
        assert_eq!(
            gone,
            ["connections", "cpu", "memory", "rss", "rx", "tx"],
            "{name}"
        );
        let why = &role(step, name)["missing"]["cpu"];
        assert!(
            why.as_str().unwrap().contains("did not answer") || name == "edge",
            "{name}: {why}"
        );
    }
}
