//! Issue 49, item 6: one file serves the same plan through every gateway the lab has
//! (`gateway.type` as a list: nginx, haproxy, caddy, Envoy, Istio's gateway by istiod,
//! Contour's Envoy by Contour), each step one program, and the answers rank them in a table
//! from the least CPU per 1,000 RPS to the most, with what one core carried. The real programs
//! run (scripts/install-deps.sh installs every one); a missing one fails the test and names its
//! script. Bad input: a program listed twice, and a fallback beside a list, are refused in
//! one line before anything starts.

use crate::common;

use std::time::Duration;

use common::{meshbench, stderr, stdout, u};

const LIMIT: Duration = Duration::from_secs(300);
const GATEWAYS: [&str; 6] = ["nginx", "haproxy", "caddy", "envoy", "istio", "contour"];

#[test]
fn one_file_serves_the_plan_through_every_gateway_and_ranks_them_by_cpu_per_1000_rps() {
    let dir = common::scratch_dir("gateway-compare");
    let file = dir.join("compare.yaml");
    // Each gateway held to a quarter of a core and driven to it by 16 closed-loop connections.
    std::fs::write(
        &file,
        format!(
            "name: gateway-compare-test\ntopologies: [gateway]\nduration_secs: 3\nwarmup_secs: 1\n\
             cooldown_secs: 0\nsample_interval_ms: 250\n\
             load:\n  mode: closed\n  connections: [40]\n  in_flight: [16]\n\
             gateway:\n  type: [{}]\n  domains: 4\n  paths: 4\n\
             limits:\n  proxy:\n    cpus: [0.25]\n",
            GATEWAYS.join(", ")
        ),
    )
    .unwrap();
    let store = dir.join("store");
    let (f, s) = (file.display().to_string(), store.display().to_string());
    let out = meshbench(&["experiment", &f, "--store", &s], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("in its place"),
        "every gateway ran as asked: {err}"
    );

    let export = common::export_json(&store);
    let steps = export["steps"].as_array().unwrap();
    assert_eq!(steps.len(), GATEWAYS.len(), "{export}");
    for (step, program) in steps.iter().zip(GATEWAYS) {
        assert_eq!(step["status"], "ok", "{program}: {step}");
        assert_eq!(step["variant"], format!("gateway {program}"), "{step}");
        let gateway = common::usage_of(step, "gateway");
        assert_eq!(gateway["program"], program, "{gateway}");
        assert_eq!(gateway["cpu_limit"].as_f64(), Some(0.25), "{gateway}");
        let summary = &step["summary"];
        assert!(u(summary, "/requests") > 100, "{program}: {summary}");
        assert_eq!(u(summary, "/errors"), 0, "{program}: {summary}");
    }

    let shown = meshbench(&["results", "show", "latest", "--store", &s], LIMIT);
    let shown = stdout(&shown);
    // The ranking is a table under its title: a row per gateway, its rank first.
    let at = shown
        .find("Gateways from the least CPU per 1,000 RPS to the most")
        .unwrap_or_else(|| panic!("no ranking: {shown}"));
    let ranking = &shown[at..];
    let listed: Vec<(&str, f64)> = ranking
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.next()?.parse::<usize>().ok()?;
            Some((words.next()?, words.next()?.parse().ok()?))
        })
        .take(GATEWAYS.len())
        .collect();
    // Every gateway named once, in order of the vCPU per 1,000 RPS each is listed with.
    let mut names: Vec<&str> = listed.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    let mut expected = GATEWAYS.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected, "{ranking}");
    assert!(
        listed.windows(2).all(|w| w[0].1 <= w[1].1),
        "cheapest first: {ranking}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_gateway_listed_twice_or_a_fallback_beside_a_list_is_refused_in_one_line() {
    let dir = common::scratch_dir("gateway-compare-refused");
    common::assert_refused_in_one_line(
        &dir,
        &[
        (
            "twice.yaml",
            "name: x\ntopologies: [gateway]\ngateway:\n  type: [nginx, envoy, nginx]\n",
            "gateway.type: a program is listed twice",
        ),
        (
            "fallback.yaml",
            "name: x\ntopologies: [gateway]\ngateway:\n  type: [nginx, contour]\n  fallback: envoy\n",
            "gateway.fallback: stands in for one gateway.type",
        ),
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A list of gateways with two of them not installed: `--dry-run` says so in one short line
/// naming what to install, and how to run the others now (a list takes no fallback).
#[test]
fn a_list_with_gateways_missing_says_how_to_run_the_others() {
    let empty = common::scratch_dir("no-istio-no-contour");
    let preset = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/gateway-compare.yaml"
    );
    let out = std::process::Command::new(common::bin())
        .args(["experiment", preset, "--dry-run"])
        .env("ISTIO_CACHE", &empty)
        .env("CONTOUR_CACHE", &empty)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = err.trim();
    assert_eq!(line.lines().count(), 1, "{err}");
    assert!(
        line.contains("scripts/install-istio.sh") && line.contains("scripts/install-contour.sh"),
        "{line}"
    );
    assert!(
        line.contains("or run the others (nginx, haproxy, caddy, envoy): --installed-only"),
        "{line}"
    );
    assert!(!line.contains("fallback"), "{line}");
    assert!(
        line.chars().count() <= 600,
        "{} columns: {line}",
        line.chars().count()
    );
    // Said so, the others run: the plan has their steps only, and each left out is named.
    let out = std::process::Command::new(common::bin())
        .args(["experiment", preset, "--dry-run", "--installed-only"])
        .env("ISTIO_CACHE", &empty)
        .env("CONTOUR_CACHE", &empty)
        .output()
        .unwrap();
    let (err, plan) = (stderr(&out), stdout(&out));
    assert_eq!(out.status.code(), Some(0), "{err}");
    // Each note may wrap; each starts a line of its own.
    let notes: Vec<&str> = err.split("note: gateway").skip(1).collect();
    assert_eq!(notes.len(), 2, "{err}");
    assert!(notes[0].contains("istio left out") && notes[0].contains("scripts/install-istio.sh"));
    assert!(notes[1].contains("contour left out"), "{err}");
    assert!(
        plan.starts_with("experiment 'gateway-compare': 4 steps"),
        "{plan}"
    );
    let _ = std::fs::remove_dir_all(empty);
}
