//! Issue 26: a generator under a CPU quota (a pod's CPU limit) says so. `meshbench run`,
//! started inside a cpu cgroup of 0.05 cores, drives the backend in a closed loop; its result
//! carries the quota and the throttling of the measured window, and the self-check names
//! `cpu_throttled`. Needs a writable cgroup hierarchy (root), as the lab does.

use crate::common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use meshbench_lab::cgroup::{Cgroup, Cgroups, Limits};

const LIMIT: Duration = Duration::from_secs(90);

/// Runs `meshbench run ARGS --json F` inside a new cpu cgroup of `cores` (removed afterwards,
/// also when an assertion fails) and returns its output and result.
fn run_in_group(
    name: &str,
    cores: f64,
    args: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let kind = Cgroups::detect().unwrap_or_else(|e| {
        panic!("cgroups are not writable here ({e}); run as root with /sys/fs/cgroup writable")
    });
    let group = Cgroup::create(
        &kind,
        &format!("quota-test-{name}-{}", std::process::id()),
        &Limits {
            cpus: Some(cores),
            ..Limits::default()
        },
    )
    .expect("the group is created");
    let procs = group.procs_files().expect("cgroup.procs opens");
    let path = temp_json(name);
    let _ = std::fs::remove_file(&path);
    let mut command = Command::new(bin());
    command
        .arg("run")
        .args(args)
        .arg("--json")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let fds = procs.clone();
    // SAFETY: write(2) on descriptors the parent opened is async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            for &fd in &fds {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("meshbench starts");
    for fd in procs {
        // SAFETY: the descriptors are ours, opened above and used by no one else now.
        unsafe { libc::close(fd) };
    }
    let out = wait_with_limit(&mut child, LIMIT);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no JSON written ({e}); stderr: {}", stderr(&out)));
    let _ = std::fs::remove_file(&path);
    let r: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_valid(&r);
    drop(group);
    (out, r)
}

#[test]
fn a_run_under_a_twentieth_of_a_core_reports_its_quota_and_throttling() {
    let backend = BackendProc::start(&[]);
    let url = backend.url("/");
    let (out, r) = run_in_group(
        "throttled",
        0.05,
        &["-q", &url, "-c", "4", "-d", "3s", "-t", "1"],
    );
    assert!(u(&r, "/requests/ok") > 0, "{}", stderr(&out));
    let quota = &r["generator"]["cpu_quota"];
    assert!(
        (quota["cores"].as_f64().unwrap_or(0.0) - 0.05).abs() < 1e-6,
        "{quota}"
    );
    let periods = u(&r, "/generator/cpu_quota/periods");
    let throttled = u(&r, "/generator/cpu_quota/throttled_periods");
    assert!(throttled > 0 && throttled <= periods, "{quota}");
    assert!(
        f(&r, "/generator/cpu_quota/throttled_secs") > 0.0,
        "{quota}"
    );
    let check = &r["generator"]["check"];
    assert_eq!(check["valid"], false, "{check}");
    let finding = check["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cause"] == "cpu_throttled")
        .unwrap_or_else(|| panic!("cpu_throttled among the findings: {check}"));
    let said = finding["message"].as_str().unwrap();
    assert!(
        said.contains("0.05 cores") && said.contains("raise the pod's CPU limit"),
        "{said}"
    );
    assert_eq!(r["generator"]["saturated"], true);
}

/// Under a quota `auto` does not spin before its sends, even for a budget tighter than the
/// clock (it would spend the quota the sends need); `hybrid`, asked for explicitly, still does.
/// Both run open loop at 1,000 req/s under half a core, which neither uses up.
#[test]
fn under_a_quota_auto_sleeps_where_hybrid_spins() {
    let backend = BackendProc::start(&[]);
    let url = backend.url("/");
    let spun = |idle: &str| {
        let args = [
            "-q",
            &url,
            "-r",
            "1000",
            "-d",
            "2s",
            "-c",
            "8",
            "-t",
            "1",
            "--pacing-slack",
            "0us",
            "--idle-strategy",
            idle,
        ];
        let (out, r) = run_in_group(idle, 0.5, &args);
        assert!(out.status.success(), "{idle}: {}", stderr(&out));
        assert!(u(&r, "/requests/ok") >= 1_900, "{idle}: {}", r["requests"]);
        assert!(
            !r["generator"]["cpu_quota"].is_null(),
            "{idle}: the quota is seen"
        );
        f(&r, "/generator/spin_secs")
    };
    assert_eq!(spun("auto"), 0.0, "auto under a quota");
    let hybrid = spun("hybrid");
    assert!(
        hybrid > 0.0,
        "hybrid spins what the clock is late by: {hybrid} s"
    );
}

/// The result says whether this process's group has a quota, as the kernel does: a child
/// started here runs in the test's own group.
#[test]
fn the_result_says_the_quota_the_process_runs_under() {
    let backend = BackendProc::start(&[]);
    let (out, r) = run_json(
        "own-quota",
        &[&backend.url("/"), "-n", "200", "-c", "2"],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let own = meshbench_net::cpu_quota::CpuQuota::of_self();
    let reported = &r["generator"]["cpu_quota"];
    match own {
        None => assert!(reported.is_null(), "{}", r["generator"]),
        Some(q) => assert!((reported["cores"].as_f64().unwrap() - q.cores).abs() < 1e-6),
    }
    let check = &r["generator"]["check"]["findings"];
    assert!(!check.to_string().contains("cpu_throttled"), "{check}");
}
