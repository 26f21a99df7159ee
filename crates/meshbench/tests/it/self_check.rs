//! The self-check against real targets: the cause it names first is the one the evidence shows
//! first. Failures of the target come before anything said about the generator, a run that
//! measured nothing says so and exits 1, and a target at its limit is named as such rather than
//! as too few connections.

use crate::common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// The causes of a result's findings, in order.
fn causes(r: &serde_json::Value) -> Vec<String> {
    r["generator"]["check"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["cause"].as_str().unwrap().to_string())
        .collect()
}

/// The message of the first finding with this cause.
fn message(r: &serde_json::Value, cause: &str) -> String {
    r["generator"]["check"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cause"] == cause)
        .map(|f| f["message"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

#[test]
fn a_tls_target_whose_ca_is_not_trusted_measured_nothing_and_the_line_names_the_certificate() {
    let backend = ProtoBackend::start(Proto::H1Tls, &[]);
    // No --cacert: the generated CA is not among the system's roots.
    let (out, r) = run_json(
        "untrusted-ca",
        &[&backend.url("/"), "-r", "200", "-d", "1s"],
        LIMIT,
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert_eq!(u(&r, "/requests/ok"), 0, "{}", r["errors"]);
    let found = causes(&r);
    assert_eq!(found.first().map(String::as_str), Some("nothing_measured"));
    for symptom in ["timer_lateness", "too_few_connections", "slow_target"] {
        assert!(
            !found.iter().any(|c| c == symptom),
            "the failures explain the late and queued sends, not {symptom}: {found:?}"
        );
    }
    let said = message(&r, "nothing_measured");
    for words in ["unknown CA", "--cacert", "--insecure"] {
        assert!(said.contains(words), "{words:?} in {said}");
    }
    let total = u(&r, "/requests/total");
    assert!(
        said.contains(&format!("{total} of {total} requests")),
        "{said}"
    );
    // The summary says it first among the findings, and shows no latency of zero samples.
    let first = text
        .lines()
        .find(|l| l.starts_with("  INVALID:") || l.starts_with("  NOTE:"))
        .unwrap_or_default();
    assert!(first.contains("nothing measured"), "{text}");
    assert!(!text.contains("latency    p50"), "{text}");
}

#[test]
fn most_requests_failing_is_said_first_with_the_status_they_got() {
    let backend = BackendProc::start(&["--status", "503:80%"]);
    let (out, r) = run_json(
        "mostly-503",
        &[&backend.url("/"), "-n", "500", "-c", "4"],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(u(&r, "/requests/ok") > 0, "{}", r["requests"]);
    let found = causes(&r);
    assert_eq!(
        found.first().map(String::as_str),
        Some("target_errors"),
        "{found:?}"
    );
    let said = message(&r, "target_errors");
    assert!(said.contains("503"), "{said}");
    assert!(stdout(&out).contains("target errors:"), "{}", stdout(&out));
}

#[test]
fn a_target_at_its_limit_is_named_so_not_too_few_connections() {
    // One thread spending 1 ms of CPU per request: at most 1,000 req/s, asked for 4,000 over
    // 64 connections (which would carry 64,000 req/s at 1 ms each).
    let backend = BackendProc::start(&["--work", "1ms"]);
    let (out, r) = run_json(
        "at-its-limit",
        &[&backend.url("/"), "-r", "4000", "-c", "64", "-d", "2s"],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let found = causes(&r);
    assert!(
        !found.iter().any(|c| c == "too_few_connections"),
        "{found:?}: {}",
        message(&r, "too_few_connections")
    );
    assert!(found.iter().any(|c| c == "slow_target"), "{found:?}");
    assert!(message(&r, "slow_target").contains("limit"), "{found:?}");
}

#[test]
fn a_capacity_search_names_the_targets_limit_not_too_few_connections() {
    // Each step warms up first, so a step above the target's limit starts with every
    // connection already queued at the target: only the earlier steps show its own speed.
    let backend = BackendProc::start(&["--work", "1ms"]);
    let store = scratch_dir("capacity-limit").join("results.db");
    let store = store.to_str().unwrap();
    let out = meshbench(
        &[
            "capacity",
            &backend.url("/"),
            "--slo",
            "p99<100ms",
            "--start",
            "200",
            "--precision",
            "50%",
            "--step-duration",
            "1s",
            "--warmup",
            "1s",
            "-c",
            "64",
            "-q",
            "--store",
            store,
        ],
        Duration::from_secs(180),
    );
    let text = stdout(&out);
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert!(!text.contains("too_few_connections"), "{text}");
    let export = meshbench(
        &["results", "export", "--format", "json", "--store", store],
        LIMIT,
    );
    assert!(export.status.success(), "{}", stderr(&export));
    let e: serde_json::Value = serde_json::from_str(&stdout(&export)).unwrap();
    let steps = e["steps"].as_array().unwrap();
    let all: Vec<Vec<String>> = steps.iter().map(|s| causes(&s["result"])).collect();
    assert!(
        !all.iter().flatten().any(|c| c == "too_few_connections"),
        "{all:?}"
    );
    assert!(
        all.iter().flatten().any(|c| c == "slow_target"),
        "a step above the limit says so: {all:?}"
    );
}

/// Issue 33: a run of a millisecond against a port nothing listens on measured nothing, and
/// says that and only that. Its one thread spent most of that millisecond starting, waiting
/// for a CPU as it did; over a run with no figure that is no finding about the generator.
#[test]
fn a_refused_port_gets_one_verdict_and_only_that() {
    let closed = free_addr();
    let url = format!("http://{closed}/");
    let (out, r) = run_json("refused-port", &[&url, "-d", "1ms"], LIMIT);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert_eq!(causes(&r), ["nothing_measured"], "{text}");
    let verdicts: Vec<String> = findings(&text)
        .into_iter()
        .filter(|f| f.starts_with("INVALID: ") || f.starts_with("NOTE: "))
        .collect();
    assert_eq!(verdicts.len(), 1, "{text}");
    assert!(
        verdicts[0].starts_with("INVALID: nothing measured"),
        "{text}"
    );
    let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 120).collect();
    assert!(wide.is_empty(), "lines wider than 120 columns: {wide:?}");
}
