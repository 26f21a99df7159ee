//! CPU and memory limits for one role, through cgroups: v2 (`cpu.max`, `cpuset.cpus`,
//! `memory.max` in one directory) or v1 (`cpu.cfs_quota_us`, `cpuacct.usage`, `cpuset.cpus`,
//! `memory.limit_in_bytes`, one directory per controller). A process joins its group before it
//! runs its program (see [`crate::process`]), so every worker it forks is limited too. The group
//! is removed when dropped. Where cgroups cannot be written (no permission, a read-only mount),
//! [`Cgroups::detect`] says why and the caller falls back to pinning with the CPU affinity mask.

use std::fs;
use std::os::fd::{IntoRawFd, RawFd};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::sample;
use crate::LabError;

const ROOT: &str = "/sys/fs/cgroup";
/// The CFS period used for quotas (the kernel's default).
const PERIOD_US: u64 = 100_000;

/// Which cgroup hierarchy this machine has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cgroups {
    /// The unified hierarchy at /sys/fs/cgroup.
    V2,
    /// One mount per controller under /sys/fs/cgroup/{cpu,cpuacct,cpuset,memory}.
    V1,
}

/// Why this process cannot create cgroups (the lab then pins with the CPU affinity mask).
#[derive(Debug, Error)]
pub enum CgroupsUnavailable {
    #[error(
        "no cgroup CPU controller is mounted at {} (neither v2 nor v1 cpu)",
        ROOT
    )]
    NotMounted,
    /// A probe group under `dir` could not be created.
    #[error("cannot create a cgroup under {} ({source}); run as root or delegate a cgroup to this user", .dir.display())]
    NotWritable {
        dir: PathBuf,
        source: std::io::Error,
    },
}

impl Cgroups {
    /// The hierarchy, if this process may create groups in it; else why not, in one line.
    pub fn detect() -> Result<Cgroups, CgroupsUnavailable> {
        let root = Path::new(ROOT);
        let (kind, probe) = if root.join("cgroup.controllers").is_file() {
            (Cgroups::V2, root.to_path_buf())
        } else if root.join("cpu/cpu.cfs_quota_us").is_file() {
            (Cgroups::V1, root.join("cpu"))
        } else {
            return Err(CgroupsUnavailable::NotMounted);
        };
        let test = probe.join(format!("meshbench-probe-{}", std::process::id()));
        match fs::create_dir(&test) {
            Ok(()) => {
                let _ = fs::remove_dir(&test);
                Ok(kind)
            }
            Err(source) => Err(CgroupsUnavailable::NotWritable { dir: probe, source }),
        }
    }
}

/// What to limit a role to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    /// CPU quota in cores.
    pub cpus: Option<f64>,
    /// CPUs to run on.
    pub cpuset: Option<Vec<usize>>,
    pub memory_mib: Option<u64>,
}

/// A role's cgroup (one directory in v2, one per controller in v1); removed when dropped.
#[derive(Debug)]
pub struct Cgroup {
    files: CgroupFiles,
}

/// Where a cgroup's files are: what the sampler reads (it may be copied to another thread).
#[derive(Debug, Clone)]
pub struct CgroupFiles {
    kind: Cgroups,
    /// The directories created, each with a `cgroup.procs`.
    dirs: Vec<PathBuf>,
}

impl std::ops::Deref for Cgroup {
    type Target = CgroupFiles;
    fn deref(&self) -> &CgroupFiles {
        &self.files
    }
}

impl Cgroup {
    /// Creates `meshbench-{name}` with the limits written.
    pub fn create(kind: &Cgroups, name: &str, limits: &Limits) -> Result<Cgroup, LabError> {
        let leaf = format!("meshbench-{name}");
        let mut group = Cgroup {
            files: CgroupFiles {
                kind: kind.clone(),
                dirs: Vec::new(),
            },
        };
        match kind {
            Cgroups::V2 => {
                let root = Path::new(ROOT);
                // Controllers must be enabled for children of the root.
                let _ = fs::write(root.join("cgroup.subtree_control"), "+cpu +cpuset +memory");
                let dir = root.join(&leaf);
                group.make(&dir)?;
                if let Some(c) = limits.cpus {
                    write(
                        &dir.join("cpu.max"),
                        &format!("{} {PERIOD_US}", quota_us(c)),
                    )?;
                }
                if let Some(set) = &limits.cpuset {
                    write(&dir.join("cpuset.cpus"), &cpu_list(set))?;
                }
                if let Some(m) = limits.memory_mib {
                    write(&dir.join("memory.max"), &(m << 20).to_string())?;
                }
            }
            Cgroups::V1 => {
                let cpu = Path::new(ROOT).join("cpu").join(&leaf);
                group.make(&cpu)?;
                if let Some(c) = limits.cpus {
                    write(&cpu.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                    write(&cpu.join("cpu.cfs_quota_us"), &quota_us(c).to_string())?;
                }
                let acct = Path::new(ROOT).join("cpuacct").join(&leaf);
                if acct.parent().is_some_and(Path::is_dir) {
                    group.make(&acct)?;
                }
                let cpuset = Path::new(ROOT).join("cpuset").join(&leaf);
                if cpuset.parent().is_some_and(Path::is_dir) {
                    group.make(&cpuset)?;
                    // A v1 cpuset starts empty: it must be given CPUs and memory nodes.
                    let parent = cpuset.parent().unwrap();
                    let all = read(&parent.join("cpuset.cpus"))?;
                    let mems = read(&parent.join("cpuset.mems"))?;
                    let cpus = limits.cpuset.as_deref().map(cpu_list);
                    write(
                        &cpuset.join("cpuset.cpus"),
                        cpus.as_deref().unwrap_or(all.trim()),
                    )?;
                    write(&cpuset.join("cpuset.mems"), mems.trim())?;
                }
                let memory = Path::new(ROOT).join("memory").join(&leaf);
                if memory.parent().is_some_and(Path::is_dir) {
                    group.make(&memory)?;
                    if let Some(m) = limits.memory_mib {
                        write(
                            &memory.join("memory.limit_in_bytes"),
                            &(m << 20).to_string(),
                        )?;
                    }
                }
            }
        }
        Ok(group)
    }

    fn make(&mut self, dir: &Path) -> Result<(), LabError> {
        // A group left by a killed run is reused (its limits are rewritten).
        if !dir.is_dir() {
            fs::create_dir(dir).map_err(|e| LabError::Files {
                path: dir.to_path_buf(),
                source: e,
            })?;
        }
        self.files.dirs.push(dir.to_path_buf());
        Ok(())
    }

    /// What a sampler needs to read this group.
    pub fn files(&self) -> CgroupFiles {
        self.files.clone()
    }
}

impl CgroupFiles {
    /// `cgroup.procs` of every directory, opened for writing: a child writes "0" to each
    /// before it runs its program (opening happens here, in the parent, where it may allocate).
    pub fn procs_files(&self) -> Result<Vec<RawFd>, LabError> {
        self.dirs
            .iter()
            .map(|d| {
                let p = d.join("cgroup.procs");
                fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map(IntoRawFd::into_raw_fd)
                    .map_err(|e| LabError::Files { path: p, source: e })
            })
            .collect()
    }

    /// CPU time used by every process in the group, its files read through `read` (the real
    /// files, or fixtures in tests).
    pub fn cpu_ns_with(&self, read: &dyn Fn(&str) -> Option<String>) -> Option<u64> {
        match self.kind {
            Cgroups::V2 => {
                let text = read(&format!("{}/cpu.stat", self.dirs[0].display()))?;
                sample::cgroup2_cpu_ns(&text).ok()
            }
            Cgroups::V1 => {
                let dir = self
                    .dirs
                    .iter()
                    .find(|d| d.starts_with(format!("{ROOT}/cpuacct")))?;
                let text = read(&format!("{}/cpuacct.usage", dir.display()))?;
                sample::cgroup1_cpu_ns(&text).ok()
            }
        }
    }

    /// Memory in use minus inactive file pages (what the kubelet calls the working set), its
    /// files read through `read`.
    pub fn working_set_with(&self, read: &dyn Fn(&str) -> Option<String>) -> Option<u64> {
        match self.kind {
            Cgroups::V2 => {
                let d = self.dirs[0].display();
                let current = read(&format!("{d}/memory.current"))?;
                let stat = read(&format!("{d}/memory.stat"))?;
                sample::cgroup2_working_set(&current, &stat).ok()
            }
            Cgroups::V1 => {
                let d = self
                    .dirs
                    .iter()
                    .find(|d| d.starts_with(format!("{ROOT}/memory")))?;
                let d = d.display();
                let usage = read(&format!("{d}/memory.usage_in_bytes"))?;
                let stat = read(&format!("{d}/memory.stat"))?;
                sample::cgroup1_working_set(&usage, &stat).ok()
            }
        }
    }

    /// The processes in the group.
    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let dirs = &self.files.dirs;
        // The processes are gone by now (the role stops them first); a group still holding
        // stragglers is emptied into the root so that it can be removed.
        for d in dirs.iter().rev() {
            for _ in 0..50 {
                if fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                let procs = fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                let root_procs = d.parent().map(|p| p.join("cgroup.procs"));
                for pid in procs.lines() {
                    if let Some(r) = &root_procs {
                        let _ = fs::write(r, pid);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// CPU numbers as the kernel reads them: "0,2,3".
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Quota in µs per period for `cpus` cores (at least the kernel's minimum of 1 ms).
pub fn quota_us(cpus: f64) -> u64 {
    ((cpus * PERIOD_US as f64).round() as u64).max(1000)
}

fn write(path: &Path, value: &str) -> Result<(), LabError> {
    fs::write(path, value).map_err(|e| LabError::Files {
        path: path.to_path_buf(),
        source: e,
    })
}

fn read(path: &Path) -> Result<String, LabError> {
    fs::read_to_string(path).map_err(|e| LabError::Files {
        path: path.to_path_buf(),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_microseconds_per_period() {
        assert_eq!(quota_us(0.25), 25_000);
        assert_eq!(quota_us(2.0), 200_000);
        assert_eq!(quota_us(0.001), 1000);
    }

    #[test]
    fn a_group_is_created_limited_and_removed() {
        // The lab limits every role with cgroups: where they cannot be written, it cannot run.
        let kind = Cgroups::detect().unwrap_or_else(|e| {
            panic!("cgroups are not writable here ({e}); the lab needs them: run as root with /sys/fs/cgroup writable")
        });
        let limits = Limits {
            cpus: Some(0.5),
            cpuset: Some(vec![0]),
            memory_mib: Some(64),
        };
        let name = format!("unit-{}", std::process::id());
        let g = Cgroup::create(&kind, &name, &limits).unwrap();
        let dirs = g.dirs().to_vec();
        let quota = match kind {
            Cgroups::V2 => read(&dirs[0].join("cpu.max")).unwrap(),
            Cgroups::V1 => read(&dirs[0].join("cpu.cfs_quota_us")).unwrap(),
        };
        assert!(quota.starts_with("50000"), "{quota}");
        assert_eq!(g.cpu_ns_with(&|p| fs::read_to_string(p).ok()), Some(0));
        assert!(g.pids().is_empty());
        drop(g);
        assert!(dirs.iter().all(|d| !d.exists()));
    }
}
