//! The live page (`--web`) in a real browser: `meshbench experiment` and `meshbench run` serve
//! it while they load the built-in backend, and tests/browser/live-page.mjs opens it in
//! headless Chromium (Debian's, driven by playwright-core) and checks that it fills in with
//! no console or page error, that the numbers it shows are the stream's (/api/board, fetched
//! at the same moment), that it says when the run ended, and, for an experiment, that it links
//! the HTML report and /report serves it. The page stays up after the run for
//! `--web-linger`, which Ctrl-C ends without changing the exit code. Screenshots go to
//! TARGET/test-artifacts/web-*.png (printed). Needs Node.js and the pinned npm packages
//! (scripts/install-web-test.sh); without them the tests fail and say so.

use crate::browser;
use crate::common;

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::Duration;

use common::*;

/// A meshbench process killed if the test ends before it does.
struct Running(Option<Child>);

impl Running {
    /// Ctrl-C, then its output.
    fn interrupt(mut self) -> Output {
        let mut child = self.0.take().unwrap();
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        wait_with_limit(&mut child, Duration::from_secs(30))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs tests/browser/live-page.mjs on `url`; returns its JSON line, or panics with its output.
fn check_page(url: &str, shot: &Path, extra: &[&str]) -> serde_json::Value {
    browser::require("playwright-core");
    let chromium = browser::chromium();
    let out = Command::new("node")
        .arg(browser::dir().join("live-page.mjs"))
        .arg(url)
        .arg(shot)
        .args(extra)
        .args(["--timeout-ms", "120000"])
        .env("MESHBENCH_CHROMIUM", chromium)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "the live page failed its checks:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("screenshot: {}", shot.display());
    serde_json::from_str(stdout.trim().lines().last().unwrap_or("")).expect("the check's JSON")
}

fn samples(seen: &serde_json::Value) -> &Vec<serde_json::Value> {
    seen["samples"].as_array().unwrap()
}

#[test]
fn an_experiments_page_shows_the_stream_and_links_the_report() {
    let dir = std::env::temp_dir().join(format!("meshbench-webtest-{}-exp", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("web.yaml");
    std::fs::write(
        &file,
        "name: webpage\ntopologies: [baseline]\nduration_secs: 4\nwarmup_secs: 0.5\n\
         cooldown_secs: 0\nsample_interval_ms: 200\nload:\n  rate_rps: [200, 400]\n  \
         connections: [2]\n",
    )
    .unwrap();
    let store = dir.join("results.db");
    let addr = free_addr();
    let url = format!("http://{addr}/");
    let run = Running(Some(spawn_meshbench(&[
        "experiment",
        file.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
        "--quiet",
        "--web",
        &addr.to_string(),
        "--web-linger",
        "2m",
    ])));
    let shot = browser::artifacts().join("web-experiment.png");
    let seen = check_page(&url, &shot, &["--expect-report"]);
    let out = run.interrupt();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "Ctrl-C in the linger: {err}");
    assert!(err.contains(&format!("live view: {url}")), "{err}");
    assert!(err.contains("stays up for 2m00s"), "{err}");

    // The report is where the docs say, and is what /report served.
    let report = dir.join("results-reports/1/report.html");
    assert!(
        err.contains(&format!("report: {}", report.display())),
        "{err}"
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert_eq!(
        seen["end"]["reportBytes"].as_u64(),
        Some(html.len() as u64),
        "/report served another file"
    );
    assert_eq!(seen["end"]["outcome"], "done");

    // The page saw the experiment's steps and rates.
    let s = samples(&seen);
    assert!(!s.is_empty());
    let last = s.last().unwrap();
    assert_eq!(last["label"], "ended");
    assert!(
        last["step"]
            .as_str()
            .unwrap()
            .starts_with("step 2/2 · baseline · 400 rps"),
        "{last}"
    );
    // An open loop at 400 rps: about 400 a second (less on a machine too busy to keep up).
    let rps = last["rps"].as_u64().unwrap();
    assert!((100..=440).contains(&rps), "the last second's rate: {rps}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_runs_page_shows_the_stream_and_the_end() {
    let backend = BackendProc::start(&[]);
    let addr = free_addr();
    let url = format!("http://{addr}/");
    let run = Running(Some(spawn_meshbench(&[
        "run",
        &backend.url("/"),
        "-q",
        "--rate",
        "300",
        "-c",
        "4",
        // Long enough that the page is compared with the stream while the run goes, even
        // when Chromium is slow to start (over 10 s on a CI runner building beside it).
        "--duration",
        "30s",
        "--web",
        &addr.to_string(),
        "--web-linger",
        "2m",
    ])));
    let shot = browser::artifacts().join("web-run.png");
    let seen = check_page(&url, &shot, &[]);
    let out = run.interrupt();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("requests"),
        "the summary is printed before the linger"
    );
    assert_eq!(seen["end"]["outcome"], "done");
    assert!(seen["end"]["link"].is_null(), "a run has no report");
    let s = samples(&seen);
    assert!(
        s.iter().any(|x| x["label"] == "running-1"),
        "the page was compared with the stream while the run went: {seen}"
    );
    for x in s {
        assert_eq!(x["step"], "step 1/1 · url · 300 rps x 4 conns");
    }
}

#[test]
fn without_linger_the_page_goes_with_the_run() {
    let backend = BackendProc::start(&[]);
    let addr = free_addr();
    let out = meshbench(
        &[
            "run",
            &backend.url("/"),
            "-q",
            "--duration",
            "1s",
            "--web",
            &addr.to_string(),
        ],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("stays up"), "{}", stderr(&out));
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn bad_web_flags_are_one_line_and_exit_2() {
    let cases: [(&[&str], &str); 3] = [
        (&["--web-linger", "5s"], "--web"),
        (
            &["--web", "127.0.0.1:0", "--web-linger", "soon"],
            "--web-linger",
        ),
        (&["--web", "nowhere"], "--web"),
    ];
    for (flags, names) in cases {
        let mut args = vec!["run", "http://127.0.0.1:9/", "--duration", "1s"];
        args.extend_from_slice(flags);
        let out = meshbench(&args, Duration::from_secs(30));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{flags:?}: {err}");
        assert!(err.contains(names), "{flags:?}: {err}");
    }
}
