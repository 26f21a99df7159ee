//! Network namespaces for `isolation: netns`: each role in its own namespace, as a pod is,
//! joined to the root namespace by a veth pair (10.213.N.1 on the host end, 10.213.N.2 inside),
//! the root namespace routing between them. The host end's counters give a role's bytes in
//! and out. Everything is removed when dropped; IP forwarding is restored to what it was.
//!
//! A thread can also work inside a namespace ([`Entered`], [`within`]): the threads it starts
//! and the sockets it opens stay there. That is how the load leaves from inside an Istio
//! client pod and how an Envoy admin bound to a pod's own loopback is read.

use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use crate::LabError;

const FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Why a namespace could not be set up or entered.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// `ip ARGS` ran and failed: its arguments and what it said.
    #[error("`ip {args}` failed: {stderr}; isolation: netns needs root (or CAP_NET_ADMIN)")]
    Ip { args: String, stderr: String },
    #[error("cannot enable IP forwarding ({0}); isolation: netns needs root")]
    Forwarding(#[source] io::Error),
    #[error("cannot enter network namespace {name}: {source}")]
    Enter { name: String, source: io::Error },
    #[error("a reader inside {0} panicked")]
    ReaderPanicked(String),
}

/// The namespaces of one rig.
#[derive(Debug)]
pub struct Namespaces {
    /// Of the namespaces' names: `meshbench-<owner>-<n>`.
    owner: String,
    /// Of the interfaces' names (15 bytes at most).
    prefix: String,
    created: Vec<RoleNamespace>,
    forward_was: Option<String>,
}

/// One role's namespace.
#[derive(Debug, Clone)]
pub struct RoleNamespace {
    pub netns: String,
    /// The veth end in the root namespace.
    pub host_veth: String,
    /// The address of that end: the namespace's way to this machine.
    pub host_addr: IpAddr,
    /// The role's address inside its namespace.
    pub addr: IpAddr,
}

fn ip(args: &[&str]) -> Result<(), LabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| LabError::Missing {
            program: "ip".into(),
            hint: format!("install iproute2 ({e})"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetnsError::Ip {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into())
    }
}

impl Namespaces {
    /// `owner` starts with this process's id and is unique to it (a rig's id): the
    /// namespaces are named after it, so that [`remove_stale`] finds those of a run that was
    /// killed. `prefix` names the interfaces: short (they hold 15 bytes) and unique too.
    pub fn new(owner: &str, prefix: &str) -> Namespaces {
        Namespaces {
            owner: owner.to_string(),
            prefix: prefix.to_string(),
            created: Vec::new(),
            forward_was: None,
        }
    }

    /// Creates the namespace for the `n`-th role (n < 250).
    pub fn add(&mut self, n: usize) -> Result<RoleNamespace, LabError> {
        if self.forward_was.is_none() {
            let was = std::fs::read_to_string(FORWARD).unwrap_or_else(|_| "0".into());
            std::fs::write(FORWARD, "1").map_err(NetnsError::Forwarding)?;
            self.forward_was = Some(was);
        }
        let netns = format!("{NAME_PREFIX}{}-{n}", self.owner);
        let host_veth = format!("{}h{n}", self.prefix);
        let inner = format!("{}n{n}", self.prefix);
        let host_ip = format!("10.213.{n}.1");
        let addr = Ipv4Addr::new(10, 213, n as u8, 2);
        ip(&["netns", "add", &netns])?;
        let namespace = RoleNamespace {
            netns: netns.clone(),
            host_veth: host_veth.clone(),
            host_addr: IpAddr::V4(Ipv4Addr::new(10, 213, n as u8, 1)),
            addr: IpAddr::V4(addr),
        };
        self.created.push(namespace.clone());
        ip(&[
            "link", "add", &host_veth, "type", "veth", "peer", "name", &inner,
        ])?;
        ip(&["link", "set", &inner, "netns", &netns])?;
        ip(&["addr", "add", &format!("{host_ip}/24"), "dev", &host_veth])?;
        ip(&["link", "set", &host_veth, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", netns.as_str(), "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{addr}/24"), "dev", &inner])?;
        inside(&["link", "set", &inner, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        inside(&["route", "add", "default", "via", &host_ip])?;
        Ok(namespace)
    }
}

/// How every namespace made here is named: `meshbench-<pid>-...`.
pub const NAME_PREFIX: &str = "meshbench-";

/// Removes the namespaces (and with them their veth pairs and Istio's capture) that a run
/// killed outright left behind: `meshbench-<pid>-*` of processes that no longer exist.
pub fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(owner) = name
            .strip_prefix(NAME_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{owner}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", &name]).output();
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for m in self.created.drain(..).rev() {
            // Deleting the namespace deletes its veth end, and so the pair.
            let _ = Command::new("ip")
                .args(["link", "del", &m.host_veth])
                .output();
            let _ = Command::new("ip").args(["netns", "del", &m.netns]).output();
        }
        if let Some(was) = self.forward_was.take() {
            let _ = std::fs::write(FORWARD, was.trim());
        }
    }
}

/// The calling thread inside a network namespace made with `ip netns add` until dropped;
/// the threads it starts meanwhile, and the sockets they open, stay inside. Dropping it puts
/// the thread back where it was.
pub struct Entered {
    home: libc::c_int,
}

fn open_ns(path: &str) -> io::Result<libc::c_int> {
    let path = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a plain open(2) of a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

impl Entered {
    /// Moves the calling thread into namespace `name` (needs CAP_SYS_ADMIN).
    pub fn new(name: &str) -> Result<Entered, LabError> {
        let fail = |source: io::Error| NetnsError::Enter {
            name: name.to_string(),
            source,
        };
        let home = open_ns("/proc/thread-self/ns/net").map_err(fail)?;
        let target = match open_ns(&format!("/var/run/netns/{name}")) {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: closing the descriptor opened above.
                unsafe { libc::close(home) };
                return Err(fail(e).into());
            }
        };
        // SAFETY: setns(2) on a namespace descriptor; only this thread moves.
        let moved = unsafe { libc::setns(target, libc::CLONE_NEWNET) };
        let err = io::Error::last_os_error();
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(target) };
        if moved != 0 {
            // SAFETY: closing the descriptor opened above.
            unsafe { libc::close(home) };
            return Err(fail(err).into());
        }
        Ok(Entered { home })
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        // SAFETY: back to the namespace this thread was in, then the descriptor is closed.
        unsafe {
            libc::setns(self.home, libc::CLONE_NEWNET);
            libc::close(self.home);
        }
    }
}

/// Runs `f` on a thread of its own inside namespace `name` (or here when `None`) and returns
/// what it returns.
pub fn within<T: Send>(name: Option<&str>, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    let Some(name) = name else {
        return Ok(f());
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let _inside = Entered::new(name)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(NetnsError::ReaderPanicked(name.to_string()).into()))
    })
}
