//! Sampling every role of a rig on a timer, on its own thread: CPU time (the cgroup's usage, or
//! the process group's /proc stat), memory (RSS of the group, and the cgroup's working set),
//! bytes in and out (the group's `/proc/PID/io`, or its veth's counters in a namespace) and open
//! inbound connections. Files are read through a function, so tests feed fixtures; the figures
//! over a window (the steady state of a step) come from [`summarize`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::cgroup::CgroupFiles;
use crate::process::group_members;
use crate::sample;

/// What to watch for one role.
#[derive(Debug, Clone)]
pub struct Watch {
    pub role: String,
    /// The role's process group (its leader's pid).
    pub pgid: u32,
    pub cgroup: Option<CgroupFiles>,
    /// The port it accepts connections on.
    pub port: Option<u16>,
    /// Read bytes from this interface of the root namespace instead of `/proc/PID/io`
    /// (the host end of the role's veth: its "rx" is what the role sent).
    pub veth: Option<String>,
}

/// One reading of one role.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub t_ms: u64,
    pub cpu_ns: u64,
    pub rss_bytes: u64,
    pub working_set_bytes: Option<u64>,
    /// Bytes received and sent, cumulative.
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub connections: u64,
}

/// How a role's established connections are counted.
pub enum Connections<'a> {
    /// Counts by local port, from sock_diag (the root namespace, once per tick).
    ByPort(&'a HashMap<u16, u64>),
    /// The TCP table text of the role's own namespace (`/proc/PID/net/tcp`).
    Table(&'a str),
    Unknown,
}

/// Reads one role now. `read` returns a file's text (real files, or fixtures in tests);
/// `members` lists the processes of a group.
pub fn read_role(
    w: &Watch,
    t_ms: u64,
    read: &dyn Fn(&str) -> Option<String>,
    members: &[u32],
    connections: Connections,
    clk_tck: u64,
) -> Sample {
    let mut s = Sample {
        t_ms,
        cpu_ns: 0,
        rss_bytes: 0,
        working_set_bytes: None,
        rx_bytes: 0,
        tx_bytes: 0,
        connections: 0,
    };
    let mut proc_cpu = 0;
    for pid in members {
        if let Some(stat) = read(&format!("/proc/{pid}/stat")) {
            proc_cpu += sample::proc_cpu_ns(&stat, clk_tck).unwrap_or(0);
        }
        if let Some(status) = read(&format!("/proc/{pid}/status")) {
            s.rss_bytes += sample::proc_rss_bytes(&status).unwrap_or(0);
        }
        if w.veth.is_none() {
            if let Some((r, t)) =
                read(&format!("/proc/{pid}/io")).and_then(|io| sample::proc_io_bytes(&io).ok())
            {
                s.rx_bytes += r;
                s.tx_bytes += t;
            }
        }
    }
    s.cpu_ns = w
        .cgroup
        .as_ref()
        .and_then(|g| g.cpu_ns_with(read))
        .unwrap_or(proc_cpu);
    s.working_set_bytes = w.cgroup.as_ref().and_then(|g| g.working_set_with(read));
    if let Some(veth) = &w.veth {
        if let Some((rx, tx)) =
            read("/proc/net/dev").and_then(|d| sample::net_dev_bytes(&d, veth).ok())
        {
            // The host end receives what the role sends.
            s.rx_bytes = tx;
            s.tx_bytes = rx;
        }
    }
    if let Some(port) = w.port {
        s.connections = match connections {
            Connections::ByPort(counts) => counts.get(&port).copied().unwrap_or(0),
            // The lab listens on IPv4 only (127.0.0.1, or 10.213.N.2 in a namespace).
            Connections::Table(t) => sample::established_connections(t, Some(port)),
            Connections::Unknown => 0,
        };
    }
    s
}

/// Samples taken on a thread until [`Sampler::finish`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Sampled>,
}

/// Everything a sampler read.
#[derive(Debug, Default)]
pub struct Sampled {
    /// Samples per role, in time order.
    pub roles: HashMap<String, Vec<Sample>>,
    /// CPU time the sampling thread used, and over how long.
    pub own_cpu_ns: u64,
    pub wall_ns: u64,
}

impl Sampler {
    pub fn start(watches: Vec<Watch>, interval: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("sampler".into())
            .spawn(move || sample_loop(&watches, interval, &flag))
            .expect("a thread can be started");
        Sampler { stop, handle }
    }

    /// Takes a last sample and returns them all.
    pub fn finish(self) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn sample_loop(watches: &[Watch], interval: Duration, stop: &AtomicBool) -> Sampled {
    // SAFETY: sysconf has no preconditions.
    let clk_tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let started = std::time::Instant::now();
    let cpu_before = thread_cpu_ns();
    let mut out = Sampled::default();
    let mut next = std::time::Instant::now();
    loop {
        let t_ms = now_ms();
        let by_port = if watches.iter().any(|w| w.veth.is_none()) {
            crate::sockdiag::established_by_port().ok()
        } else {
            None
        };
        for w in watches {
            let mut members = w.cgroup.as_ref().map(|g| g.pids()).unwrap_or_default();
            if members.is_empty() {
                members = group_members(w.pgid);
            }
            let own_tcp = match &w.veth {
                Some(_) => read(&format!("/proc/{}/net/tcp", w.pgid)),
                None => None,
            };
            let conns = match (&own_tcp, &by_port) {
                (Some(t), _) => Connections::Table(t),
                (None, Some(c)) => Connections::ByPort(c),
                (None, None) => Connections::Unknown,
            };
            let s = read_role(w, t_ms, &read, &members, conns, clk_tck);
            out.roles.entry(w.role.clone()).or_default().push(s);
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        next += interval;
        // Sleep in short pieces so that finish() is prompt.
        while std::time::Instant::now() < next && !stop.load(Ordering::Relaxed) {
            let left = next.saturating_duration_since(std::time::Instant::now());
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
    out.own_cpu_ns = thread_cpu_ns() - cpu_before;
    out.wall_ns = started.elapsed().as_nanos() as u64;
    out
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A role's use over a window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Samples inside the window.
    pub samples: usize,
    pub cpu_millicores_avg: f64,
    /// The busiest interval.
    pub cpu_millicores_max: f64,
    pub rss_mib_avg: f64,
    pub rss_mib_max: f64,
    pub working_set_mib_avg: Option<f64>,
    pub working_set_mib_max: Option<f64>,
    pub rx_bytes_per_sec: f64,
    pub tx_bytes_per_sec: f64,
    pub connections_avg: f64,
    pub connections_max: u64,
}

/// Averages and maxima of the samples between `from_ms` and `to_ms` (inclusive). Rates come
/// from the first and last sample inside; with fewer than two samples there is no rate.
pub fn summarize(samples: &[Sample], from_ms: u64, to_ms: u64) -> Usage {
    let inside: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_ms >= from_ms && s.t_ms <= to_ms)
        .collect();
    let n = inside.len();
    if n == 0 {
        return Usage::default();
    }
    const MIB: f64 = 1024.0 * 1024.0;
    let avg = |f: &dyn Fn(&Sample) -> f64| inside.iter().map(|s| f(s)).sum::<f64>() / n as f64;
    let max = |f: &dyn Fn(&Sample) -> f64| inside.iter().map(|s| f(s)).fold(0.0, f64::max);
    let mut u = Usage {
        samples: n,
        rss_mib_avg: avg(&|s| s.rss_bytes as f64 / MIB),
        rss_mib_max: max(&|s| s.rss_bytes as f64 / MIB),
        connections_avg: avg(&|s| s.connections as f64),
        connections_max: inside.iter().map(|s| s.connections).max().unwrap_or(0),
        ..Usage::default()
    };
    if inside.iter().all(|s| s.working_set_bytes.is_some()) {
        u.working_set_mib_avg = Some(avg(&|s| s.working_set_bytes.unwrap_or(0) as f64 / MIB));
        u.working_set_mib_max = Some(max(&|s| s.working_set_bytes.unwrap_or(0) as f64 / MIB));
    }
    if n >= 2 {
        let (a, b) = (inside[0], inside[n - 1]);
        let wall_ns = (b.t_ms - a.t_ms) * 1_000_000;
        u.cpu_millicores_avg = sample::millicores(a.cpu_ns, b.cpu_ns, wall_ns);
        let secs = wall_ns as f64 / 1e9;
        if secs > 0.0 {
            u.rx_bytes_per_sec = b.rx_bytes.saturating_sub(a.rx_bytes) as f64 / secs;
            u.tx_bytes_per_sec = b.tx_bytes.saturating_sub(a.tx_bytes) as f64 / secs;
        }
        u.cpu_millicores_max = inside
            .windows(2)
            .map(|w| {
                sample::millicores(
                    w[0].cpu_ns,
                    w[1].cpu_ns,
                    (w[1].t_ms - w[0].t_ms) * 1_000_000,
                )
            })
            .fold(0.0, f64::max);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(files: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |p: &str| map.get(p).cloned()
    }

    #[test]
    fn a_process_group_is_read_from_fixture_files() {
        let stat =
            |ticks: u32| format!("{ticks} (nginx) S 1 7 7 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0");
        let read = fixture(&[
            ("/proc/7/stat", &stat(100)),
            ("/proc/8/stat", &stat(50)),
            ("/proc/7/status", "VmRSS:\t 1024 kB\n"),
            ("/proc/8/status", "VmRSS:\t 2048 kB\n"),
            ("/proc/7/io", "rchar: 10\nwchar: 20\n"),
            ("/proc/8/io", "rchar: 1\nwchar: 2\n"),
        ]);
        let tcp = "  sl local rem st\n 0: 0100007F:1F90 0100007F:D000 01 x\n 1: 0100007F:1F90 0100007F:D001 06 x\n 2: 0100007F:D002 0100007F:1F90 01 x\n";
        let w = Watch {
            role: "proxy".into(),
            pgid: 7,
            cgroup: None,
            port: Some(8080),
            veth: None,
        };
        let s = read_role(&w, 5, &read, &[7, 8], Connections::Table(tcp), 100);
        assert_eq!(s.cpu_ns, 1_500_000_000);
        assert_eq!(s.rss_bytes, 3 * 1024 * 1024);
        assert_eq!((s.rx_bytes, s.tx_bytes), (11, 22));
        assert_eq!(s.connections, 1, "one established connection on port 8080");
        assert_eq!(s.working_set_bytes, None);
    }

    #[test]
    fn a_window_averages_inside_it_only() {
        let s = |t_ms: u64, cpu_ms: u64, rss_mib: u64, rx: u64| Sample {
            t_ms,
            cpu_ns: cpu_ms * 1_000_000,
            rss_bytes: rss_mib << 20,
            working_set_bytes: Some(rss_mib << 20),
            rx_bytes: rx,
            tx_bytes: 2 * rx,
            connections: 4,
        };
        // Before the window: a burst that must not count.
        let samples = [
            s(0, 0, 100, 0),
            s(1000, 900, 10, 0),
            s(2000, 1150, 10, 1000),
            s(3000, 1400, 20, 2000),
            s(4000, 1900, 30, 3000),
            s(5000, 9000, 30, 9000),
        ];
        let u = summarize(&samples, 1000, 4000);
        assert_eq!(u.samples, 4);
        assert!((u.cpu_millicores_avg - 1000.0 / 3.0).abs() < 1e-6, "{u:?}");
        assert!((u.cpu_millicores_max - 500.0).abs() < 1e-6);
        assert!((u.rss_mib_avg - 17.5).abs() < 1e-9);
        assert_eq!(u.rss_mib_max, 30.0);
        assert_eq!(u.working_set_mib_max, Some(30.0));
        assert!((u.rx_bytes_per_sec - 1000.0).abs() < 1e-9);
        assert!((u.tx_bytes_per_sec - 2000.0).abs() < 1e-9);
        assert_eq!(u.connections_max, 4);
        assert_eq!(summarize(&samples, 10_000, 20_000), Usage::default());
    }

    #[test]
    fn the_sampler_agrees_with_proc_for_a_busy_process() {
        // A child that spins for a while: its CPU per the sampler matches /proc's own count.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let w = Watch {
            role: "spin".into(),
            pgid: pid,
            cgroup: None,
            port: None,
            veth: None,
        };
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let clk = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        std::thread::sleep(Duration::from_millis(300));
        let s = read_role(&w, now_ms(), &read, &[pid], Connections::Unknown, clk);
        let direct = sample::proc_cpu_ns(
            &std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap(),
            clk,
        )
        .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            s.cpu_ns > 100_000_000,
            "the spinning shell used CPU: {}",
            s.cpu_ns
        );
        assert!(
            direct >= s.cpu_ns && direct - s.cpu_ns <= 20_000_000,
            "{direct} vs {}",
            s.cpu_ns
        );
        assert!(s.rss_bytes > 0);
    }
}
