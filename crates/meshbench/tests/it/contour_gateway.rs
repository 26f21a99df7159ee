//! Issue 49: Contour configures the gateway, and Envoy carries traffic on what it sends.
//!
//! The tests run the real programs: etcd and a kube-apiserver (scripts/install-k8s.sh) with
//! Contour's CRDs, `contour serve` built from Contour's Go module (scripts/install-contour.sh),
//! and the project's Envoy on the bootstrap `contour bootstrap` writes, as `gateway.type:
//! contour` starts them; a missing binary fails the test and names the script.
//!
//! - `meshbench experiment` with `gateway.type: contour` at 10 domains x 10 paths: 2,000 of
//!   2,000 requests answered, Envoy's own count equal to the engine's, every HTTPProxy `valid`
//!   in Contour's status (the step does not start otherwise), Contour sampled as a role.
//! - `limits.control_plane` swept over two CPU values, with two backend replicas behind the
//!   gateway (`backend.replicas`: each answers its share): each step's Contour runs in a
//!   cgroup of its own with that step's quota and the memory limit asked; each step stores the control
//!   plane's allotment and Contour's usage row its CPU limit; the answers read it as a
//!   control-plane sweep (no RPS per core drawn over it).
//! - `meshbench gen gateway --for contour` writes the same objects for a cluster (`--tls`
//!   needed: refused in one line without it).
//! - Bad input: Contour in network namespaces, as a sidecar, or as a tunnel, and a control-plane
//!   limit with no control plane or swept beside another role, are refused before anything
//!   starts; a missing installation is named by `--dry-run`.

use crate::common;

use std::time::Duration;

use common::{meshbench, stderr, u};
use meshbench_lab::contour;

const DOMAINS: usize = 10;
const PATHS: usize = 10;
const LIMIT: Duration = Duration::from_secs(180);

#[test]
fn contours_envoy_serves_every_route_and_counts_what_the_engine_sent() {
    if let Some(e) = contour::unavailable() {
        panic!("{e}");
    }
    let dir = common::scratch_dir("contour-experiment");
    let file = dir.join("contour.yaml");
    // 400 req/s, evenly spaced, for 5 s with no warm-up: 2,000 requests, every one of them
    // inside the measured window, so that Envoy's count and the engine's are the same number.
    std::fs::write(
        &file,
        format!(
            "name: contour-gateway-test\ntopologies: [gateway]\nduration_secs: 5\nwarmup_secs: 0\n\
             cooldown_secs: 0\nload:\n  rate_rps: [400]\n  connections: [8]\n  arrival: [uniform]\n\
             gateway:\n  type: contour\n  domains: {DOMAINS}\n  paths: {PATHS}\n"
        ),
    )
    .unwrap();
    let store = dir.join("store");
    let (f, s) = (file.display().to_string(), store.display().to_string());
    let out = meshbench(&["experiment", &f, "--store", &s], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("failed:"), "{err}");
    // The control plane's line and its continuations (stderr is wrapped at 120 columns).
    let lines: Vec<&str> = err.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with("contour: "))
        .unwrap_or_else(|| panic!("no control-plane line: {err}"));
    let note = std::iter::once(&lines[first])
        .chain(lines[first + 1..].iter().take_while(|l| l.starts_with(' ')))
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        note.contains(&format!("{DOMAINS} HTTPProxies applied"))
            && note.contains("every one valid in Contour's status")
            && note.contains(&format!("Envoy held all {} routes", DOMAINS * PATHS * 2)),
        "{note}"
    );

    let export = common::export_json(&store);
    let step = &export["steps"][0];
    assert_eq!(step["status"], "ok", "{step}");
    let summary = &step["summary"];
    assert_eq!(u(summary, "/errors"), 0, "{summary}");
    let result = &step["result"];
    // Every request of the schedule was sent; one still in flight when the window closed (a
    // busy machine slows the target's last answers) is counted unfinished, not answered.
    let (answered, unfinished) = (
        u(result, "/requests/total"),
        u(result, "/requests/unfinished"),
    );
    assert_eq!(answered + unfinished, 2000, "{}", result["requests"]);
    assert!(unfinished <= 2, "{}", result["requests"]);
    assert_eq!(u(summary, "/requests"), answered, "{summary}");
    assert_eq!(
        u(result, "/status_codes/200"),
        answered,
        "{}",
        result["status_codes"]
    );
    let hosts = result["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), DOMAINS, "every domain was asked: {hosts:?}");
    let gateway = common::usage_of(step, "gateway");
    assert_eq!(gateway["program"], "contour");
    // Envoy's own count, read from its admin: the very requests the engine sent, no more (one
    // unfinished at the window's end may be in it or not: Envoy counts an answer once done).
    let counted = u(gateway, "/proxy/requests/total");
    assert!(
        (answered..=answered + unfinished).contains(&counted),
        "{answered} answered, {unfinished} unfinished: {gateway}"
    );
    assert_eq!(
        u(gateway, "/proxy/requests/status_2xx"),
        counted,
        "{gateway}"
    );
    assert!(
        gateway["cpu_millicores_avg"].as_f64().unwrap_or(0.0) > 0.0,
        "{gateway}"
    );
    // Contour, which configured it, sampled as a role beside it.
    let contour = common::usage_of(step, "contour");
    assert!(u(contour, "/samples") >= 2, "{contour}");
    assert!(
        contour["cpu_millicores_avg"].as_f64().is_some(),
        "{contour}"
    );
    assert!(
        contour["rss_mib_avg"].as_f64().unwrap_or(0.0) > 10.0,
        "{contour}"
    );
    let shown = meshbench(&["results", "show", "latest", "--store", &s], LIMIT);
    let shown = common::stdout(&shown);
    assert!(shown.contains("contour "), "{shown}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn contour_where_it_cannot_run_is_refused_up_front_in_one_line() {
    let dir = common::scratch_dir("contour-refused");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    for (name, text, says) in [
        (
            "netns.yaml",
            "name: x\ntopologies: [gateway]\nisolation: netns\ngateway:\n  type: contour\n",
            "use isolation: loopback",
        ),
        (
            "sidecar.yaml",
            "name: x\ntopologies: [both]\nproxy:\n  type: contour\n",
            "proxy.type: contour",
        ),
        (
            "tunnel.yaml",
            "name: x\ntopologies: [ambient]\ntunnel:\n  type: contour\n",
            "tunnel.type: contour",
        ),
        (
            "limit-of-nothing.yaml",
            "name: x\ntopologies: [gateway]\ngateway:\n  type: nginx\nlimits:\n  control_plane:\n    cpus: [0.5]\n",
            "limits.control_plane: no control plane runs in this experiment",
        ),
        (
            "two-sweeps.yaml",
            "name: x\ntopologies: [gateway]\ngateway:\n  type: contour\nlimits:\n  proxy:\n    cpus: [0.5, 1]\n  control_plane:\n    cpus: [0.25, 0.5]\n",
            "limits: only one role's cpus may list several values",
        ),
    ] {
        let out = meshbench(&["experiment", &write(name, text), "--dry-run"], LIMIT);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }

    // `gen gateway --for contour` writes what the lab applies (the same writer); without TLS
    // Contour would serve none of its routes on the HTTPS listener: refused in one line.
    let out = meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "contour",
            "--backend",
            "10.0.0.5:8080",
            "--out",
            &dir.join("gen").display().to_string(),
        ],
        LIMIT,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--for contour needs --tls"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "contour",
            "--tls",
            "--domains",
            "2",
            "--backend",
            "127.0.0.1:8080",
            "--out",
            &dir.join("gen").display().to_string(),
        ],
        LIMIT,
    );
    let printed = common::stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        printed.contains("kubectl apply -f")
            && printed.contains("contour-httpproxies.yaml")
            && printed.contains("give --backend an address the pods reach"),
        "{printed}"
    );
    let proxies = std::fs::read_to_string(dir.join("gen/contour-httpproxies.yaml")).unwrap();
    assert_eq!(proxies.matches("kind: HTTPProxy").count(), 2, "{proxies}");

    let gateway = write(
        "gateway.yaml",
        "name: x\ntopologies: [gateway]\ngateway:\n  type: contour\n",
    );
    let mut child = std::process::Command::new(common::bin())
        .args(["experiment", &gateway, "--dry-run"])
        .env("CONTOUR_CACHE", "/nonexistent/contour")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::wait_with_limit(&mut child, LIMIT);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("/nonexistent/contour/bin/contour")
            && err.contains("scripts/install-contour.sh"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The cgroup limits of process `pid`, as (CPU quota in cores, memory limit in MiB), read from
/// cgroup v1's `cpu` and `memory` controllers or v2's unified tree.
fn cgroup_limits(pid: u32) -> Option<(f64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path_of = |controller: &str| {
        text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            (names.split(',').any(|n| n == controller)
                || (controller.is_empty() && names.is_empty()))
            .then(|| path.to_string())
        })
    };
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .map(|t| t.trim().to_string())
    };
    if let (Some(cpu), Some(memory)) = (path_of("cpu"), path_of("memory")) {
        let quota: f64 = read(format!("/sys/fs/cgroup/cpu{cpu}/cpu.cfs_quota_us"))?
            .parse()
            .ok()?;
        let period: f64 = read(format!("/sys/fs/cgroup/cpu{cpu}/cpu.cfs_period_us"))?
            .parse()
            .ok()?;
        let bytes: u64 = read(format!(
            "/sys/fs/cgroup/memory{memory}/memory.limit_in_bytes"
        ))?
        .parse()
        .ok()?;
        return Some((quota / period, bytes >> 20));
    }
    let unified = path_of("")?;
    let max = read(format!("/sys/fs/cgroup{unified}/cpu.max"))?;
    let (quota, period) = max.split_once(' ')?;
    let bytes: u64 = read(format!("/sys/fs/cgroup{unified}/memory.max"))?
        .parse()
        .ok()?;
    Some((
        quota.parse::<f64>().ok()? / period.parse::<f64>().ok()?,
        bytes >> 20,
    ))
}

#[test]
fn contour_swept_over_control_plane_limits_runs_in_a_cgroup_of_its_own_each_step() {
    if let Some(e) = contour::unavailable() {
        panic!("{e}");
    }
    let dir = common::scratch_dir("contour-limited");
    let file = dir.join("contour.yaml");
    std::fs::write(
        &file,
        "name: contour-limited\ntopologies: [gateway]\nduration_secs: 3\nwarmup_secs: 0.5\n\
         cooldown_secs: 0\nsample_interval_ms: 250\nload:\n  rate_rps: [200]\n  connections: [4]\n\
         gateway:\n  type: contour\n  domains: 2\n  paths: 2\n\
         backend:\n  replicas: 2\n\
         limits:\n  control_plane:\n    cpus: [0.25, 0.5]\n    memory_mib: 256\n",
    )
    .unwrap();
    let store = dir.join("store");
    let mut child = std::process::Command::new(common::bin())
        .args(["experiment", &file.display().to_string(), "--store"])
        .arg(&store)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Each step's Contour, read while it serves: its cgroup's quota and memory limit, by pid
    // (each step starts its own).
    let began = std::time::Instant::now();
    let mut seen: Vec<(u32, (f64, u64))> = Vec::new();
    while child.try_wait().unwrap().is_none() {
        // Its working directory is the step's, under this test's temporary directory.
        let serving = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let serves = cmdline.split(|b| *b == 0).nth(1) == Some(&b"serve"[..]);
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            let ours = cwd.starts_with(std::env::temp_dir()) && cwd.ends_with("contour");
            (serves && ours).then_some(pid)
        });
        if let Some(pid) = serving.filter(|pid| seen.iter().all(|(p, _)| p != pid)) {
            if let Some(limits) = cgroup_limits(pid) {
                seen.push((pid, limits));
            }
        }
        assert!(began.elapsed() < LIMIT, "the sweep did not end in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    let limits: Vec<(f64, u64)> = seen.iter().map(|(_, l)| *l).collect();
    assert_eq!(
        limits,
        [(0.25, 256), (0.5, 256)],
        "each step's Contour's cgroup: cores, MiB"
    );
    let out = common::wait_with_limit(&mut child, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let export = common::export_json(&store);
    let steps = export["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{export}");
    for (step, cores) in steps.iter().zip([0.25, 0.5]) {
        assert_eq!(step["status"], "ok", "{step}");
        assert_eq!(step["params"]["cpu"]["role"], "control_plane", "{step}");
        assert_eq!(
            step["params"]["cpu"]["cores"].as_f64(),
            Some(cores),
            "{step}"
        );
        let contour = common::usage_of(step, "contour");
        assert_eq!(contour["cpu_limit"].as_f64(), Some(cores), "{contour}");
        assert!(u(contour, "/samples") >= 2, "{contour}");
        // Two backend pods behind Contour's EndpointSlice, each answering its share.
        for name in ["backend", "backend_2"] {
            let usage = common::usage_of(step, name);
            assert!(
                usage["cpu_millicores_avg"].as_f64().unwrap_or(0.0) > 0.0,
                "replica {name} answered nothing: {usage}"
            );
        }
        assert_eq!(u(&step["summary"], "/errors"), 0, "{step}");
    }
    // The answers read the sweep as the control plane's: each allotment's rate, no RPS per
    // core drawn over cores that carry no request.
    let shown = meshbench(
        &[
            "results",
            "show",
            "latest",
            "--store",
            &store.display().to_string(),
        ],
        LIMIT,
    );
    let shown = common::stdout(&shown);
    assert!(
        shown.contains("gateway with control_plane limited")
            && shown.contains("with 0.25 cores")
            && shown.contains("with 0.5 cores")
            && !shown.contains("each added core carries"),
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
