//! Issue 60's known truth: a change that cannot fail a request. caddy's admin API sent the
//! configuration caddy runs (`changes: [{kind: reload}]`: the same Caddyfile posted to `/load`,
//! which caddy compares and applies nothing of) reads 0 errors in every change's seconds, each
//! change served, and no higher tail than the paired step without changes (the tail's verdict
//! is the one every difference gets, docs/answers.md). It measures latency, so the suite runs
//! it with nothing beside it (scripts/test.sh, group 4); `changes` holds the rest.

use crate::changes::{errors_of, experiment, pair, run, show};
use crate::common;

use serde_json::Value;

#[test]
fn caddy_sent_the_configuration_it_runs_fails_no_request_and_adds_no_tail() {
    let dir = common::scratch_dir("changes-truth");
    let (steps, store) = run(
        &dir,
        "truth",
        &experiment("truth", "caddy", "  - kind: reload\n    every_secs: 1\n"),
    );
    let (with, still) = pair(&steps);
    let changes = with["changes"]["changes"].as_array().unwrap();
    assert!(changes.len() >= 4, "{with}");
    for c in changes {
        assert!(c["failed"].is_null(), "{c}");
        assert!(c["served_ms"].as_f64().is_some(), "served: {c}");
        assert_eq!(errors_of(c), 0, "{c}");
        assert!(c["requests"].as_u64().unwrap() > 0, "{c}");
    }
    assert_eq!(with["changes"]["told_by"], "caddy admin API (POST /load)");
    for s in [with, still] {
        assert_eq!(s["summary"]["errors"], 0, "{s}");
    }
    let text = show(&store);
    // The ranking's row: no errors, and the added tail read as noise, not as higher.
    let row = text
        .lines()
        .find(|l| l.contains("caddy admin API"))
        .unwrap_or_else(|| panic!("a ranking row: {text}"));
    assert!(row.contains(" reload ") && row.contains("0.00"), "{row}");
    assert!(!row.contains("higher"), "no added tail: {text}");
    assert!(
        text.contains("the same configuration told again: told"),
        "each change's line: {text}"
    );
}

/// The other half of the truth: a change that must fail requests. The backend's one replica
/// killed under meshbench's Envoy gateway and started again at its address (`kind: backend`,
/// the gateway not told), while requests are in flight to it (it answers after 20 ms; Envoy
/// retries a refused connection as Istio's default does, not a reset one): every request
/// Envoy answered with a 5xx in the step is one the engine counted as failed, exactly, by
/// Envoy's own counter read through its admin; none failed in the step without the roll.
#[test]
fn a_backend_killed_under_envoy_fails_exactly_the_requests_envoy_counts_as_5xx() {
    let dir = common::scratch_dir("changes-must-fail");
    let text = experiment(
        "must-fail",
        "envoy",
        "  - kind: backend\n    at_secs: [2, 4]\n",
    ) + "backend:\n  replicas: 1\n  delay_ms: 20\n";
    let (steps, _) = run(&dir, "must-fail", &text);
    let (with, still) = pair(&steps);
    let envoy_5xx = |s: &Value| {
        let gateway = (s["usage"].as_array().unwrap().iter())
            .find(|u| u["role"] == "gateway")
            .unwrap_or_else(|| panic!("the gateway's use: {s}"));
        gateway["proxy"]["requests"]["status_5xx"]
            .as_u64()
            .unwrap_or_else(|| panic!("Envoy's own count: {gateway}"))
    };
    let changes = with["changes"]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{with}");
    assert_eq!(
        with["changes"]["told_by"],
        "backend: replicas killed and started again in turn, the gateway not told"
    );
    let mut failed = 0;
    for c in changes {
        assert_eq!(c["kind"], "backend", "{c}");
        assert!(c["failed"].is_null(), "{c}");
        assert!(c["served_ms"].as_f64().is_some(), "the replica back: {c}");
        failed += errors_of(c);
    }
    let engine = with["summary"]["errors"].as_u64().unwrap();
    assert!(engine > 0, "a killed backend fails requests: {with}");
    // Every failure is in a roll's seconds, and Envoy answered each with a 5xx.
    let seconds: Vec<(u64, u64)> = (with["result"]["timeline"].as_array().unwrap().iter())
        .filter(|p| p["errors"].as_u64() > Some(0))
        .map(|p| (p["second"].as_u64().unwrap(), p["errors"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        failed, engine,
        "errors by second {seconds:?}: {}",
        with["changes"]
    );
    assert_eq!(envoy_5xx(with), engine, "{}", with["summary"]);
    assert_eq!(still["summary"]["errors"], 0, "{still}");
    assert_eq!(envoy_5xx(still), 0);
    eprintln!(
        "two rolls: {engine} failed, Envoy's 5xx {}, served in {} and {} ms",
        envoy_5xx(with),
        changes[0]["served_ms"],
        changes[1]["served_ms"]
    );
}
