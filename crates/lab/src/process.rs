//! One role's process, the one handle for every process the lab starts (proxies, gateways, the
//! backend, in a rig or in a test): started in its own process group (so that the whole tree it
//! forks can be found and stopped), placed in its cgroup and CPU set and network namespace
//! *before* its program runs, its output kept in a log whose tail explains a failure, ready once
//! its listener accepts a connection, and stopped with SIGTERM then SIGKILL when dropped. The
//! child also asks the kernel to kill it if meshbench dies, so that even a SIGKILLed run leaves
//! no proxy behind.

use std::ffi::CString;
use std::fs;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use meshbench_results::Stop;

use crate::cgroup::CgroupFiles;
use crate::LabError;

/// Where and how a role's process runs.
#[derive(Debug, Default)]
pub struct Placement<'a> {
    pub cgroup: Option<&'a CgroupFiles>,
    /// CPUs to pin to with the affinity mask (the fallback when cgroups are unavailable).
    pub affinity: Option<Vec<usize>>,
    /// A network namespace created with `ip netns add` (see [`crate::netns`]).
    pub netns: Option<String>,
    /// Run as this user and group id (Istio's proxy runs as 1337), set after the process
    /// has joined its cgroup and namespace and moved to its working directory.
    pub user: Option<u32>,
}

/// Another `Command` as `cmd` is: its program, arguments, environment and directory (what a
/// role's process is started again with).
pub fn copy_of(cmd: &Command) -> Command {
    let mut copy = Command::new(cmd.get_program());
    copy.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => copy.env(k, v),
            None => copy.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        copy.current_dir(dir);
    }
    copy
}

/// A running role process; its whole process group is stopped when dropped.
#[derive(Debug)]
pub struct RoleProcess {
    pub name: String,
    child: Child,
    log: PathBuf,
}

/// How long a program may take to accept its first connection (caddy and Envoy take seconds on
/// a busy machine).
pub const READY_WITHIN: Duration = Duration::from_secs(30);

impl RoleProcess {
    /// Starts `cmd` as [`spawn`](Self::spawn) does and waits until `listen` accepts a
    /// connection: the readiness check every program shares. A `stop` ends the wait (and
    /// stops the process).
    pub fn start(
        name: &str,
        cmd: Command,
        log: &Path,
        place: &Placement,
        listen: SocketAddr,
        stop: &Stop,
    ) -> Result<RoleProcess, LabError> {
        let mut process = RoleProcess::spawn(name, cmd, log, place)?;
        process.wait_listening(listen, READY_WITHIN, &accepts, stop)?;
        Ok(process)
    }

    /// Starts `cmd` with its output in `log`, placed as asked.
    pub fn spawn(
        name: &str,
        mut cmd: Command,
        log: &Path,
        place: &Placement,
    ) -> Result<RoleProcess, LabError> {
        let out = fs::File::create(log).map_err(|e| LabError::Files {
            path: log.to_path_buf(),
            source: e,
        })?;
        // A process run as another user owns its output, as a container's runtime hands it
        // its stdout: Envoy reopens `/dev/stdout` by path for an access log (istiod's).
        if let Some(uid) = place.user {
            std::os::unix::fs::fchown(&out, Some(uid), Some(uid)).map_err(|e| LabError::Files {
                path: log.to_path_buf(),
                source: e,
            })?;
        }
        let err = out.try_clone().map_err(|e| LabError::Files {
            path: log.to_path_buf(),
            source: e,
        })?;
        // Everything the child needs is prepared here: after fork it may not allocate.
        let procs: Vec<RawFd> = match place.cgroup {
            Some(g) => g.procs_files()?,
            None => Vec::new(),
        };
        let mask = place.affinity.as_ref().map(|cpus| {
            // SAFETY: cpu_set_t is plain bits; CPU_ZERO/CPU_SET only write into it.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            for &c in cpus {
                unsafe { libc::CPU_SET(c, &mut set) };
            }
            set
        });
        let netns_fd: Option<RawFd> = match &place.netns {
            Some(ns) => {
                let path = CString::new(format!("/var/run/netns/{ns}")).expect("no NUL in a name");
                // SAFETY: a plain open(2) of a NUL-terminated path.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(LabError::Spawn(
                        format!("{name} in netns {ns}"),
                        io::Error::last_os_error(),
                    ));
                }
                Some(fd)
            }
            None => None,
        };
        let fds = procs.clone();
        let user = place.user;
        // SAFETY: the closure only makes async-signal-safe system calls on prepared data.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                for &fd in &fds {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                if let Some(set) = &mask {
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                if let Some(fd) = netns_fd {
                    if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                if let Some(id) = user {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(id) != 0
                        || libc::setuid(id) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                // Last: a change of user clears it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let spawned = cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn();
        for fd in procs.iter().copied().chain(netns_fd) {
            // SAFETY: these descriptors were opened above and are not used elsewhere.
            unsafe { libc::close(fd) };
        }
        let child = spawned.map_err(|e| LabError::Spawn(name.to_string(), e))?;
        Ok(RoleProcess {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `addr` accepts a connection; fails with the log's tail if the process exits
    /// first or `timeout` passes, and with [`LabError::Stopped`] within a few ms of a `stop`
    /// (plus one `connect`). `connect` reaches the address (it may have to enter a netns).
    pub fn wait_listening(
        &mut self,
        addr: SocketAddr,
        timeout: Duration,
        connect: &dyn Fn(SocketAddr) -> bool,
        stop: &Stop,
    ) -> Result<(), LabError> {
        let deadline = Instant::now() + timeout;
        loop {
            if connect(addr) {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(LabError::BadConfig {
                    server: self.name.clone(),
                    config: None,
                    log: format!("exited ({status}): {}", self.failure_message()),
                });
            }
            if Instant::now() > deadline {
                return Err(LabError::NotListening {
                    server: self.name.clone(),
                    addr,
                    log: self.log_tail(5),
                });
            }
            if !stop.sleep(Duration::from_millis(5)) {
                return Err(LabError::Stopped);
            }
        }
    }

    /// Asks its whole process group to end (SIGTERM) without waiting: a teardown that stops
    /// many signals them all first, so that they end together and the drops that follow (each
    /// waits for its own group) cost the slowest one's time, not the sum.
    pub fn terminate(&self) {
        // SAFETY: signalling a process group this handle created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGTERM) };
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(s)) => Some(s.to_string()),
            _ => None,
        }
    }

    /// Why it stopped, in its own words and on one line: the first line it logged as
    /// critical or as an error (Envoy's `[critical]` line, stripped of its timestamp and
    /// source location, cut at 400 characters), else its last 5 lines.
    pub fn failure_message(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .find_map(severe_line)
            .unwrap_or_else(|| self.log_tail(5))
    }

    /// The last `n` lines of its output, joined with " | ".
    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(n)..].join(" | ")
    }

    /// Every process of its group (the program and whatever it forked), from /proc.
    pub fn tree(&self) -> Vec<u32> {
        group_members(self.child.id())
    }
}

/// A log line at critical or error level, without Envoy's bracketed prefix
/// (`[time][thread][critical][main] [source/file.cc:449] `), shortened to one readable line.
fn severe_line(line: &str) -> Option<String> {
    let level = ["[critical]", "[error]"]
        .iter()
        .find(|l| line.contains(*l))?;
    let after = &line[line.find(level)? + level.len()..];
    // Skip the component and the source location, each in brackets.
    let mut rest = after.trim_start();
    for _ in 0..2 {
        if let Some(r) = rest.strip_prefix('[') {
            rest = r.split_once(']').map_or(r, |(_, tail)| tail).trim_start();
        }
    }
    let message: String = rest.chars().take(400).collect();
    Some(message.trim().to_string())
}

/// How long a program asked only for its version may take to answer.
pub const VERSION_WITHIN: Duration = Duration::from_secs(10);

/// Runs `cmd` to its end and returns what it printed and how it ended, as `Command::output`
/// does, for at most `within`: a one-shot command that does not end by then (a version probe
/// or `contour bootstrap` that hangs) is killed and `None` returned, so that no such command
/// holds a run, and the stop it is asked for, longer than that. Its output must fit a pipe's
/// buffer (64 KiB) until it ends; a version line or a short error does.
pub fn output_within(
    mut cmd: Command,
    within: Duration,
) -> io::Result<Option<std::process::Output>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |pipe: Option<&mut dyn io::Read>| {
        let mut bytes = Vec::new();
        if let Some(pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    };
    let stdout = read(child.stdout.as_mut().map(|p| p as &mut dyn io::Read));
    let stderr = read(child.stderr.as_mut().map(|p| p as &mut dyn io::Read));
    Ok(Some(std::process::Output {
        status,
        stdout,
        stderr,
    }))
}

/// A plain TCP connect with a short timeout.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Processes whose process group is `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_pgrp(&s))
                == Some(pgid)
        })
        .collect()
}

/// The process group field of /proc/PID/stat.
pub fn stat_pgrp(stat: &str) -> Option<u32> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

impl Drop for RoleProcess {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        // SAFETY: signalling a process group this handle created.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            let _ = self.child.try_wait();
            if group_members(pgid as u32).is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_shot_command_that_hangs_is_killed_at_its_limit() {
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo 1.2.3; echo warn >&2"]);
        let o = output_within(echo, Duration::from_secs(10))
            .unwrap()
            .unwrap();
        assert!(o.status.success());
        assert_eq!(
            (o.stdout.as_slice(), o.stderr.as_slice()),
            (&b"1.2.3\n"[..], &b"warn\n"[..])
        );

        let mut hang = Command::new("sleep");
        hang.arg("30");
        let began = Instant::now();
        let o = output_within(hang, Duration::from_millis(300)).unwrap();
        assert!(o.is_none());
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{:?}",
            began.elapsed()
        );
    }

    #[test]
    fn a_critical_line_is_the_failure_message_without_its_prefix() {
        let line = "[2026-11-25 07:36:20.101][7587][critical][main] [source/server/server.cc:449] error initializing configuration 'x.pb': Unable to parse";
        assert_eq!(
            severe_line(line).unwrap(),
            "error initializing configuration 'x.pb': Unable to parse"
        );
        assert_eq!(severe_line("[info] fine"), None);
    }

    #[test]
    fn the_process_group_is_read_after_the_command_name() {
        let stat = "1234 (a (weird) name) S 1 1230 1230 0 -1 4194560";
        assert_eq!(stat_pgrp(stat), Some(1230));
        assert_eq!(stat_pgrp("garbage"), None);
    }

    #[test]
    fn a_role_and_everything_it_forks_are_stopped_when_dropped() {
        let dir = std::env::temp_dir().join(format!("mb-proc-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & sleep 30 & echo started; wait"]);
        let role =
            RoleProcess::spawn("sleepers", cmd, &dir.join("log"), &Placement::default()).unwrap();
        let pgid = role.pid();
        let deadline = Instant::now() + Duration::from_secs(5);
        // sh forks both sleeps before it echoes: wait for the line as well as the tree.
        while (role.tree().len() < 3 || role.log_tail(1) != "started") && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(role.tree().len(), 3, "sh and two sleeps");
        assert_eq!(role.log_tail(1), "started");
        drop(role);
        assert!(group_members(pgid).is_empty());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_stop_ends_the_wait_for_a_listener_within_ms() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        // A port nothing listens on: the wait would last its whole limit.
        let addr = SocketAddr::from(([127, 0, 0, 1], crate::port::free_port().unwrap()));
        let stop = Stop::new();
        let asker = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            asker.request();
        });
        let began = Instant::now();
        let started = RoleProcess::start(
            "silent",
            cmd,
            &dir.path().join("log"),
            &Placement::default(),
            addr,
            &stop,
        );
        let took = began.elapsed();
        t.join().unwrap();
        assert!(matches!(started, Err(LabError::Stopped)), "{started:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
}
