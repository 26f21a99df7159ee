//! `meshbench k8s coordinator`: the process a detached run's Job runs, in its pod.
//!
//! It runs the experiment as a child process, `meshbench experiment` with the file and the
//! `--set`s from its ConfigMap (a process of its own, as the run's watcher is: a crash of the
//! run leaves this one to say so, serve what was stored and let the watcher put the cluster
//! back), and tees the child's output into the pod's log and a buffer the workstation reads.
//! It answers the workstation on its loopback ([`super::control`]) until the results are
//! fetched, or kept for their time, and then deletes its own namespace, which takes its
//! bindings with it.
//!
//! It is the container's first process: SIGTERM (the pod deleted, `k8s stop` too late) is
//! passed on to the run as SIGINT, so the run stops and puts back as on a Ctrl-C, within the
//! pod's grace period. A container restarted in place (the process killed) finds its volume as
//! it was: the run's journal is put back, the run is not started again, and what it stored is
//! kept for fetch.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use meshbench_k8s::detached::{CONFIG_DIR, DATA_DIR, FILE_KEY, SETS_KEY};
use meshbench_k8s::BlockingClient;
use meshbench_runner::place::cluster as cluster_run;

use super::control::{self, Request, RunState, Status, CONTROL_PORT};
use crate::cli::K8sCoordinatorArgs;
use crate::cmd::common::journal::restore_ended;
use crate::cmd::common::signals::{Signals, BURST};
use crate::exit;

/// Where the pod's own namespace is written (the projected volume's downward API item).
const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// After the namespace's deletion was asked for, how long to wait for the pod's end before
/// ending anyway.
const END_WITHIN: Duration = Duration::from_secs(120);

/// What the run and the workstation share.
#[derive(Debug)]
struct Shared {
    lines: Vec<String>,
    state: RunState,
    exit_code: Option<u8>,
    stop_asked: bool,
    /// The workstation has the results.
    fetched: bool,
}

type Board = Arc<Mutex<Shared>>;

fn board(b: &Board) -> std::sync::MutexGuard<'_, Shared> {
    b.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A line into the pod's log and the buffer.
fn say(b: &Board, line: String) {
    outln!("{line}");
    board(b).lines.push(line);
}

pub fn coordinator(args: K8sCoordinatorArgs) -> Result<u8> {
    let data = PathBuf::from(DATA_DIR);
    let store = data.join("results.db");
    let shared: Board = Arc::new(Mutex::new(Shared {
        lines: Vec::new(),
        state: RunState::Running,
        exit_code: None,
        stop_asked: false,
        fetched: false,
    }));
    let listener = TcpListener::bind(("127.0.0.1", CONTROL_PORT))
        .with_context(|| format!("listening on 127.0.0.1:{CONTROL_PORT}"))?;
    let signals = Signals::install()?;
    let marker = data.join("started");
    let mut child = if marker.exists() {
        // This container was restarted in place: the run it started is gone with it.
        say(
            &shared,
            "meshbench: the coordinator restarted (its container ended); the run is not started again: putting back what it changed, keeping what it stored".into(),
        );
        restore_ended(&cluster_run::journal_dir(&store));
        let mut b = board(&shared);
        b.state = RunState::Ended;
        b.exit_code = Some(exit::FAILED);
        None
    } else {
        std::fs::write(&marker, b"").context("the coordinator's volume")?;
        Some(start_run(&store, &shared)?)
    };
    let child_pid = child.as_ref().map(|c| c.id() as i32);
    {
        let shared = shared.clone();
        let store = store.clone();
        std::thread::spawn(move || serve(listener, &shared, &store, child_pid));
    }
    // The run: a signal to this process is passed on (each one that counts, so a second one
    // hurries it as it would a run in a terminal).
    let mut passed_on = 0;
    let mut last_passed = Instant::now();
    if let Some(run) = child.as_mut() {
        let status = loop {
            if let Some(status) = run.try_wait()? {
                break status;
            }
            let wanted =
                usize::from(signals.stop.requested()) + usize::from(signals.stop.hurried());
            if wanted > passed_on && last_passed.elapsed() >= BURST {
                interrupt(run.id() as i32);
                passed_on += 1;
                last_passed = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let code = status
            .code()
            .map_or(exit::FAILED, |c| u8::try_from(c).unwrap_or(exit::FAILED));
        say(
            &shared,
            format!("meshbench: the run ended (exit {code}); its results wait for `meshbench k8s fetch`"),
        );
        let mut b = board(&shared);
        b.state = RunState::Ended;
        b.exit_code = Some(code);
    }
    // Kept until fetched, for its time, or until the pod is ended.
    let kept_until = Instant::now() + Duration::from_secs(args.keep_secs);
    while !board(&shared).fetched && Instant::now() < kept_until && !signals.stop.requested() {
        reap_orphans();
        std::thread::sleep(Duration::from_millis(500));
    }
    if signals.stop.requested() {
        return Ok(exit::OK);
    }
    let why = match board(&shared).fetched {
        true => "the results were fetched",
        false => "the results were kept for their time and not fetched",
    };
    say(
        &shared,
        format!("meshbench: {why}; deleting this namespace"),
    );
    delete_own_namespace();
    let ended = Instant::now();
    while !signals.stop.requested() && ended.elapsed() < END_WITHIN {
        reap_orphans();
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(exit::OK)
}

/// Starts `meshbench experiment` on the ConfigMap's file and `--set`s, in-cluster (the file's
/// kubeconfig set aside), its output teed.
fn start_run(store: &Path, shared: &Board) -> Result<Child> {
    let config = Path::new(CONFIG_DIR);
    let sets = std::fs::read_to_string(config.join(SETS_KEY)).unwrap_or_default();
    let mut cmd = Command::new(std::env::current_exe().context("this program's path")?);
    cmd.arg("experiment")
        .arg(config.join(FILE_KEY))
        .arg("--store")
        .arg(store);
    for set in sets.lines().filter(|l| !l.trim().is_empty()) {
        cmd.args(["--set", set]);
    }
    // The pod's own account, whatever the file and the `--set`s name for the workstation.
    cmd.args(["--set", "cluster.kubeconfig=null"]);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the run")?;
    let out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    for stream in [Box::new(out) as Box<dyn Read + Send>, Box::new(err)] {
        let shared = shared.clone();
        std::thread::spawn(move || tee(stream, &shared));
    }
    Ok(child)
}

/// Each line of `stream` (a progress line redrawn with `\r` counts as its last form) said.
fn tee(stream: Box<dyn Read + Send>, shared: &Board) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        let text = String::from_utf8_lossy(&line);
        let last = text
            .trim_end_matches(['\n', '\r'])
            .rsplit('\r')
            .next()
            .unwrap_or("");
        say(shared, last.to_string());
        line.clear();
    }
}

/// Answers the workstation, one request per connection.
fn serve(listener: TcpListener, shared: &Board, store: &Path, child: Option<i32>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let Some(request) = control::read_request(&mut stream) else {
            control::answer(&mut stream, 404, b"not a request of meshbench's");
            continue;
        };
        match request {
            Request::Status => {
                let b = board(shared);
                let status = Status {
                    state: b.state,
                    exit_code: b.exit_code,
                    lines: b.lines.len(),
                    stop_asked: b.stop_asked,
                };
                drop(b);
                let body = serde_json::to_vec(&status).expect("a status serialises");
                control::answer(&mut stream, 200, &body);
            }
            Request::Lines { from } => {
                let b = board(shared);
                let mut body = String::new();
                for l in b.lines.iter().skip(from) {
                    body.push_str(l);
                    body.push('\n');
                }
                drop(b);
                control::answer(&mut stream, 200, body.as_bytes());
            }
            Request::Store if board(shared).state == RunState::Running => {
                control::answer(&mut stream, 409, b"the run is still running");
            }
            Request::Store => match std::fs::read(store) {
                Ok(bytes) => control::answer(&mut stream, 200, &bytes),
                Err(e) => control::answer(
                    &mut stream,
                    409,
                    format!("no results were stored ({e})").as_bytes(),
                ),
            },
            Request::Stop => {
                let mut b = board(shared);
                let first = !b.stop_asked && b.state == RunState::Running;
                b.stop_asked = true;
                drop(b);
                if let (true, Some(pid)) = (first, child) {
                    say(
                        shared,
                        "meshbench: a stop was asked for (meshbench k8s stop)".into(),
                    );
                    interrupt(pid);
                }
                control::answer(&mut stream, 202, b"stopping");
            }
            Request::Done => {
                board(shared).fetched = true;
                control::answer(&mut stream, 200, b"deleting the coordinator's namespace");
            }
        }
    }
}

/// SIGINT to the run: it stops as on a Ctrl-C.
fn interrupt(pid: i32) {
    // SAFETY: kill on the pid of a child this process started and has not reaped.
    unsafe { libc::kill(pid, libc::SIGINT) };
}

/// As the container's first process, this one inherits the run's orphans (its watcher, once
/// the run has ended): each that ended is reaped. Called only once the run has been waited for.
fn reap_orphans() {
    // SAFETY: waitpid with WNOHANG on any child; no status is kept.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// Deletes the namespace this pod runs in, through its own account.
fn delete_own_namespace() {
    let deleted = std::fs::read_to_string(NAMESPACE_FILE)
        .context("the pod's namespace")
        .and_then(|ns| {
            let client = BlockingClient::connect(None)?;
            client.delete_namespace(ns.trim())?;
            Ok(())
        });
    if let Err(e) = deleted {
        outln!("meshbench: warning: the namespace could not be deleted: {e:#}");
    }
}
