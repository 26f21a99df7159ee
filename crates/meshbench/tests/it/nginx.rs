//! Black-box tests against a real nginx (Debian package, started by the test): as a fixed-body
//! server, as a reverse proxy in front of the backend, and the demo end to end.

use crate::common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn closed_and_open_loop_against_a_real_nginx() {
    let nginx = nginx_static(1024).expect("nginx starts (scripts/install-deps.sh installs it)");
    let url = format!("http://{}/", nginx.addr);
    let (out, r) = run_json("nginx-closed", &[&url, "-n", "5000", "-c", "16"], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/requests/ok"), 5000, "{}", r["errors"]);
    assert!(u(&r, "/bytes/received") >= 5000 * 1024);
    let (_, r) = run_json(
        "nginx-open",
        &[&url, "-r", "1000", "-d", "2s", "-c", "8"],
        LIMIT,
    );
    let total = u(&r, "/requests/ok") as f64;
    assert!((total - 2000.0).abs() <= 10.0, "{total}");
    // A path nginx does not have still answers; a HEAD request has no body to wait for.
    let (_, r) = run_json("nginx-head", &[&url, "-n", "100", "-m", "HEAD"], LIMIT);
    assert_eq!(u(&r, "/requests/ok"), 100, "{}", r["errors"]);
}

#[test]
fn through_nginx_to_the_backend() {
    let backend = BackendProc::start(&["--status", "503:10%"]);
    let nginx = nginx_proxy(backend.addr).expect("nginx starts");
    let url = format!("http://{}/?size=2048", nginx.addr);
    let (out, r) = run_json("nginx-proxy", &[&url, "-n", "4000", "-c", "8"], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let s503 = u(&r, "/status_codes/503");
    assert!(
        (200..=600).contains(&s503),
        "the backend's 503s pass through nginx: {s503}"
    );
    assert_eq!(u(&r, "/status_codes/200") + s503, 4000);
    assert!(
        u(&r, "/bytes/received") >= 3600 * 2048,
        "per-request size passes through"
    );
}

#[test]
fn nginx_stopping_mid_run_is_counted_not_fatal() {
    let nginx = nginx_static(100).expect("nginx starts");
    let url = format!("http://{}/", nginx.addr);
    let path = temp_json("nginx-stop");
    let mut child = spawn_meshbench(&[
        "run",
        "-q",
        &url,
        "-d",
        "3s",
        "-c",
        "4",
        "--timeout",
        "1s",
        "--json",
        path.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(1000));
    drop(nginx);
    let out = wait_with_limit(&mut child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_valid(&r);
    assert!(u(&r, "/requests/ok") > 100);
    let failed = u(&r, "/errors/connect") + u(&r, "/errors/reset");
    assert!(
        failed > 0,
        "requests after nginx stopped fail as connect/reset: {}",
        r["errors"]
    );
    let _ = std::fs::remove_file(&path);
}

/// The demo measures Envoy sidecars (installed by scripts/install-envoy.sh).
#[test]
fn the_demo_runs_end_to_end() {
    demo_measures("envoy", None);
}

/// Must hold (issue 23): without Envoy the demo still runs, measuring nginx in its place, and
/// says so in one line (`MESHBENCH_ENVOY` naming no file stands for a machine without Envoy).
#[test]
fn the_demo_measures_nginx_in_envoys_place_without_envoy() {
    demo_measures("nginx", Some("/nonexistent/envoy"));
}

/// Must hold (issue 24): the command the demo's last line prints, and every other `results
/// show` it prints, opens the store the demo wrote: run as printed, with no default store to
/// fall back on, it shows the demo's experiment.
#[test]
fn the_demos_printed_command_opens_the_store_it_wrote() {
    let dir = std::env::temp_dir().join(format!("meshbench-demo-show-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The default store lives under XDG_DATA_HOME: an empty directory here.
    let data_home = dir.join("data-home");
    std::fs::create_dir_all(&data_home).unwrap();
    let out_dir = dir.join("out");
    let mut cmd = std::process::Command::new(bin());
    cmd.args([
        "demo",
        "--set",
        "duration_secs=1",
        "--set",
        "load.rate_rps=[300]",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ])
    .env("MESHBENCH_ENVOY", "/nonexistent/envoy")
    .env("XDG_DATA_HOME", &data_home)
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let out = wait_with_limit(&mut cmd.spawn().unwrap(), Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = |text: &str| -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter(|c| c.starts_with("meshbench results show"))
            .map(String::from)
            .collect()
    };
    let text = stdout(&out);
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(
        printed(last).len(),
        1,
        "the last line says how to see it: {last}"
    );
    let commands = [printed(&text), printed(&stderr(&out))].concat();
    for command in commands {
        // The demo's paths need no quoting: the words are as a shell splits them.
        assert!(!command.contains(['\'', '"']), "{command}");
        let words: Vec<&str> = command.split_whitespace().collect();
        let shown = std::process::Command::new(bin())
            .args(&words[1..])
            .env("XDG_DATA_HOME", &data_home)
            .output()
            .unwrap();
        assert!(
            shown.status.success(),
            "`{command}` as printed: {}",
            stderr(&shown)
        );
        assert!(
            stdout(&shown).starts_with("experiment 1 'sidecar-overhead-demo'"),
            "`{command}` shows the demo's experiment: {}",
            stdout(&shown)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn demo_measures(program: &str, envoy: Option<&str>) {
    // The embedded sidecar-overhead experiment, shortened further: one rate, 1 s steps.
    let dir = std::env::temp_dir().join(format!(
        "meshbench-demo-test-{}-{program}",
        std::process::id()
    ));
    let mut cmd = std::process::Command::new(bin());
    cmd.args([
        "demo",
        "--set",
        "duration_secs=1",
        "--set",
        "load.rate_rps=[300]",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
        "--store",
        dir.join("results.db").to_str().unwrap(),
    ]);
    if let Some(path) = envoy {
        cmd.env("MESHBENCH_ENVOY", path);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = wait_with_limit(&mut cmd.spawn().unwrap(), Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let notes: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.starts_with("note:"))
        .map(String::from)
        .collect();
    match envoy {
        Some(_) => assert!(
            notes.len() == 1 && notes[0].contains("measures nginx in its place"),
            "one line says what is measured instead: {notes:?}"
        ),
        None => assert!(notes.is_empty(), "{notes:?}"),
    }
    let text = stdout(&out);
    // The same headline as `meshbench experiment`: what the sidecars add, with intervals,
    // and what each costs.
    // Each difference says what the test made of it; with 1 s steps, one second a side is
    // too short to tell, never a bare (perhaps negative) cost.
    let added: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Latency added over the baseline"))
        .skip(2)
        .take_while(|l| l.starts_with("  ") && !l.contains("slower/faster:"))
        .collect();
    assert_eq!(added.len(), 2, "serveronly and both:\n{text}");
    for row in added {
        assert_eq!(row.matches(" short").count(), 4, "{row}");
        // Tested over one-second intervals ("1 s"), not over repeats ("runs").
        assert!(row.trim_end().ends_with(" s"), "{row}");
    }
    // meshbench's own text fits 120 columns; the store's path is the user's (here the test's
    // scratch directory, as long as its TMPDIR makes it), so it counts as one word.
    let own = text.replace(dir.to_str().unwrap(), "DIR");
    let wide: Vec<&str> = own.lines().filter(|l| l.chars().count() > 120).collect();
    assert!(wide.is_empty(), "lines wider than 120 columns: {wide:?}");
    for needle in [
        "Latency added over the baseline",
        "serveronly",
        "both",
        &format!("client_proxy ({program})"),
        "What each proxy costs",
        "vCPU/1k RPS",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    let csv = std::fs::read_to_string(dir.join("sidecar-overhead.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three steps: {csv}");
    assert!(lines[1].contains("sidecar-overhead-demo_qps_300_c_16_1024_default_no_istio"));
    assert!(lines[3].contains("_both,"));
    let _ = std::fs::remove_dir_all(&dir);
}
