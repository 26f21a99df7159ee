//! `cpu_quota` against the real kernel: a busy child in a cpu cgroup of 20 ms per 100 ms is
//! found limited to 0.2 cores and throttled. Needs a writable cgroup hierarchy with the cpu
//! controller (root; v1 or v2, whichever this machine mounts): without one it fails and says so,
//! since the quota reader's contract is about exactly those files.

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use meshbench_net::cpu_quota::{parse_mountinfo, CpuQuota, Version};

/// A cpu cgroup made for the test; emptied into its parent and removed when dropped.
struct Group {
    dir: PathBuf,
    version: Version,
}

impl Group {
    /// `name` under the cpu hierarchy, limited to `quota_us` per 100 ms.
    fn create(name: &str, quota_us: u64) -> Result<Group, String> {
        let info = fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let mounts = parse_mountinfo(&info);
        let (version, root) = match (mounts.v1_cpu, mounts.v2) {
            (Some(m), _) => (Version::V1, m.point),
            (None, Some(m)) => (Version::V2, m.point),
            (None, None) => return Err("no cgroup hierarchy with the cpu controller".into()),
        };
        let dir = root.join(name);
        if version == Version::V2 {
            let _ = fs::write(root.join("cgroup.subtree_control"), "+cpu");
        }
        fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let group = Group { dir, version };
        let write = |file: &str, value: &str| {
            let p = group.dir.join(file);
            fs::write(&p, value).map_err(|e| format!("{}: {e}", p.display()))
        };
        match version {
            Version::V1 => {
                write("cpu.cfs_period_us", "100000")?;
                write("cpu.cfs_quota_us", &quota_us.to_string())?;
            }
            Version::V2 => write("cpu.max", &format!("{quota_us} 100000"))?,
        }
        Ok(group)
    }

    /// Starts `program` inside the group: the child joins it before it runs anything.
    fn spawn(&self, command: &mut Command) -> Child {
        let procs = fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
            .expect("cgroup.procs opens for writing");
        let fd = procs.as_raw_fd();
        // SAFETY: write(2) on an fd opened by the parent is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = command.spawn().expect("the child starts");
        drop(procs);
        child
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let parent_procs = self.dir.parent().map(|p| p.join("cgroup.procs"));
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                if let Some(p) = &parent_procs {
                    let _ = fs::OpenOptions::new()
                        .write(true)
                        .open(p)
                        .and_then(|mut f| f.write_all(pid.as_bytes()));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Kills and reaps the child even when an assertion fails.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_busy_child_under_a_fifth_of_a_core_is_throttled() {
    let name = format!("meshbench-quota-test-{}", std::process::id());
    let group = Group::create(&name, 20_000).unwrap_or_else(|e| {
        panic!("cannot write a cpu cgroup ({e}): run as root with /sys/fs/cgroup writable")
    });
    let child = Reaped(
        group.spawn(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null()),
        ),
    );
    let pid = child.0.id();
    let quota = CpuQuota::of_process(Some(pid)).expect("the child's group has a quota");
    let before = quota.throttling().expect("cpu.stat has the counters");
    std::thread::sleep(Duration::from_millis(400));
    let after = quota.throttling().expect("cpu.stat has the counters");
    assert!((quota.cores - 0.2).abs() < 1e-9, "{quota:?}");
    assert_eq!(quota.group, group.dir);
    assert_eq!(quota.version, group.version);
    let window = after.since(&before);
    assert!(
        window.periods >= 2 && window.throttled_periods > 0 && window.throttled_ns > 0,
        "{window:?}"
    );
    // A busy loop at 0.2 cores is throttled in nearly every period it runs in.
    assert!(window.throttled_periods * 2 >= window.periods, "{window:?}");
    // This test process is not in the group and sees no quota of its own (unless the machine
    // limits it, which this machine does not).
    assert_ne!(
        CpuQuota::of_self().map(|q| q.group),
        Some(group.dir.clone())
    );
    drop(child);
    let dir = group.dir.clone();
    drop(group);
    assert!(!Path::new(&dir).exists());
}
