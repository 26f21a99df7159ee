//! Issue 60's known truth: a change that cannot fail a request. caddy's admin API sent the
//! configuration caddy runs (`changes: [{kind: reload}]`: the same Caddyfile posted to `/load`,
//! which caddy compares and applies nothing of) reads 0 errors in every change's seconds, each
//! change served, and no higher tail than the paired step without changes (the tail's verdict
//! is the one every difference gets, docs/answers.md). It measures latency, so the suite runs
//! it with nothing beside it (scripts/test.sh, group 4); `changes` holds the rest.

use crate::changes::{errors_of, experiment, pair, run, show};
use crate::common;

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
