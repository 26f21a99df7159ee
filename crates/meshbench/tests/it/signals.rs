//! Ctrl-C the way it arrives in the field: to the whole process group (a terminal, `timeout -s
//! INT`, CI runners), often twice within microseconds. Every time, in a loop, the run must stop
//! promptly and leave its partial JSON, its summary and its store row; a second signal sent
//! later must cut the drain short and still leave them.

use crate::common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// Starts meshbench as the leader of a process group of its own, as a shell job would be.
fn spawn_in_own_group(args: &[&str]) -> Child {
    Command::new(bin())
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn meshbench")
}

/// Sends `signal` to the whole group `burst` times back to back (the echoes a terminal or a
/// wrapper adds to the one the user meant).
fn signal_group(leader: &Child, signal: i32, burst: usize) {
    for _ in 0..burst {
        // SAFETY: killpg(2) on the group our own child leads.
        let rc = unsafe { libc::killpg(leader.id() as i32, signal) };
        assert_eq!(rc, 0, "killpg: {}", std::io::Error::last_os_error());
    }
}

fn exit_code_of(signal: i32) -> i32 {
    128 + signal
}

#[test]
fn group_signals_in_a_loop_always_leave_the_partial_result() {
    let backend = BackendProc::start(&[]);
    let url = backend.url("/");
    for round in 0..8 {
        let signal = if round % 2 == 0 {
            libc::SIGINT
        } else {
            libc::SIGTERM
        };
        let path = temp_json(&format!("group-signal-{round}"));
        let _ = std::fs::remove_file(&path);
        let mut child = spawn_in_own_group(&[
            "run",
            "-q",
            &url,
            "-r",
            "400",
            "-d",
            "60s",
            "--json",
            path.to_str().unwrap(),
        ]);
        std::thread::sleep(Duration::from_millis(900 + 100 * round));
        let sent = Instant::now();
        signal_group(&child, signal, 1 + round as usize % 4);
        let out = wait_with_limit(&mut child, LIMIT);
        let took = sent.elapsed();
        let what = format!("round {round} (signal {signal}): {}", stderr(&out));
        assert_eq!(out.status.code(), Some(exit_code_of(signal)), "{what}");
        assert!(took < Duration::from_secs(4), "stopped in {took:?}; {what}");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("no JSON: {e}; {what}"));
        let r: serde_json::Value = serde_json::from_str(&text).expect("the JSON is whole");
        assert_valid(&r);
        assert_eq!(r["partial"], true, "{what}");
        assert!(u(&r, "/requests/ok") > 100, "{what}");
        assert!(stdout(&out).contains("PARTIAL"), "summary printed; {what}");
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn a_second_signal_later_cuts_the_drain_short() {
    // A target that never answers: after the first signal the run would wait for its requests
    // in flight until the drain ends (2 s); the second one, sent later, ends the wait.
    let silent = BadServer::start(Misbehaviour::Silent);
    let path = temp_json("second-signal");
    let _ = std::fs::remove_file(&path);
    let mut child = spawn_in_own_group(&[
        "run",
        "-q",
        &silent.url(),
        "-c",
        "4",
        "-r",
        "100",
        "-d",
        "60s",
        "--timeout",
        "30s",
        "--json",
        path.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(800));
    signal_group(&child, libc::SIGINT, 2);
    // Well past the burst window, well before the drain would end.
    std::thread::sleep(Duration::from_millis(700));
    let second = Instant::now();
    signal_group(&child, libc::SIGINT, 2);
    let out = wait_with_limit(&mut child, LIMIT);
    assert!(
        second.elapsed() < Duration::from_millis(800),
        "the second signal ended the drain: exit {:?} after {:?}",
        out.status.code(),
        second.elapsed()
    );
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("partial JSON")).unwrap();
    assert_valid(&r);
    assert_eq!(r["partial"], true);
    assert!(
        u(&r, "/requests/unfinished") >= 1,
        "requests in flight are unfinished"
    );
    assert!(stdout(&out).contains("PARTIAL"), "{}", stdout(&out));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn group_signals_mid_experiment_keep_the_step_and_the_summary() {
    let dir = std::env::temp_dir().join(format!("meshbench-signals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("long.yaml");
    std::fs::write(
        &file,
        "name: signals\ntopologies: [baseline]\nduration_secs: 60\nwarmup_secs: 0\ncooldown_secs: 0\nload:\n  rate_rps: [200]\n  connections: [2]\n",
    )
    .unwrap();
    for (round, signal) in [libc::SIGINT, libc::SIGTERM, libc::SIGINT]
        .into_iter()
        .enumerate()
    {
        let store = dir.join(format!("results-{round}.db"));
        let store = store.to_str().unwrap();
        let mut child = spawn_in_own_group(&[
            "experiment",
            file.to_str().unwrap(),
            "--store",
            store,
            "--quiet",
        ]);
        // The backend starts within a second; then the step measures.
        std::thread::sleep(Duration::from_millis(2500));
        signal_group(&child, signal, 3);
        let out = wait_with_limit(&mut child, LIMIT);
        let what = format!("round {round}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(exit_code_of(signal)), "{what}");
        assert!(
            stdout(&out).contains("PARTIAL (interrupted)"),
            "step table printed; {what}"
        );
        let export = meshbench(
            &[
                "results", "export", "latest", "--format", "json", "--store", store,
            ],
            LIMIT,
        );
        assert!(export.status.success(), "{}", stderr(&export));
        let doc: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
        assert_eq!(doc["experiment"]["status"], "interrupted", "{what}");
        let steps = doc["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 1, "{what}");
        assert_eq!(steps[0]["status"], "partial", "{what}");
        assert!(
            steps[0]["summary"]["requests"].as_u64().unwrap() > 100,
            "{what}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
