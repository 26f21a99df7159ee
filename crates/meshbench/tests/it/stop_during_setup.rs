//! Issue 47: Ctrl-C is answered while a step is still being set up, not only once its load
//! runs. Each test runs `meshbench experiment` with the real programs (etcd, kube-apiserver,
//! istiod, pilot-agent, Envoy), as the leader of its own process group, and sends SIGINT to the
//! whole group as a terminal does, at a moment found in the run itself:
//!
//! - Istio's sidecars waiting for istiod: once the run's first pilot-agent exists, istiod is
//!   held (SIGSTOP, as a stalled istiod would be) so that the sidecar cannot be configured
//!   before the signal lands; then SIGINT.
//! - A control-plane step while its simulated proxies connect: on the line saying the real
//!   Envoy accepted its configuration (400 proxies then take 20 s to connect); then SIGINT.
//! - A Contour gateway's step while Contour builds its first configuration: once the run's
//!   `contour` exists it is held (SIGSTOP), so that it never serves xDS; then SIGINT.
//!
//! Each run must exit 130 within 10 s of the signal, say so in one line, leave no process it
//! started (every descendant seen before the signal is gone), no network namespace, cgroup or
//! directory, and keep the experiment in the store with its step stopped before its load.

use crate::common;
use crate::lab::leftovers;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use meshbench_lab::istio::{self, sidecars};

/// How long a run may take to answer the signal, teardown included.
const ANSWERED_WITHIN: Duration = Duration::from_secs(10);
/// How long a run may take to reach the moment the signal is sent.
const SETUP_WITHIN: Duration = Duration::from_secs(240);

fn installed() {
    if let Some(e) = istio::unavailable() {
        panic!("{e}");
    }
    if let Some(what) = sidecars::iptables_missing() {
        panic!("Istio's capture needs {what}");
    }
}

/// A process as /proc shows it: its id, its start time (so that a reused id is not taken for
/// it) and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: u32,
    started: u64,
    comm: String,
}

/// `/proc/PID/stat`'s parent, state and start time.
fn stat(pid: u32) -> Option<(u32, char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is the first.
    let rest: Vec<&str> = text[text.rfind(')')? + 2..].split_whitespace().collect();
    let state = rest.first()?.chars().next()?;
    Some((
        rest.get(1)?.parse().ok()?,
        state,
        rest.get(19)?.parse().ok()?,
    ))
}

/// Every live descendant of `root`.
fn descendants(root: u32) -> Vec<Proc> {
    let all: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (parent, state, started) = stat(pid)?;
            (state != 'Z').then_some((pid, parent, started))
        })
        .collect();
    let mut found: Vec<Proc> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for &(pid, _, started) in all.iter().filter(|(_, p, _)| *p == parent) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            found.push(Proc {
                pid,
                started,
                comm: comm.trim().to_string(),
            });
            parents.push(pid);
        }
    }
    found
}

/// Whether `p` still runs (the same process, not a zombie).
fn alive(p: &Proc) -> bool {
    stat(p.pid).is_some_and(|(_, state, started)| state != 'Z' && started == p.started)
}

/// Asserts that each of `names` (the backend is `meshbench`) is among `started`.
fn runs(started: &[Proc], names: &[&str]) {
    for name in names {
        assert!(
            started.iter().any(|p| p.comm == *name),
            "no {name} among {started:?}"
        );
    }
}

/// A run of the binary in its own process group, its output read as it comes.
struct Run {
    child: Child,
    err: Arc<Mutex<Vec<String>>>,
    out: std::thread::JoinHandle<String>,
    err_reader: std::thread::JoinHandle<()>,
}

impl Run {
    fn start(args: &[&str]) -> Run {
        let mut child = Command::new(bin())
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn meshbench");
        let mut stdout = child.stdout.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let err = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&err);
        let err_reader = std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Run {
            child,
            err,
            out,
            err_reader,
        }
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().join("\n")
    }

    /// SIGINT to the whole group, as a terminal sends Ctrl-C.
    fn interrupt(&self) {
        // SAFETY: killpg(2) on the group our own child leads.
        let rc = unsafe { libc::killpg(self.child.id() as i32, libc::SIGINT) };
        assert_eq!(rc, 0, "killpg: {}", std::io::Error::last_os_error());
    }

    /// Waits for the exit, at most `limit` (then kills the group); its code, stdout, stderr.
    fn wait(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                // SAFETY: as above; the run did not answer in time.
                unsafe { libc::killpg(self.child.id() as i32, libc::SIGKILL) };
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.err_reader.join().unwrap();
        let out = self.out.join().unwrap();
        let err = self.err.lock().unwrap().join("\n");
        (status.code(), out, err)
    }
}

/// What every stopped run must show: exit 130 within [`ANSWERED_WITHIN`] of the signal (sent
/// at `sent`), one line saying the step was stopped, none of `started` left running, nothing
/// of the run left, and the store holding the experiment, interrupted, its step stopped.
/// Returns the time from the signal to the exit, and the run's stderr.
fn answered(run: Run, sent: Instant, started: &[Proc], store: &str) -> (Duration, String) {
    let pid = run.child.id();
    let (code, out, err) = run.wait(Duration::from_secs(60));
    let took = sent.elapsed();
    let what = format!("stdout:\n{out}\nstderr:\n{err}");
    eprintln!("from SIGINT to exit: {took:?}");
    assert_eq!(code, Some(130), "{what}");
    assert!(
        took < ANSWERED_WITHIN,
        "exited {took:?} after SIGINT; {what}"
    );
    let said: Vec<&str> = err.lines().filter(|l| l.contains("stopped")).collect();
    assert!(
        said.len() == 1
            && said[0].starts_with("step 1/1 (")
            && said[0].ends_with(") stopped before its load: nothing measured"),
        "one line says the step was stopped; {what}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("Error"),
        "{what}"
    );
    assert!(err.contains(" interrupted in "), "{what}");
    let left: Vec<&Proc> = started.iter().filter(|p| alive(p)).collect();
    assert!(left.is_empty(), "still running: {left:?}");
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
    let doc = export_json(std::path::Path::new(store));
    assert_eq!(doc["experiment"]["status"], "interrupted", "{doc}");
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{doc}");
    assert_eq!(steps[0]["status"], "failed", "{}", steps[0]);
    assert_eq!(
        steps[0]["error"], "stopped before its load began",
        "{}",
        steps[0]
    );
    (took, err)
}

const SIDECARS: &str = "name: stop-sidecars
topologies: [both]
isolation: netns
duration_secs: 60
warmup_secs: 0
cooldown_secs: 0
load:
  rate_rps: [100]
  connections: [2]
proxy:
  type: istio
";

#[test]
fn ctrl_c_while_the_sidecars_wait_for_istiod_exits_130_within_10_s_and_leaves_nothing() {
    installed();
    let began = Instant::now();
    let dir = scratch_dir("stop-sidecars");
    let file = dir.join("sidecars.yaml");
    std::fs::write(&file, SIDECARS).unwrap();
    let store = dir.join("results.db").display().to_string();
    let run = Run::start(&["experiment", &file.display().to_string(), "--store", &store]);
    let pid = run.child.id();
    // The first sidecar's agent is up; istiod held, it cannot be configured.
    let istiod = loop {
        let now = descendants(pid);
        let agent = now.iter().any(|p| p.comm == "pilot-agent");
        let istiod = now.iter().find(|p| p.comm == "pilot-discovery");
        if let (true, Some(istiod)) = (agent, istiod) {
            break istiod.clone();
        }
        assert!(
            began.elapsed() < SETUP_WITHIN,
            "no sidecar's agent: {}",
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: stopping a process of our child's run, which the run's teardown kills.
    unsafe { libc::kill(istiod.pid as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(300));
    let started = descendants(pid);
    runs(
        &started,
        &[
            "meshbench",
            "etcd",
            "kube-apiserver",
            "pilot-discovery",
            "pilot-agent",
        ],
    );
    let sent = Instant::now();
    run.interrupt();
    let (took, _) = answered(run, sent, &started, &store);
    eprintln!(
        "the test took {:?}; SIGINT to exit {took:?}",
        began.elapsed()
    );
    let _ = std::fs::remove_dir_all(dir);
}

const CONNECTS: &str = "name: stop-connects
topologies: [control_plane]
duration_secs: 10
warmup_secs: 0
cooldown_secs: 0
control_plane:
  proxies: [400]
  services: [8]
  istio_objects: [4]
  endpoint_churn_per_s: [1]
  config_churn_per_s: [1]
  settle_secs: 10
";

#[test]
fn ctrl_c_while_simulated_proxies_connect_exits_130_within_10_s_and_stops_istiod() {
    installed();
    let began = Instant::now();
    let dir = scratch_dir("stop-connects");
    let file = dir.join("connects.yaml");
    std::fs::write(&file, CONNECTS).unwrap();
    let store = dir.join("results.db").display().to_string();
    let run = Run::start(&["experiment", &file.display().to_string(), "--store", &store]);
    let pid = run.child.id();
    // The real Envoy holds its configuration: the proxies' connects begin (20 s of them).
    while !run
        .stderr()
        .contains("the real Envoy accepted its configuration")
    {
        assert!(
            began.elapsed() < SETUP_WITHIN,
            "the real Envoy: {}",
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = descendants(pid);
    runs(
        &started,
        &[
            "etcd",
            "kube-apiserver",
            "pilot-discovery",
            "pilot-agent",
            "envoy",
        ],
    );
    let sent = Instant::now();
    run.interrupt();
    let (took, err) = answered(run, sent, &started, &store);
    assert!(
        !err.contains("simulated proxies held a full configuration"),
        "the signal came while they connected: {err}"
    );
    eprintln!(
        "the test took {:?}; SIGINT to exit {took:?}",
        began.elapsed()
    );
    let _ = std::fs::remove_dir_all(dir);
}

const CONTOUR: &str = "name: stop-contour
topologies: [gateway]
duration_secs: 60
warmup_secs: 0
cooldown_secs: 0
load:
  rate_rps: [100]
  connections: [2]
gateway:
  type: contour
  domains: 10
  paths: 10
";

#[test]
fn ctrl_c_while_contour_builds_its_first_configuration_exits_130_within_10_s_and_leaves_nothing() {
    if let Some(e) = meshbench_lab::contour::unavailable() {
        panic!("{e}");
    }
    let began = Instant::now();
    let dir = scratch_dir("stop-contour");
    let file = dir.join("contour.yaml");
    std::fs::write(&file, CONTOUR).unwrap();
    let store = dir.join("results.db").display().to_string();
    let run = Run::start(&["experiment", &file.display().to_string(), "--store", &store]);
    let pid = run.child.id();
    // Contour serves (not `contour version`, which the run asks first); held, it never builds
    // its first configuration nor serves xDS.
    let serves = |p: &Proc| {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
        p.comm == "contour" && cmdline.split(|b| *b == 0).any(|arg| arg == b"serve")
    };
    let contour = loop {
        if let Some(c) = descendants(pid).into_iter().find(serves) {
            break c;
        }
        assert!(
            began.elapsed() < SETUP_WITHIN,
            "no contour: {}",
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // SAFETY: stopping a process of our child's run, which the run's teardown kills.
    unsafe { libc::kill(contour.pid as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(300));
    let started = descendants(pid);
    runs(
        &started,
        &["meshbench", "etcd", "kube-apiserver", "contour"],
    );
    let sent = Instant::now();
    run.interrupt();
    let (took, _) = answered(run, sent, &started, &store);
    eprintln!(
        "the test took {:?}; SIGINT to exit {took:?}",
        began.elapsed()
    );
    let _ = std::fs::remove_dir_all(dir);
}
