//! A process's CPU limit as its cgroup sets it (a pod's CPU limit is a CFS quota), and how often
//! the kernel stopped the group for using it up (throttling).
//!
//! Why it exists: a load generator under a quota that spins while it waits for its next send
//! burns the quota on nothing, and once the quota is spent the kernel stops every one of its
//! threads until the period ends (tens of milliseconds at a 100 ms period): its sends go out
//! late for that, not for the target. The run reads the quota (so the idle strategy can avoid
//! spinning under one) and the throttling counters over its measured window (so its self-check
//! can say the figures are the quota's).
//!
//! Contract: [`CpuQuota::of_process`] finds the process's group in `/proc/<pid>/cgroup`: the
//! cgroup v1 line whose controllers include `cpu` when the cpu controller is mounted as v1
//! (also on a hybrid machine, where a v2 hierarchy is mounted beside it without the cpu
//! controller), else the v2 line `0::/path`; the hierarchy's mount point comes from
//! `/proc/self/mountinfo` (else `/sys/fs/cgroup/cpu,cpuacct`, `/sys/fs/cgroup/cpu` or
//! `/sys/fs/cgroup`). A group without a quota of its own may sit in one that has one, so the
//! group and every ancestor up to the hierarchy's root are read (v2 `cpu.max`, v1
//! `cpu.cfs_quota_us` / `cpu.cfs_period_us`) and the smallest quota wins; its group is where
//! [`CpuQuota::throttling`] reads `cpu.stat`. Missing or unreadable files mean no quota; odd
//! content never panics. Every file is read through a function (`*_with`), so tests feed
//! fixture text; the parsers are pure functions of a file's text.

use std::fs;
use std::path::{Path, PathBuf};

/// Where cgroup hierarchies are mounted when `/proc/self/mountinfo` does not say.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A CPU limit: at most `cores` CPUs' worth of time per scheduling period, for every process
/// in `group` and below it.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuQuota {
    /// Quota over period: 0.5 = half a CPU.
    pub cores: f64,
    /// The directory of the group whose quota this is (the process's own group or an ancestor
    /// of it), e.g. `/sys/fs/cgroup/cpu/kubepods/pod1234`.
    pub group: PathBuf,
    /// The cgroup version of `group`, which says how its `cpu.stat` counts throttled time.
    pub version: Version,
}

/// The cgroup hierarchy a group belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// One hierarchy per controller (`cpu.cfs_quota_us`, `throttled_time` in ns).
    V1,
    /// The unified hierarchy (`cpu.max`, `throttled_usec`).
    V2,
}

/// A group's throttling counters since the group was created (subtract two readings with
/// [`Throttling::since`] for a window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttling {
    /// Scheduling periods in which the group had work to do (`nr_periods`).
    pub periods: u64,
    /// Of them, periods in which it used its quota up and was stopped until the period ended
    /// (`nr_throttled`).
    pub throttled_periods: u64,
    /// How long its runqueues stayed stopped so, summed over CPUs, ns (v1 `throttled_time`,
    /// v2 `throttled_usec` × 1000).
    pub throttled_ns: u64,
}

impl Throttling {
    /// The counts between `earlier` and this reading (0 where a counter went backwards: the
    /// group was recreated).
    pub fn since(&self, earlier: &Throttling) -> Throttling {
        Throttling {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled_periods: self
                .throttled_periods
                .saturating_sub(earlier.throttled_periods),
            throttled_ns: self.throttled_ns.saturating_sub(earlier.throttled_ns),
        }
    }
}

/// A file's text, or `None` when it cannot be read.
fn read_real(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

impl CpuQuota {
    /// This process's quota; `None` without one (or where cgroups cannot be read).
    pub fn of_self() -> Option<CpuQuota> {
        Self::of_process(None)
    }

    /// The quota of process `pid` (`None`: this process); `None` without one.
    pub fn of_process(pid: Option<u32>) -> Option<CpuQuota> {
        let proc_cgroup = match pid {
            Some(pid) => PathBuf::from(format!("/proc/{pid}/cgroup")),
            None => PathBuf::from("/proc/self/cgroup"),
        };
        Self::of_process_with(&proc_cgroup, &read_real, &|p| p.is_dir())
    }

    /// The quota of the process whose cgroup membership is the file `proc_cgroup` (its
    /// `/proc/<pid>/cgroup`), every file read through `read`; `is_dir` says which fallback
    /// mount points exist when `/proc/self/mountinfo` cannot be read.
    pub fn of_process_with(
        proc_cgroup: &Path,
        read: &dyn Fn(&Path) -> Option<String>,
        is_dir: &dyn Fn(&Path) -> bool,
    ) -> Option<CpuQuota> {
        let membership = parse_proc_cgroup(&read(proc_cgroup)?);
        let mounts = read(Path::new("/proc/self/mountinfo"))
            .map(|text| parse_mountinfo(&text))
            .unwrap_or_default();
        let (version, path, mount) = match (&membership.v1_cpu, &membership.v2) {
            (Some(path), _) if mounts.v1_cpu.is_some() || mounts.v2.is_none() => {
                let mount = mounts.v1_cpu.clone().or_else(|| {
                    ["cpu,cpuacct", "cpuacct,cpu", "cpu"]
                        .iter()
                        .map(|m| Path::new(CGROUP_ROOT).join(m))
                        .find(|m| is_dir(m))
                        .map(|point| Mount {
                            root: "/".to_string(),
                            point,
                        })
                })?;
                (Version::V1, path, mount)
            }
            (_, Some(path)) => {
                let mount = mounts.v2.clone().unwrap_or_else(|| Mount {
                    root: "/".to_string(),
                    point: PathBuf::from(CGROUP_ROOT),
                });
                (Version::V2, path, mount)
            }
            _ => return None,
        };
        let dir = group_dir(&mount, path);
        // The group, then each ancestor up to the hierarchy's root: the smallest quota limits.
        let mut best: Option<CpuQuota> = None;
        for group in dir.ancestors().take_while(|d| d.starts_with(&mount.point)) {
            let cores = match version {
                Version::V2 => read(&group.join("cpu.max")).and_then(|t| parse_cpu_max(&t)),
                Version::V1 => read(&group.join("cpu.cfs_quota_us"))
                    .and_then(|q| parse_cfs_quota(&q, &read(&group.join("cpu.cfs_period_us"))?)),
            };
            if let Some(cores) = cores {
                if best.as_ref().is_none_or(|b| cores < b.cores) {
                    best = Some(CpuQuota {
                        cores,
                        group: group.to_path_buf(),
                        version,
                    });
                }
            }
        }
        best
    }

    /// The throttling counters of the group whose quota this is; `None` when its `cpu.stat`
    /// cannot be read or lacks them.
    pub fn throttling(&self) -> Option<Throttling> {
        self.throttling_with(&read_real)
    }

    /// [`CpuQuota::throttling`], the file read through `read`.
    pub fn throttling_with(&self, read: &dyn Fn(&Path) -> Option<String>) -> Option<Throttling> {
        parse_cpu_stat(&read(&self.group.join("cpu.stat"))?)
    }
}

/// Where a process sits in each hierarchy, from `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    /// The path in the v1 hierarchy that has the `cpu` controller.
    pub v1_cpu: Option<String>,
    /// The path in the v2 hierarchy (the `0::` line).
    pub v2: Option<String>,
}

/// Parses `/proc/<pid>/cgroup`: lines `id:controllers:path`, where v1 hierarchies list their
/// controllers (`4:cpu,cpuacct:/kubepods/pod1`) and the v2 one none (`0::/user.slice`).
pub fn parse_proc_cgroup(text: &str) -> Membership {
    let mut m = Membership::default();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        if id == "0" && controllers.is_empty() {
            m.v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpu") {
            m.v1_cpu = Some(path.to_string());
        }
    }
    m
}

/// A cgroup hierarchy's mount: `root` is the group mounted (`/` unless a container was given
/// a subtree), `point` where it is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub root: String,
    pub point: PathBuf,
}

/// The cgroup mounts that matter here, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// The v1 hierarchy with the `cpu` controller.
    pub v1_cpu: Option<Mount>,
    /// The v2 hierarchy.
    pub v2: Option<Mount>,
}

/// Parses `/proc/self/mountinfo`: `id parent major:minor root point options [optional...] -
/// fstype source super_options`; a v1 hierarchy's controllers are among its super options.
pub fn parse_mountinfo(text: &str) -> Mounts {
    let mut mounts = Mounts::default();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        let (Some(root), Some(point), Some(fstype)) = (left.get(3), left.get(4), right.first())
        else {
            continue;
        };
        let mount = Mount {
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
        };
        match *fstype {
            "cgroup2" if mounts.v2.is_none() => mounts.v2 = Some(mount),
            "cgroup"
                if mounts.v1_cpu.is_none()
                    && right
                        .get(2)
                        .is_some_and(|opts| opts.split(',').any(|o| o == "cpu")) =>
            {
                mounts.v1_cpu = Some(mount)
            }
            _ => {}
        }
    }
    mounts
}

/// mountinfo writes space, tab, newline and backslash as `\040`, `\011`, `\012`, `\134`.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The directory of the group at `path` (as `/proc/<pid>/cgroup` names it) in `mount`: the path
/// is relative to the hierarchy's root, and a mount of a subtree shows the part below `root`.
pub fn group_dir(mount: &Mount, path: &str) -> PathBuf {
    let below = if mount.root != "/" {
        path.strip_prefix(mount.root.as_str()).unwrap_or(path)
    } else {
        path
    };
    let mut dir = mount.point.clone();
    for part in below.split('/').filter(|p| !p.is_empty() && *p != "..") {
        dir.push(part);
    }
    dir
}

/// Cores from v2 `cpu.max` (`quota period`): "50000 100000" = 0.5; "max 100000" (no limit),
/// or anything unreadable, is `None`.
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota: u64 = fields.next()?.parse().ok()?;
    let period: u64 = match fields.next() {
        Some(p) => p.parse().ok()?,
        None => 100_000,
    };
    cores(quota, period)
}

/// Cores from v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`: a quota of -1 (no limit), or
/// anything unreadable, is `None`.
pub fn parse_cfs_quota(quota_us: &str, period_us: &str) -> Option<f64> {
    let quota: i64 = quota_us.trim().parse().ok()?;
    let period: u64 = period_us.trim().parse().ok()?;
    cores(u64::try_from(quota).ok()?, period)
}

fn cores(quota: u64, period: u64) -> Option<f64> {
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

/// Throttling counters from `cpu.stat`: `nr_periods`, `nr_throttled`, and `throttled_usec`
/// (v2) or `throttled_time` (v1, ns). `None` when the period counts are missing (a v2 group
/// without the cpu controller has only its usage there).
pub fn parse_cpu_stat(text: &str) -> Option<Throttling> {
    let value = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(char::is_whitespace)?;
            (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
        })
    };
    let throttled_ns = value("throttled_usec")
        .map(|us| us.saturating_mul(1000))
        .or_else(|| value("throttled_time"))
        .unwrap_or(0);
    Some(Throttling {
        periods: value("nr_periods")?,
        throttled_periods: value("nr_throttled")?,
        throttled_ns,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn membership_is_the_cpu_line_in_v1_and_the_empty_one_in_v2() {
        let hybrid = "9:name=systemd:/\n4:memory:/x\n2:cpuacct:/\n1:cpu:/kubepods/pod1\n0::/\n";
        assert_eq!(
            parse_proc_cgroup(hybrid),
            Membership {
                v1_cpu: Some("/kubepods/pod1".into()),
                v2: Some("/".into())
            }
        );
        let v1 = "3:cpu,cpuacct:/docker/abc\n2:cpuset:/docker/abc\n";
        assert_eq!(parse_proc_cgroup(v1).v1_cpu.as_deref(), Some("/docker/abc"));
        // `cpuacct` or `cpuset` alone is not `cpu`.
        assert_eq!(parse_proc_cgroup("2:cpuacct,cpuset:/a\n").v1_cpu, None);
        let v2 = "0::/kubepods.slice/pod1.slice/cri-1.scope\n";
        assert_eq!(
            parse_proc_cgroup(v2),
            Membership {
                v1_cpu: None,
                v2: Some("/kubepods.slice/pod1.slice/cri-1.scope".into())
            }
        );
        for odd in ["", "garbage", "1:cpu", "1:cpu:relative", "\n\n:::\n"] {
            assert_eq!(parse_proc_cgroup(odd), Membership::default(), "{odd:?}");
        }
    }

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn mounts_are_found_by_type_and_controller() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.v1_cpu.unwrap().point, Path::new("/sys/fs/cgroup/cpu"));
        assert_eq!(m.v2.unwrap().point, Path::new("/sys/fs/cgroup/unified"));
        let joined = "30 25 0:26 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n";
        let m = parse_mountinfo(joined).v1_cpu.unwrap();
        assert_eq!(m.root, "/docker/abc");
        assert_eq!(m.point, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        let spaced = "1 2 0:1 / /mnt/my\\040cgroups rw - cgroup2 none rw\n";
        assert_eq!(
            parse_mountinfo(spaced).v2.unwrap().point,
            Path::new("/mnt/my cgroups")
        );
        for odd in ["", "1 2 3 - cgroup2", "x - y", " - "] {
            assert_eq!(parse_mountinfo(odd), Mounts::default(), "{odd:?}");
        }
    }

    #[test]
    fn a_subtree_mount_shows_the_part_below_its_root() {
        let whole = Mount {
            root: "/".into(),
            point: "/sys/fs/cgroup/cpu".into(),
        };
        assert_eq!(
            group_dir(&whole, "/kubepods/pod1"),
            Path::new("/sys/fs/cgroup/cpu/kubepods/pod1")
        );
        assert_eq!(group_dir(&whole, "/"), Path::new("/sys/fs/cgroup/cpu"));
        let container = Mount {
            root: "/docker/abc".into(),
            point: "/sys/fs/cgroup/cpu".into(),
        };
        assert_eq!(
            group_dir(&container, "/docker/abc/sub"),
            Path::new("/sys/fs/cgroup/cpu/sub")
        );
        // `..` never climbs out of the mount.
        assert_eq!(
            group_dir(&whole, "/../../etc"),
            Path::new("/sys/fs/cgroup/cpu/etc")
        );
    }

    #[test]
    fn quotas_in_both_versions() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(0.5));
        assert_eq!(parse_cpu_max("250000 100000"), Some(2.5));
        assert_eq!(parse_cpu_max("20000"), Some(0.2));
        for odd in ["", "x y", "50000 0", "0 100000", "-5 100000", "50000 abc"] {
            assert_eq!(parse_cpu_max(odd), None, "{odd:?}");
        }
        assert_eq!(parse_cfs_quota("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs_quota("20000\n", "100000\n"), Some(0.2));
        assert_eq!(parse_cfs_quota("5000\n", "10000\n"), Some(0.5));
        for (q, p) in [("", "100000"), ("20000", ""), ("20000", "0"), ("abc", "1")] {
            assert_eq!(parse_cfs_quota(q, p), None, "{q:?} {p:?}");
        }
    }

    #[test]
    fn throttling_counters_in_both_versions() {
        let v1 = "nr_periods 120\nnr_throttled 30\nthrottled_time 2500000000\nnr_bursts 0\nburst_time 0\n";
        let t1 = parse_cpu_stat(v1).unwrap();
        assert_eq!(
            t1,
            Throttling {
                periods: 120,
                throttled_periods: 30,
                throttled_ns: 2_500_000_000
            }
        );
        let v2 = "usage_usec 9000\nuser_usec 8000\nsystem_usec 1000\nnr_periods 10\nnr_throttled 4\nthrottled_usec 350000\n";
        assert_eq!(
            parse_cpu_stat(v2).unwrap(),
            Throttling {
                periods: 10,
                throttled_periods: 4,
                throttled_ns: 350_000_000
            }
        );
        // A v2 group without the cpu controller: usage only.
        assert_eq!(parse_cpu_stat("usage_usec 5\nuser_usec 5\n"), None);
        assert_eq!(parse_cpu_stat(""), None);
        assert_eq!(parse_cpu_stat("nr_periods x\nnr_throttled 1\n"), None);
        let later = Throttling {
            periods: 150,
            throttled_periods: 31,
            throttled_ns: 2_600_000_000,
        };
        assert_eq!(
            later.since(&t1),
            Throttling {
                periods: 30,
                throttled_periods: 1,
                throttled_ns: 100_000_000
            }
        );
        // A recreated group's counters start again: nothing, rather than a huge difference.
        assert_eq!(t1.since(&later).periods, 0);
    }

    /// A fake file system: path → text.
    fn files(entries: &[(&str, &str)]) -> HashMap<PathBuf, String> {
        entries
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect()
    }

    fn find(fs: &HashMap<PathBuf, String>) -> Option<CpuQuota> {
        CpuQuota::of_process_with(Path::new("/proc/7/cgroup"), &|p| fs.get(p).cloned(), &|p| {
            fs.keys().any(|k| k.starts_with(p) && k != p)
        })
    }

    #[test]
    fn the_smallest_quota_on_the_way_to_the_root_limits() {
        // v1 on a hybrid machine: the pod has 0.5 cores, its container none of its own.
        let mut fs = files(&[
            ("/proc/7/cgroup", "2:cpuacct:/\n1:cpu:/pods/p1/c1\n0::/\n"),
            ("/proc/self/mountinfo", MOUNTINFO),
            ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n"),
            ("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"),
            ("/sys/fs/cgroup/cpu/pods/cpu.cfs_quota_us", "400000\n"),
            ("/sys/fs/cgroup/cpu/pods/cpu.cfs_period_us", "100000\n"),
            ("/sys/fs/cgroup/cpu/pods/p1/cpu.cfs_quota_us", "50000\n"),
            ("/sys/fs/cgroup/cpu/pods/p1/cpu.cfs_period_us", "100000\n"),
            (
                "/sys/fs/cgroup/cpu/pods/p1/cpu.stat",
                "nr_periods 9\nnr_throttled 2\nthrottled_time 7\n",
            ),
            ("/sys/fs/cgroup/cpu/pods/p1/c1/cpu.cfs_quota_us", "-1\n"),
            (
                "/sys/fs/cgroup/cpu/pods/p1/c1/cpu.cfs_period_us",
                "100000\n",
            ),
        ]);
        let q = find(&fs).unwrap();
        assert_eq!(
            q,
            CpuQuota {
                cores: 0.5,
                group: "/sys/fs/cgroup/cpu/pods/p1".into(),
                version: Version::V1
            }
        );
        let t = q.throttling_with(&|p| fs.get(p).cloned()).unwrap();
        assert_eq!((t.periods, t.throttled_periods, t.throttled_ns), (9, 2, 7));
        // Without mountinfo, the usual mount point.
        fs.remove(Path::new("/proc/self/mountinfo"));
        assert_eq!(find(&fs).unwrap().cores, 0.5);
        // No quota anywhere.
        fs.insert(
            "/sys/fs/cgroup/cpu/pods/p1/cpu.cfs_quota_us".into(),
            "-1".into(),
        );
        fs.insert(
            "/sys/fs/cgroup/cpu/pods/cpu.cfs_quota_us".into(),
            "-1".into(),
        );
        assert_eq!(find(&fs), None);
    }

    #[test]
    fn v2_reads_cpu_max_up_to_the_root() {
        let fs = files(&[
            (
                "/proc/7/cgroup",
                "0::/kubepods.slice/pod1.slice/cri-1.scope\n",
            ),
            (
                "/proc/self/mountinfo",
                "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
            ),
            ("/sys/fs/cgroup/kubepods.slice/cpu.max", "max 100000\n"),
            (
                "/sys/fs/cgroup/kubepods.slice/pod1.slice/cpu.max",
                "25000 100000\n",
            ),
            (
                "/sys/fs/cgroup/kubepods.slice/pod1.slice/cri-1.scope/cpu.max",
                "50000 100000\n",
            ),
        ]);
        let q = find(&fs).unwrap();
        assert_eq!(q.cores, 0.25);
        assert_eq!(
            q.group,
            Path::new("/sys/fs/cgroup/kubepods.slice/pod1.slice")
        );
        assert_eq!(q.version, Version::V2);
        // Its cpu.stat missing: no counters, no panic.
        assert_eq!(q.throttling_with(&|p| fs.get(p).cloned()), None);
    }

    #[test]
    fn nothing_readable_is_no_quota() {
        assert_eq!(find(&files(&[])), None);
        assert_eq!(find(&files(&[("/proc/7/cgroup", "garbage\n")])), None);
        // Membership in a hierarchy whose files are all missing.
        assert_eq!(find(&files(&[("/proc/7/cgroup", "0::/a/b\n")])), None);
    }
}
