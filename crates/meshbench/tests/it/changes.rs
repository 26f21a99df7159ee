//! Issue 60: what a change costs the traffic, run as a user runs it (`meshbench experiment` with
//! a `changes` section) against the real gateways (nginx, haproxy, caddy: Debian packages,
//! installed if missing; Envoy: scripts/install-envoy.sh; Istio's gateway with istiod and
//! Contour's Envoy with Contour, each with the lab's API server: scripts/install-deps.sh), each
//! told its own way (`nginx -s reload`, haproxy's master-worker reload, caddy's admin API,
//! Envoy's file-based xDS, the objects on the API server its control plane reads).
//!
//! - The known truth (caddy's admin API sent the configuration it runs: 0 errors, no higher
//!   tail) is `changes_truth`, which measures latency and so runs with nothing beside it.
//! - A route added and removed, a domain added with its certificate and the first domain's
//!   certificate issued again are served through every gateway: the probe saw each one (a new
//!   name over TLS signed by the run's CA, a new path answering, a removed path no longer
//!   answering, the new certificate presented on a new connection); every error of the step falls within
//!   a change's seconds, none in the paired step; `results show` prints each change's line and
//!   the ranking.
//! - haproxy's plain reload (`gateway.haproxy_reload: plain`): each change a new haproxy with
//!   `-sf`, every change served by it, the step whole (the old process ends, the new one is the
//!   gateway).
//! - Ctrl-C (SIGINT to meshbench's process group) while haproxy's plain reload has started new
//!   processes (groups of their own): none is left, and the interrupted step keeps its changes.
//! - Bad input: a gateway meshbench cannot change (a command), a change the gateway cannot make
//!   (a route where routes are gRPC methods; a ServiceEntry without Istio's sidecars), a rate
//!   above what a step can hold, and the external topology, each refused in one line with
//!   exit 2.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{meshbench, stderr, stdout};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(180);

pub(crate) fn experiment(name: &str, gateway: &str, changes: &str) -> String {
    format!(
        "name: {name}\ntopologies: [gateway]\nduration_secs: 6\nwarmup_secs: 1\n\
         cooldown_secs: 0\nsample_interval_ms: 250\nload:\n  rate_rps: [400]\n  connections: [8]\n\
         gateway:\n  type: {gateway}\n  domains: 4\n  paths: 3\nchanges:\n{changes}"
    )
}

/// Runs `text` into its own store; the exported steps, a pair.
pub(crate) fn run(dir: &Path, name: &str, text: &str) -> (Vec<Value>, std::path::PathBuf) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, text).unwrap();
    let store = dir.join(format!("{name}.db"));
    let (steps, _) = run_into(&file.display().to_string(), &store);
    assert_eq!(steps.len(), 2, "{name}: a pair of steps");
    (steps, store)
}

/// Runs the experiment `file` into `store`: every step ok, the ranking printed. The exported
/// steps and what it printed.
pub(crate) fn run_into(file: &str, store: &Path) -> (Vec<Value>, String) {
    let out = meshbench(
        &["experiment", file, "--store", &store.display().to_string()],
        LIMIT,
    );
    assert!(out.status.success(), "{file}: {}", stderr(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("What a change costs the traffic"),
        "{file}: {printed}"
    );
    let export = common::export_json(store);
    let steps = export["steps"].as_array().unwrap().clone();
    for s in &steps {
        assert_eq!(s["status"], "ok", "{file}: {s}");
    }
    (steps, printed)
}

/// What `results show` prints of the one experiment in `store`.
pub(crate) fn show(store: &Path) -> String {
    let store = store.display().to_string();
    let out = meshbench(&["results", "show", "1", "--store", &store], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// The step with changes and the one without, in that order.
pub(crate) fn pair(steps: &[Value]) -> (&Value, &Value) {
    let changed = |s: &&Value| {
        s["changes"]["changes"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    };
    let with = steps.iter().find(changed).expect("a step with changes");
    let still = steps.iter().find(|s| !changed(s)).expect("its pair");
    assert!(still["changes"]["changes"].as_array().unwrap().is_empty());
    (with, still)
}

pub(crate) fn errors_of(change: &Value) -> u64 {
    change["errors"]
        .as_object()
        .map_or(0, |m| m.values().map(|n| n.as_u64().unwrap()).sum())
}

#[test]
fn routes_and_domains_are_served_through_every_gateway_and_every_error_is_a_changes() {
    let dir = common::scratch_dir("changes-gateways");
    // A second between changes: a probe asks until the next change is due, and a gateway
    // reloaded on a machine busy with the suite's other lane took longer than 0.7 s.
    let streams = "  - kind: route\n    every_secs: 3\n  - kind: domain\n    at_secs: [4, 8]\n  - kind: certificate\n    at_secs: [7]\n";
    for gateway in ["nginx", "haproxy", "caddy", "envoy", "istio", "contour"] {
        let text =
            experiment(gateway, gateway, streams).replace("duration_secs: 6", "duration_secs: 10");
        let (steps, store) = run(&dir, gateway, &text);
        let (with, still) = pair(&steps);
        let changes = with["changes"]["changes"].as_array().unwrap();
        let kinds: Vec<&str> = changes
            .iter()
            .map(|c| c["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["route", "domain", "route", "certificate", "domain", "route"],
            "{gateway}: {with}"
        );
        for c in changes {
            assert!(c["failed"].is_null(), "{gateway}: {c}");
            let served = c["served_ms"].as_f64();
            assert!(served.is_some_and(|ms| ms > 0.0), "{gateway} served: {c}");
            // Over HTTP/1.1 a connection carries one request at a time: every request that
            // failed with its connection (not an answer's status, not a timeout) is one
            // connection failed.
            let with_connection: u64 = (c["errors"].as_object().unwrap().iter())
                .filter(|(kind, _)| !kind.starts_with("http_") && *kind != "timeout")
                .map(|(_, n)| n.as_u64().unwrap())
                .sum();
            assert_eq!(
                c["connections_failed"].as_u64(),
                Some(with_connection),
                "{gateway}: {c}"
            );
        }
        let what: Vec<&str> = changes
            .iter()
            .map(|c| c["what"].as_str().unwrap())
            .collect();
        assert!(what[0].contains("/get/4 added"), "{what:?}");
        assert!(
            what[1].contains("workspace-1-domain-5.com added"),
            "{what:?}"
        );
        assert!(what[2].contains("/get/4 removed"), "{what:?}");
        // Served: a new connection was presented the certificate issued under load.
        assert!(
            what[3].contains("certificate of workspace-1-domain-1.com issued again"),
            "{what:?}"
        );
        if gateway == "nginx" {
            // A reload's old workers close the kept-alive connections: the load opens them again.
            let opened: u64 = (changes.iter())
                .map(|c| c["connections_opened"].as_u64().unwrap())
                .sum();
            assert!(opened > 0, "nginx: no connection reopened: {with}");
        }
        // Every failed request of the step is in a change's seconds; the pair has none.
        let in_changes: u64 = changes.iter().map(errors_of).sum();
        let total = with["summary"]["errors"].as_u64().unwrap();
        assert!(in_changes <= total, "{gateway}: {in_changes} > {total}");
        let outside = total - in_changes;
        assert_eq!(
            outside, 0,
            "{gateway}: errors outside the changes' seconds: {with}"
        );
        assert_eq!(still["summary"]["errors"], 0, "{gateway}: {still}");
        let text = show(&store);
        assert!(
            text.contains("route /get/4 removed on every domain: told"),
            "{gateway}: {text}"
        );
    }
}

#[test]
fn haproxys_plain_reload_is_a_new_process_that_serves_every_change() {
    let dir = common::scratch_dir("changes-haproxy-plain");
    let streams = "  - kind: route\n    every_secs: 2\n  - kind: certificate\n    at_secs: [3]\n";
    let text = experiment("plain", "haproxy", streams)
        .replace("duration_secs: 6", "duration_secs: 8")
        .replace("  paths: 3\n", "  paths: 3\n  haproxy_reload: plain\n");
    // `run` holds every step `ok`: the gateway started again is the role from then on (no
    // role is seen gone when the old process ends).
    let (steps, _) = run(&dir, "plain", &text);
    let (with, still) = pair(&steps);
    for s in [with, still] {
        assert_eq!(
            s["changes"]["told_by"], "haproxy plain reload (a new process, -sf)",
            "{s}"
        );
    }
    let changes = with["changes"]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 4, "{with}");
    for c in changes {
        assert!(c["failed"].is_null(), "{c}");
        assert!(c["served_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{c}");
    }
    let in_changes: u64 = changes.iter().map(errors_of).sum();
    assert_eq!(
        with["summary"]["errors"].as_u64().unwrap(),
        in_changes,
        "errors outside the changes' seconds: {with}"
    );
    assert_eq!(still["summary"]["errors"], 0, "{still}");
}

#[test]
fn ctrl_c_while_haproxy_is_started_again_leaves_no_process_and_keeps_the_changes_measured() {
    let dir = common::scratch_dir("changes-ctrl-c");
    let text = experiment(
        "ctrl-c",
        "haproxy",
        "  - kind: route\n    every_secs: 1.5\n",
    )
    .replace("duration_secs: 6", "duration_secs: 20")
    .replace("  paths: 3\n", "  paths: 3\n  haproxy_reload: plain\n");
    let file = dir.join("ctrl-c.yaml");
    std::fs::write(&file, text).unwrap();
    let store = dir.join("ctrl-c.db");
    let mut child = common::spawn_meshbench_in_own_group(&[
        "experiment",
        &file.display().to_string(),
        "--store",
        &store.display().to_string(),
    ]);
    let pid = child.id();
    // The changed step has started haproxy again (a process of its own group, which the
    // signal to meshbench's group does not reach).
    let began = std::time::Instant::now();
    while !(crate::lab::leftovers(pid).iter())
        .any(|l| l.starts_with("process") && l.contains("-sf"))
    {
        assert!(began.elapsed() < LIMIT, "no haproxy started again");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    common::interrupt_group(&child);
    let out = common::wait_with_limit(&mut child, LIMIT);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let left = crate::lab::leftovers(pid);
    assert!(left.is_empty(), "{left:?}");
    let doc = common::export_json(&store);
    let steps = doc["steps"].as_array().unwrap();
    let changed = steps.last().unwrap();
    assert_eq!(changed["status"], "partial", "{changed}");
    let changes = changed["changes"]["changes"].as_array().unwrap();
    assert!(!changes.is_empty(), "{changed}");
    assert!(
        changes[0]["served_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{changed}"
    );
}

#[test]
fn changes_a_gateway_cannot_make_or_a_step_cannot_hold_are_refused_in_one_line() {
    let dir = common::scratch_dir("changes-bad");
    let cases = [
        (
            experiment("command", "command", "  - kind: route\n    every_secs: 2\n"),
            "gateway.type command cannot be changed under load",
        ),
        (
            experiment("grpc", "nginx", "  - kind: route\n    every_secs: 2\n")
                .replace("load:\n", "load:\n  protocol: grpc\n"),
            "changes[0].kind: a gateway carrying gRPC routes the backend's methods",
        ),
        (
            experiment("fast", "nginx", "  - kind: route\n    every_secs: 0.1\n"),
            "faster than a step can hold",
        ),
        (
            experiment(
                "together",
                "nginx",
                "  - kind: route\n    every_secs: 0.6\n  - kind: domain\n    every_secs: 0.6\n",
            ),
            "above what a step can hold",
        ),
        (
            "name: x\ntopologies: [external]\nexternal:\n  prometheus_url: http://127.0.0.1:1\n  variants:\n    - name: a\n      url: http://127.0.0.1:1/\nchanges:\n  - kind: reload\n    every_secs: 1\n".to_string(),
            "an external system's configuration is its owner's",
        ),
        (
            experiment("kind", "nginx", "  - kind: secret\n    every_secs: 2\n"),
            "changes[0].kind: unknown variant `secret`",
        ),
        (
            experiment("mesh", "nginx", "  - kind: service_entry\n    every_secs: 1\n"),
            "changes[0].kind: service_entry changes the mesh of Istio's sidecars; set proxy.type: istio",
        ),
    ];
    for (text, expected) in cases {
        let file = dir.join("bad.yaml");
        std::fs::write(&file, &text).unwrap();
        let out = meshbench(
            &["experiment", &file.display().to_string(), "--dry-run"],
            LIMIT,
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{expected}: {err}");
        assert!(err.contains(expected), "{expected}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
