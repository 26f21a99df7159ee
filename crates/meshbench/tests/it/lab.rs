//! `meshbench experiment` and `meshbench results` against the real thing: nginx, haproxy and
//! caddy (Debian packages) as sidecars, gateways and tunnels in front of the backend, each in its
//! cgroup; the store read back and exported; a proxy that dies, SIGTERM and SIGKILL mid-run.
//! Every experiment here is short (steps of 1-2 s) and sends traffic to loopback or to network
//! namespaces the rig itself creates.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(240);

struct Lab {
    dir: PathBuf,
}

impl Lab {
    fn new(name: &str) -> Lab {
        let dir =
            std::env::temp_dir().join(format!("meshbench-labtest-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Lab { dir }
    }

    fn file(&self, name: &str, yaml: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, yaml).unwrap();
        p.display().to_string()
    }

    fn store(&self) -> String {
        self.dir.join("results.db").display().to_string()
    }

    /// Runs an experiment file with extra arguments; returns the output.
    fn experiment(&self, file: &str, extra: &[&str]) -> std::process::Output {
        let store = self.store();
        let mut args = vec!["experiment", file, "--store", &store, "--quiet"];
        args.extend_from_slice(extra);
        meshbench(&args, LIMIT)
    }

    /// The newest experiment, exported as JSON.
    fn exported(&self) -> serde_json::Value {
        let store = self.store();
        let out = meshbench(
            &[
                "results", "export", "latest", "--format", "json", "--store", &store,
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn roles(step: &serde_json::Value) -> Vec<String> {
    step["usage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["role"].as_str().unwrap().to_string())
        .filter(|r| r != "sampler")
        .collect()
}

fn usage<'a>(step: &'a serde_json::Value, role: &str) -> &'a serde_json::Value {
    step["usage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["role"] == role)
        .unwrap_or_else(|| panic!("no {role} in {}", step["usage"]))
}

/// Checks that every role of every step carried the load: requests all answered, and each
/// role on the path received and sent bytes and held connections.
fn assert_every_hop_carried(steps: &[serde_json::Value], expected: &[(&str, &[&str])]) {
    for s in steps {
        let topology = s["topology"].as_str().unwrap();
        assert_eq!(s["status"], "ok", "{topology}: {}", s["error"]);
        let sum = &s["summary"];
        assert!(
            sum["requests"].as_u64().unwrap() >= 380,
            "{topology}: {sum}"
        );
        assert_eq!(sum["errors"], 0, "{topology}: {}", s["result"]["errors"]);
        let want = expected
            .iter()
            .find(|(t, _)| *t == topology)
            .map(|(_, r)| *r)
            .unwrap_or_else(|| panic!("unexpected topology {topology}"));
        assert_eq!(
            roles(s),
            want,
            "{topology}: the hops from the client to the backend"
        );
        for role in want {
            let u = usage(s, role);
            assert!(
                u["samples"].as_u64().unwrap() >= 2,
                "{topology}/{role}: {u}"
            );
            // 200 requests a second of about 70 bytes in, 1 KiB responses out: every role on
            // the path moves both.
            let (rx, tx) = (
                u["rx_bytes_per_sec"].as_f64().unwrap(),
                u["tx_bytes_per_sec"].as_f64().unwrap(),
            );
            assert!(rx > 8_000.0 && tx > 8_000.0, "{topology}/{role}: {u}");
            assert!(
                rx + tx > 180_000.0,
                "{topology}/{role} carried the responses: {u}"
            );
            assert!(
                u["connections_max"].as_u64().unwrap() >= 1,
                "{topology}/{role}: {u}"
            );
            assert!(
                u["cpu_millicores_avg"].as_f64().unwrap() > 0.0,
                "{topology}/{role}: {u}"
            );
            assert!(
                u["rss_mib_avg"].as_f64().unwrap() > 0.5,
                "{topology}/{role}: {u}"
            );
        }
    }
}

const ALL_ROLES: &[(&str, &[&str])] = &[
    ("baseline", &["backend"]),
    ("serveronly", &["server_proxy", "backend"]),
    ("clientonly", &["client_proxy", "backend"]),
    ("both", &["client_proxy", "server_proxy", "backend"]),
    ("gateway", &["gateway", "backend"]),
    ("ambient", &["ztunnel_client", "ztunnel_server", "backend"]),
    (
        "waypoint",
        &["ztunnel_client", "waypoint", "ztunnel_server", "backend"],
    ),
];

const SHORT: &str =
    "duration_secs: 2\nwarmup_secs: 0.5\ncooldown_secs: 0\nsample_interval_ms: 250\n";

#[test]
fn every_topology_carries_traffic_through_real_nginx_and_haproxy() {
    let lab = Lab::new("topologies");
    let file = lab.file(
        "all.yaml",
        &format!(
            "name: all-topologies
topologies: [baseline, serveronly, clientonly, both, gateway, ambient, waypoint]
{SHORT}load:
  rate_rps: [200]
  connections: [4]
proxy:
  type: nginx
  mtls: true
tunnel:
  type: haproxy
  mtls: true
gateway:
  type: haproxy
  domains: 5
  paths: 4
limits:
  proxy:
    cpus: [1]
"
        ),
    );
    let out = lab.experiment(&file, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = lab.exported();
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 7);
    assert_every_hop_carried(steps, ALL_ROLES);
    // Mutual TLS between the sidecars: the server proxy's listener refuses a plain client.
    // (Checked through the versions and the programs recorded.)
    let both = steps.iter().find(|s| s["topology"] == "both").unwrap();
    assert_eq!(usage(both, "client_proxy")["program"], "nginx");
    assert_eq!(
        usage(both, "client_proxy")["workers"],
        1,
        "workers follow 1 core"
    );
    assert!(both["versions"]["proxy:nginx"]
        .as_str()
        .unwrap()
        .contains("nginx"));
    assert!(both["versions"]["tunnel:haproxy"]
        .as_str()
        .unwrap()
        .to_lowercase()
        .contains("haproxy"));
    let ambient = steps.iter().find(|s| s["topology"] == "ambient").unwrap();
    assert_eq!(usage(ambient, "ztunnel_server")["program"], "haproxy");
    // The table on stdout lists every step.
    let text = stdout(&out);
    for t in ["baseline", "waypoint", "ztunnel_client"] {
        assert!(text.contains(t), "{t} in {text}");
    }
}

#[test]
fn haproxy_and_caddy_sidecars_and_nginx_tunnels_work_too() {
    let lab = Lab::new("programs");
    let file = lab.file(
        "haproxy.yaml",
        &format!(
            "name: haproxy-sidecars
topologies: [both, ambient]
{SHORT}load:
  rate_rps: [200]
  connections: [4]
proxy:
  type: haproxy
  mtls: true
tunnel:
  type: nginx
  mtls: true
"
        ),
    );
    let out = lab.experiment(&file, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = lab.exported();
    let steps = doc["steps"].as_array().unwrap();
    assert_every_hop_carried(steps, ALL_ROLES);
    assert_eq!(usage(&steps[1], "ztunnel_client")["program"], "nginx");
    // caddy as the server's sidecar, and through the --set route.
    let out = lab.experiment(
        &file,
        &[
            "--set",
            "proxy.type=caddy",
            "--set",
            "topologies=[serveronly]",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = lab.exported();
    let steps = doc["steps"].as_array().unwrap();
    assert_every_hop_carried(steps, ALL_ROLES);
    assert_eq!(usage(&steps[0], "server_proxy")["program"], "caddy");
}

#[test]
fn a_cpu_quota_holds_the_proxy_near_its_allotment() {
    let lab = Lab::new("quota");
    let file = lab.file(
        "quota.yaml",
        "name: quota
topologies: [serveronly]
duration_secs: 3
warmup_secs: 1
cooldown_secs: 0
load:
  mode: closed
  connections: [32]
proxy:
  type: nginx
limits:
  proxy:
    cpus: [0.25]
",
    );
    let out = lab.experiment(&file, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = lab.exported();
    let step = &doc["steps"][0];
    let u = usage(step, "server_proxy");
    let mc = u["cpu_millicores_avg"].as_f64().unwrap();
    assert!(
        (175.0..=280.0).contains(&mc),
        "nginx limited to 0.25 core under maximum load used {mc} millicores"
    );
    assert_eq!(u["cpu_limit"], 0.25);
    // The sampler's own cost is recorded and small.
    let sampler = usage(step, "sampler")["cpu_millicores_avg"]
        .as_f64()
        .unwrap();
    assert!(sampler < 20.0, "sampler used {sampler} millicores");
}

#[test]
fn roles_in_network_namespaces_joined_by_veth_pairs() {
    let lab = Lab::new("netns");
    let file = lab.file(
        "netns.yaml",
        &format!(
            "name: netns
topologies: [baseline, both]
isolation: netns
{SHORT}load:
  rate_rps: [200]
  connections: [4]
proxy:
  type: nginx
  mtls: true
"
        ),
    );
    let out = lab.experiment(&file, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = lab.exported();
    assert_every_hop_carried(doc["steps"].as_array().unwrap(), ALL_ROLES);
    // Every namespace and veth is gone.
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&ns.stdout).to_string();
    assert!(
        !left.lines().any(|l| l.starts_with("meshbench-")),
        "namespaces left: {left}"
    );
}

#[test]
fn a_proxy_that_dies_fails_its_step_and_the_experiment_goes_on() {
    let lab = Lab::new("dies");
    let file = lab.file(
        "dies.yaml",
        "name: dies
topologies: [serveronly, baseline]
duration_secs: 3
warmup_secs: 0.5
cooldown_secs: 0
load:
  rate_rps: [100]
  connections: [2]
proxy:
  type: command
  command: [sh, -c, 'echo about to serve; (sleep 1.5; echo going down >&2; kill $$) & exec haproxy -db -f {config}']
  config_template: |
    defaults
      mode http
      timeout connect 1s
      timeout client 5s
      timeout server 5s
    frontend in
      bind {listen}
      default_backend next
    backend next
      server next {upstream}
",
    );
    let out = lab.experiment(&file, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed step exits 1: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("failed"), "{}", stderr(&out));
    let doc = lab.exported();
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(
        steps.len(),
        2,
        "the experiment went on after the failed step"
    );
    assert_eq!(steps[0]["status"], "failed");
    let error = steps[0]["error"].as_str().unwrap();
    assert!(error.contains("server_proxy exited"), "{error}");
    assert!(
        error.contains("going down"),
        "the tail of its output: {error}"
    );
    assert_eq!(steps[1]["status"], "ok");
    assert_eq!(doc["experiment"]["status"], "done");
}

pub(crate) fn leftovers(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for c in ["cpu", "cpuacct", "cpuset", "memory", ""] {
        let root = Path::new("/sys/fs/cgroup").join(c);
        if let Ok(d) = std::fs::read_dir(&root) {
            for e in d.flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                if n.starts_with(&format!("meshbench-{pid}-")) {
                    found.push(e.path().display().to_string());
                }
            }
        }
    }
    if let Ok(d) = std::fs::read_dir(std::env::temp_dir()) {
        for e in d.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(&format!("meshbench-{pid}-")) {
                found.push(e.path().display().to_string());
            }
        }
    }
    // Istio's sidecars' directories, outside the temporary directory.
    for e in std::fs::read_dir(meshbench_lab::istio::sidecars::POD_DIRS)
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().to_string();
        if n.starts_with(&format!("meshbench-{pid}-")) {
            found.push(e.path().display().to_string());
        }
    }
    // Network namespaces (and with them their veth pairs and iptables rules).
    if let Ok(d) = std::fs::read_dir("/var/run/netns") {
        for e in d.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(&format!("meshbench-{pid}-")) {
                found.push(format!("netns {n}"));
            }
        }
    }
    // Processes whose command line names this run's files.
    if let Ok(d) = std::fs::read_dir("/proc") {
        for e in d.flatten() {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // Or whose working directory is one of them (Istio's agents and their Envoys name
            // their files relative to it).
            let cwd = std::fs::read_link(e.path().join("cwd")).unwrap_or_default();
            let run = format!("meshbench-{pid}-");
            if text.contains(&run) || cwd.to_string_lossy().contains(&run) {
                found.push(format!(
                    "process {}: {text}",
                    e.file_name().to_string_lossy()
                ));
            }
        }
    }
    found
}

fn wait_for_steps(store: &str, n: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let out = meshbench(&["results", "show", "latest", "--store", store], LIMIT);
        let text = stdout(&out);
        // Rows of the step table (numbered); the headline tables below it are not steps.
        let done = text
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u32>().is_ok())
                    && l.contains(" x ")
            })
            .count();
        if done >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} steps not stored in time: {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

const LONG: &str = "name: long
topologies: [serveronly, both]
duration_secs: 1.5
warmup_secs: 0.2
cooldown_secs: 0
repeats: 20
load:
  rate_rps: [100]
  connections: [2]
proxy:
  type: nginx
limits:
  proxy:
    cpus: [0.5]
";

/// Starts the long experiment, sends `signal` once `steps` are stored and a moment has passed,
/// and returns its pid and output.
fn signal_mid_experiment(lab: &Lab, steps: usize, signal: i32) -> (u32, std::process::Output) {
    let file = lab.file("long.yaml", LONG);
    let store = lab.store();
    let mut child = spawn_meshbench(&["experiment", &file, "--store", &store, "--quiet"]);
    let pid = child.id();
    wait_for_steps(&store, steps, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(600));
    unsafe { libc::kill(pid as i32, signal) };
    (pid, wait_with_limit(&mut child, LIMIT))
}

#[test]
fn sigterm_stores_the_step_in_progress_and_removes_everything() {
    let lab = Lab::new("sigterm");
    let (pid, out) = signal_mid_experiment(&lab, 1, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let doc = lab.exported();
    assert_eq!(doc["experiment"]["status"], "interrupted");
    let steps = doc["steps"].as_array().unwrap();
    assert!(steps.len() < 40 && !steps.is_empty());
    let last = steps.last().unwrap();
    assert_eq!(
        last["status"], "partial",
        "the step in progress is kept, marked partial"
    );
    assert!(last["summary"]["requests"].as_u64().unwrap() > 0);
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
}

#[test]
fn the_store_survives_sigkill_and_the_next_run_cleans_up() {
    let lab = Lab::new("sigkill");
    let store = lab.store();
    let (pid, _) = signal_mid_experiment(&lab, 2, libc::SIGKILL);
    // Readable, with the finished steps; the experiment still says running.
    let doc = lab.exported();
    assert_eq!(doc["experiment"]["status"], "running");
    let steps = doc["steps"].as_array().unwrap();
    assert!(steps.len() >= 2);
    assert!(steps
        .iter()
        .all(|s| s["status"] == "ok" && s["summary"]["requests"].as_u64().unwrap() > 0));
    let csv = meshbench(&["results", "export", "latest", "--store", &store], LIMIT);
    assert!(csv.status.success(), "{}", stderr(&csv));
    // The next experiment removes what the killed one left (cgroups and their processes, its
    // rig directories).
    let quick = lab.file("quick.yaml", "name: quick\ntopologies: [baseline]\nduration_secs: 0.5\nwarmup_secs: 0\ncooldown_secs: 0\nload:\n  rate_rps: [50]\n  connections: [1]\n");
    let out = lab.experiment(&quick, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let cgroups: Vec<String> = leftovers(pid)
        .into_iter()
        .filter(|l| l.starts_with("/sys"))
        .collect();
    assert!(cgroups.is_empty(), "{cgroups:?}");
    // Processes of the killed run died with it or with their cgroup.
    let procs: Vec<String> = leftovers(pid)
        .into_iter()
        .filter(|l| l.starts_with("process"))
        .collect();
    assert!(procs.is_empty(), "{procs:?}");
    let dirs: Vec<String> = leftovers(pid)
        .into_iter()
        .filter(|l| l.starts_with(&std::env::temp_dir().display().to_string()))
        .collect();
    assert!(dirs.is_empty(), "{dirs:?}");
}

#[test]
fn exports_follow_istio_csv_and_fortio_json() {
    let lab = Lab::new("export");
    let file = lab.file(
        "e.yaml",
        &format!(
            "name: e1
topologies: [baseline, serveronly]
{SHORT}load:
  rate_rps: [200]
  connections: [4]
  arrival: [uniform, poisson]
"
        ),
    );
    let out = lab.experiment(&file, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let store = lab.store();
    let out = meshbench(
        &[
            "results", "export", "e1", "--format", "csv", "--store", &store,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = stdout(&out);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    // Istio's columns first, as their scripts name them (docs/cli.md has the mapping); then
    // fortio.py's other keys; then meshbench's own, every role under its own name.
    assert_eq!(
        header.join(","),
        "StartTime,ActualDuration,Labels,NumThreads,ActualQPS,p50,p90,p99,p999,\
cpu_mili_avg_istio_proxy_fortioclient,cpu_mili_avg_istio_proxy_fortioserver,\
cpu_mili_avg_istio_proxy_istio-ingressgateway,mem_Mi_avg_istio_proxy_fortioclient,\
mem_Mi_avg_istio_proxy_fortioserver,mem_Mi_avg_istio_proxy_istio-ingressgateway,\
RequestedQPS,min,max,p75,errorPercent,meshbench_actual_qps,meshbench_duration_secs,\
cpu_mili_avg_server_proxy,cpu_mili_avg_backend,cpu_mili_avg_sampler,\
mem_Mi_avg_server_proxy,mem_Mi_avg_backend,mem_Mi_avg_sampler"
    );
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4);
    let labels: Vec<&str> = rows.iter().map(|r| r[2]).collect();
    assert_eq!(
        labels,
        [
            "e1_qps_200_c_4_1024_default_no_istio",
            "e1_qps_200_c_4_1024_default_serveronly",
            "e1_qps_200_c_4_1024_jitter_no_istio",
            "e1_qps_200_c_4_1024_jitter_serveronly"
        ]
    );
    for r in &rows {
        assert_eq!(r[3], "4");
        // A whole number, as Istio's fortio.py writes it; the exact rate beside it. Poisson
        // arrivals (jitter) reach the rate only on average.
        let qps: f64 = r[col("meshbench_actual_qps")].parse().unwrap();
        assert!((180.0..=220.0).contains(&qps), "{r:?}");
        assert_eq!(
            r[col("ActualQPS")],
            format!("{}", qps.round_ties_even()),
            "{r:?}"
        );
        if r[2].contains("_default_") {
            // Evenly spaced arrivals hold the rate within a request or two a second.
            let actual: u64 = r[col("ActualQPS")].parse().unwrap();
            assert!((198..=202).contains(&actual), "{r:?}");
        }
        assert_eq!(r[col("RequestedQPS")], "200", "{r:?}");
        let p50: u64 = r[5].parse().unwrap();
        let p99: u64 = r[7].parse().unwrap();
        assert!(p50 > 0 && p50 <= p99, "{r:?}");
    }
    let server = col("cpu_mili_avg_istio_proxy_fortioserver");
    assert_eq!(rows[0][server], "", "no proxy in the baseline");
    assert!(rows[1][server].parse::<f64>().unwrap() > 0.0);
    assert_eq!(
        rows[1][server],
        rows[1][col("cpu_mili_avg_server_proxy")],
        "the server's sidecar is Istio's fortioserver"
    );
    assert_eq!(rows[1][col("cpu_mili_avg_istio_proxy_fortioclient")], "");
    // fortio: one file per step, readable as fortio's result.
    let dir = lab.dir.join("fortio");
    let d = dir.display().to_string();
    let out = meshbench(
        &[
            "results", "export", "e1", "--format", "fortio", "--out", &d, "--store", &store,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4);
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[1]).unwrap()).unwrap();
    assert_eq!(f["Labels"], "e1_qps_200_c_4_1024_default_serveronly");
    assert_eq!(f["RequestedQPS"], "200");
    assert_eq!(f["NumThreads"], 4);
    let d_ns = f["ActualDuration"].as_u64().unwrap();
    assert!((1_900_000_000..2_200_000_000).contains(&d_ns), "{d_ns}");
    let h = &f["DurationHistogram"];
    let count = h["Count"].as_u64().unwrap();
    assert!(count >= 380);
    let buckets: u64 = h["Data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["Count"].as_u64().unwrap())
        .sum();
    assert_eq!(buckets, count, "every request in a bucket");
    let last = h["Data"].as_array().unwrap().last().unwrap();
    assert_eq!(last["Percent"], 100.0);
    let p = h["Percentiles"].as_array().unwrap();
    assert_eq!(p.len(), 5);
    assert!(
        p[0]["Value"].as_f64().unwrap() < 0.05,
        "seconds, not microseconds"
    );
    assert_eq!(f["RetCodes"]["200"].as_u64().unwrap(), count);
    assert_eq!(f["Jitter"], false);
    // SMP: one document per step, the same figures as the JSON export, in ms.
    let json_out = meshbench(
        &[
            "results", "export", "e1", "--format", "json", "--store", &store,
        ],
        LIMIT,
    );
    let full: serde_json::Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    let out = meshbench(
        &[
            "results", "export", "e1", "--format", "smp", "--store", &store,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let smp: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let docs = smp.as_array().unwrap();
    assert_eq!(docs.len(), 4);
    for (doc, step) in docs.iter().zip(full["steps"].as_array().unwrap()) {
        let r = &doc["performanceTestResult"];
        let lat = &step["result"]["latency_us"];
        let ms = |v: &serde_json::Value| v.as_f64().unwrap() / 1000.0;
        for (smp_key, us_key) in [
            ("min", "min"),
            ("p50", "p50"),
            ("p90", "p90"),
            ("p99", "p99"),
            ("max", "max"),
        ] {
            assert_eq!(
                r["latenciesMs"][smp_key].as_f64().unwrap(),
                ms(&lat[us_key]),
                "{smp_key}"
            );
        }
        assert_eq!(r["actualQPS"], step["result"]["throughput_rps"]);
        assert_eq!(r["smpVersion"], "v0.0.1");
        assert!(r["endTime"].as_str().unwrap() > r["startTime"].as_str().unwrap());
        let client = &doc["performanceTestConfig"]["clients"][0];
        assert_eq!(client["rps"], "200", "int64 is a string in protobuf JSON");
        assert_eq!(client["connections"], 4);
        // Every role but the sampler is a workload, CPU in millicores as stored.
        let workloads = doc["environmentConfig"]["individualWorkloads"]
            .as_array()
            .unwrap();
        let roles: Vec<&serde_json::Value> = step["usage"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["program"] != "meshbench")
            .collect();
        assert_eq!(workloads.len(), roles.len());
        for (w, u) in workloads.iter().zip(&roles) {
            assert_eq!(w["name"], u["role"]);
            assert_eq!(
                w["cpuMCores"].as_i64().unwrap(),
                u["cpu_millicores_avg"].as_f64().unwrap().round() as i64
            );
        }
        let serveronly = step["variant"] == "serveronly";
        assert_eq!(
            doc["serviceMeshConfig"]["sidecar"]["count"].as_u64(),
            serveronly.then_some(1)
        );
    }
}

#[test]
fn experiment_file_mistakes_are_reported_at_once() {
    let lab = Lab::new("badfile");
    let file = lab.file(
        "bad.yaml",
        "name: bad\ntopologies: [baseline, sidecar]\nduration: 3\nload:\n  rate_rps: [100, fast]\n  conections: [4]\n",
    );
    let out = lab.experiment(&file, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("bad.yaml: ")).collect();
    assert_eq!(lines.len(), 4, "{err}");
    for key in [
        "topologies[1]",
        "duration:",
        "load.rate_rps[1]",
        "load.conections",
    ] {
        assert!(err.contains(key), "{key} in {err}");
    }
    assert!(!err.contains("panicked"));
    // A missing file, and a bad --set: one line each.
    let out = lab.experiment("/nonexistent.yaml", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
    let good = lab.file("good.yaml", "name: g\ntopologies: [baseline]\n");
    let out = lab.experiment(&good, &["--set", "repeats"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("expected KEY=VALUE"),
        "{}",
        stderr(&out)
    );
    // --dry-run: the plan with --set applied, nothing started.
    let out = lab.experiment(
        &good,
        &[
            "--dry-run",
            "--set",
            "load.rate_rps=[10,20]",
            "--set",
            "repeats=2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("experiment 'g': 4 steps"), "{text}");
    assert!(
        text.contains("g_qps_20_c_16_1024_default_no_istio"),
        "{text}"
    );
    assert!(
        !Path::new(&lab.store()).exists(),
        "a dry run stores nothing"
    );
}

/// Envoy hops run (Envoy installed by scripts/install-envoy.sh); where Envoy is missing
/// (`MESHBENCH_ENVOY` naming no file) and the file names no fallback, the step fails with one
/// line saying how to install it, and the run exits 1 without a trace.
#[test]
fn envoy_hops_run_and_a_missing_envoy_is_one_line_on_how_to_install_it() {
    meshbench_lab::program::envoy::binary()
        .unwrap_or_else(|e| panic!("Envoy is not installed: run scripts/install-envoy.sh ({e})"));
    let lab = Lab::new("envoy");
    let file = lab.file(
        "envoy.yaml",
        "name: envoy\ntopologies: [serveronly]\nduration_secs: 1\nwarmup_secs: 0\ncooldown_secs: 0\nload:\n  rate_rps: [50]\n  connections: [1]\nproxy:\n  type: envoy\n",
    );
    let out = lab.experiment(&file, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = lab.exported();
    let step = &doc["steps"][0];
    assert_eq!(step["status"], "ok");
    // Envoy as a second witness: its admin read before and after the load, its own count of
    // requests at least what the engine saw answered, and no disagreement flagged.
    let proxy = &usage(step, "server_proxy")["proxy"];
    assert!(
        proxy["requests"]["total"].as_u64().unwrap()
            >= step["result"]["requests"]["ok"].as_u64().unwrap(),
        "{proxy}"
    );
    assert!(!stdout(&out).contains("DISAGREES"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("server_proxy (envoy)"),
        "its own counts under the step: {}",
        stdout(&out)
    );

    let store = lab.store();
    let missing = std::process::Command::new(bin())
        .args(["experiment", &file, "--store", &store, "--quiet"])
        .env("MESHBENCH_ENVOY", "/nonexistent/envoy")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let doc = lab.exported();
    let step = &doc["steps"][0];
    assert_eq!(step["status"], "failed");
    let error = step["error"].as_str().unwrap();
    assert!(
        error.contains("envoy is not available") && error.contains("scripts/install-envoy.sh"),
        "one line on what to install: {error}"
    );
    assert!(!stderr(&missing).contains("panicked"));
}

/// Runs the binary with `MESHBENCH_ENVOY` naming no file: a machine without Envoy.
fn without_envoy(args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(bin());
    cmd.args(args)
        .env("MESHBENCH_ENVOY", "/nonexistent/envoy")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    wait_with_limit(&mut cmd.spawn().unwrap(), LIMIT)
}

/// Must hold (issue 24): `--dry-run` finds a program the plan needs that is not installed.
/// Without a fallback it is one line and exit 1, before anything runs; with one, the dry run
/// says which program stands in and the plan is fine.
#[test]
fn dry_run_finds_a_missing_program_and_says_which_stands_in() {
    let lab = Lab::new("dryrun-programs");
    let file = lab.file(
        "envoy.yaml",
        "name: envoy-dry\ntopologies: [baseline, serveronly]\nload:\n  rate_rps: [100]\nproxy:\n  type: envoy\n",
    );
    let out = without_envoy(&["experiment", &file, "--dry-run"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("meshbench: the plan cannot run here: proxy: envoy is not available")
            && err.contains("fallback"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The same plan with a fallback: nginx stands in, said in one line, and the plan is fine.
    let out = without_envoy(&[
        "experiment",
        &file,
        "--dry-run",
        "--set",
        "proxy.fallback=nginx",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("proxy: envoy is not installed here, so this run measures nginx in its place"),
        "{err}"
    );
    assert!(
        !Path::new(&lab.store()).exists(),
        "a dry run stores nothing"
    );
}

/// Must hold (issue 24): steps shorter than a verdict needs are said before anything runs,
/// by `--dry-run` and by the run itself, with the verdict's own count (four one-second
/// intervals a side, or four repeats).
#[test]
fn steps_too_short_for_a_verdict_are_said_before_the_run() {
    let lab = Lab::new("short-steps");
    let file = lab.file(
        "short.yaml",
        "name: short\ntopologies: [baseline]\nduration_secs: 2\nwarmup_secs: 0\ncooldown_secs: 0\nload:\n  rate_rps: [50]\n  connections: [1]\n",
    );
    let warned = |err: &str| {
        common::messages(err)
            .iter()
            .filter(|l| {
                l.starts_with(
                    "warning: duration_secs=2 gives each step 2 whole one-second intervals",
                ) && l.contains("needs 4 a side")
                    && l.contains("too short")
            })
            .count()
    };
    let out = lab.experiment(&file, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(warned(&stderr(&out)), 1, "{}", stderr(&out));
    let out = lab.experiment(&file, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(warned(&stderr(&out)), 1, "{}", stderr(&out));
    // Long enough, or repeated often enough: nothing to say.
    for set in ["duration_secs=4", "repeats=4"] {
        let out = lab.experiment(&file, &["--dry-run", "--set", set]);
        assert!(
            !stderr(&out).contains("warning:"),
            "{set}: {}",
            stderr(&out)
        );
    }
}

/// Must hold (issue 24): an experiment whose step failed (Envoy missing at step 2, no
/// fallback) is not listed as `done`: `results list` and `results show` say how many steps
/// measured and where the first failed.
#[test]
fn results_list_shows_an_experiment_with_a_failed_step_as_partial() {
    let lab = Lab::new("partial");
    let file = lab.file(
        "envoy.yaml",
        "name: envoy-missing\ntopologies: [baseline, serveronly]\nduration_secs: 1\nwarmup_secs: 0\ncooldown_secs: 0\nload:\n  rate_rps: [50]\n  connections: [1]\nproxy:\n  type: envoy\n",
    );
    let store = lab.store();
    let out = without_envoy(&["experiment", &file, "--store", &store, "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: proxy: envoy is not available"),
        "said before the run: {}",
        stderr(&out)
    );
    let listed = meshbench(&["results", "list", "--store", &store], LIMIT);
    let row = stdout(&listed)
        .lines()
        .find(|l| l.contains("envoy-missing"))
        .map(String::from)
        .unwrap_or_default();
    assert!(
        row.contains("partial 1/2: failed at step 2"),
        "{}",
        stdout(&listed)
    );
    assert!(!row.contains(" done "), "{row}");
    let shown = meshbench(
        &["results", "show", "envoy-missing", "--store", &store],
        LIMIT,
    );
    assert!(
        stdout(&shown).starts_with("experiment 1 'envoy-missing' (partial 1/2: failed at step 2)"),
        "{}",
        stdout(&shown)
    );
}
