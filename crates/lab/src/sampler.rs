//! Sampling every role of a rig on a timer, on its own thread: CPU time (the cgroup's usage, or
//! the process group's /proc stat), memory (RSS of the group, and the cgroup's working set),
//! bytes in and out (the group's `/proc/PID/io`, or its veth's counters in a namespace) and open
//! inbound connections. Files are read through a function, so tests feed fixtures; the figures
//! over a window (the steady state of a step) come from [`summarize`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use meshbench_results::usage::Figure;
use meshbench_results::{Role, Sample, Stop, Usage};

use crate::cgroup::CgroupFiles;
use crate::process::group_members;
use crate::sample;
pub use meshbench_results::ProxyCounters;

/// The interfaces of this thread's network namespace, where the host ends of the roles'
/// veths are. Not `/proc/net/dev`: that is the main thread's namespace, which is the client
/// pod's while the load leaves from one (`netns::Entered`).
const HOST_NET_DEV: &str = "/proc/thread-self/net/dev";
/// What to watch for one role.
#[derive(Debug, Clone)]
pub struct Watch {
    pub role: Role,
    /// The role's process group (its leader's pid).
    pub pgid: u32,
    pub cgroup: Option<CgroupFiles>,
    /// The port it accepts connections on.
    pub port: Option<u16>,
    /// The port of the next hop it connects to (none for the backend).
    pub upstream_port: Option<u16>,
    /// Read bytes from this interface of the root namespace instead of `/proc/PID/io`
    /// (the host end of the role's veth: its "rx" is what the role sent).
    pub veth: Option<String>,
}

/// A loopback role's connections and cumulative bytes, from sock_diag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Net {
    pub connections: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// Reads one role now. `read` returns a file's text (real files, or fixtures in tests);
/// `members` lists the processes of a group; `net` is what sock_diag said about a role on the
/// shared loopback (a role in its own namespace is read from its veth and TCP table instead).
pub fn read_role(
    w: &Watch,
    t_ms: u64,
    read: &dyn Fn(&str) -> Option<String>,
    members: &[u32],
    net: Option<Net>,
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
    }
    s.cpu_ns = w
        .cgroup
        .as_ref()
        .and_then(|g| g.cpu_ns_with(read))
        .unwrap_or(proc_cpu);
    s.working_set_bytes = w.cgroup.as_ref().and_then(|g| g.working_set_with(read));
    match (&w.veth, net) {
        (Some(veth), _) => {
            if let Some((rx, tx)) =
                read(HOST_NET_DEV).and_then(|d| sample::net_dev_bytes(&d, veth).ok())
            {
                // The host end receives what the role sends.
                s.rx_bytes = tx;
                s.tx_bytes = rx;
            }
            if let (Some(port), Some(t)) = (w.port, read(&format!("/proc/{}/net/tcp", w.pgid))) {
                // The lab listens on IPv4 only (10.213.N.2 in a namespace).
                s.connections = sample::established_connections(&t, Some(port));
            }
        }
        (None, Some(n)) => {
            s.connections = n.connections;
            s.rx_bytes = n.rx_bytes;
            s.tx_bytes = n.tx_bytes;
        }
        (None, None) => {}
    }
    s
}

/// Adds to each loopback role's totals the bytes its connections moved since the last look:
/// its inbound connections (local port = its port) and its outbound ones (remote port = its
/// upstream's port). `last` holds each connection's counters at the last look and is replaced;
/// bytes a connection moved after the last look and before it closed are not seen.
pub fn attribute_bytes(
    conns: &[crate::sockdiag::Conn],
    last: &mut HashMap<u64, (u64, u64)>,
    watches: &[Watch],
    totals: &mut [Net],
) {
    let mut seen = HashMap::with_capacity(conns.len());
    for t in totals.iter_mut() {
        t.connections = 0;
    }
    for c in conns {
        let (r0, a0) = last.get(&c.cookie).copied().unwrap_or((0, 0));
        let (dr, da) = (
            c.bytes_received.saturating_sub(r0),
            c.bytes_acked.saturating_sub(a0),
        );
        seen.insert(c.cookie, (c.bytes_received, c.bytes_acked));
        for (w, t) in watches.iter().zip(totals.iter_mut()) {
            if w.veth.is_some() {
                continue;
            }
            let inbound = w.port == Some(c.sport);
            if inbound || (w.upstream_port.is_some() && w.upstream_port == Some(c.dport)) {
                t.rx_bytes += dr;
                t.tx_bytes += da;
            }
            if inbound {
                t.connections += 1;
            }
        }
    }
    *last = seen;
}

/// Samples taken on a thread until [`Sampler::finish`].
pub struct Sampler {
    stop: Stop,
    latest: Latest,
    handle: JoinHandle<Sampled>,
}

/// The newest reading of each role, for whoever watches the run live.
type Latest = Arc<Mutex<Vec<(Role, Sample)>>>;

/// Everything a sampler read.
#[derive(Debug, Default)]
pub struct Sampled {
    /// Samples per role, in time order.
    pub roles: HashMap<Role, Vec<Sample>>,
    /// CPU time the sampling thread used, and over how long.
    pub own_cpu_ns: u64,
    pub wall_ns: u64,
}

impl Sampler {
    pub fn start(watches: Vec<Watch>, interval: Duration) -> Sampler {
        let stop = Stop::new();
        let flag = stop.clone();
        let latest = Latest::default();
        let newest = latest.clone();
        let handle = std::thread::Builder::new()
            .name("sampler".into())
            .spawn(move || sample_loop(&watches, interval, &flag, &newest))
            .expect("a thread can be started");
        Sampler {
            stop,
            latest,
            handle,
        }
    }

    /// The newest reading of each role (cumulative CPU and bytes, memory now), by the role's
    /// word in results (the live stream's).
    pub fn latest(&self) -> Vec<(Role, Sample)> {
        self.latest
            .lock()
            .map(|l| l.iter().map(|(r, s)| (r.clone(), *s)).collect())
            .unwrap_or_default()
    }

    /// Takes a last sample and returns them all.
    pub fn finish(self) -> Sampled {
        self.stop.request();
        self.handle.join().unwrap_or_default()
    }
}

fn sample_loop(watches: &[Watch], interval: Duration, stop: &Stop, latest: &Latest) -> Sampled {
    // SAFETY: sysconf has no preconditions.
    let clk_tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let started = std::time::Instant::now();
    let cpu_before = thread_cpu_ns();
    let mut out = Sampled::default();
    let mut next = std::time::Instant::now();
    let mut last = HashMap::new();
    let mut totals = vec![Net::default(); watches.len()];
    let loopback = watches.iter().any(|w| w.veth.is_none());
    loop {
        let t_ms = now_ms();
        let diag = if loopback {
            crate::sockdiag::established().ok()
        } else {
            None
        };
        if let Some(conns) = &diag {
            attribute_bytes(conns, &mut last, watches, &mut totals);
        }
        for (i, w) in watches.iter().enumerate() {
            let mut members = w.cgroup.as_ref().map(|g| g.pids()).unwrap_or_default();
            if members.is_empty() {
                members = group_members(w.pgid);
            }
            let net = diag.as_ref().map(|_| totals[i]);
            let s = read_role(w, t_ms, &read, &members, net, clk_tck);
            out.roles.entry(w.role.clone()).or_default().push(s);
        }
        if let Ok(mut newest) = latest.lock() {
            newest.clear();
            newest.extend(watches.iter().filter_map(|w| {
                let last = out.roles.get(&w.role).and_then(|s| s.last())?;
                Some((w.role.clone(), *last))
            }));
        }
        if stop.requested() {
            break;
        }
        next += interval;
        // finish() asks the stop: the last sample follows within Stop::sleep's 20 ms.
        stop.sleep(next.saturating_duration_since(std::time::Instant::now()));
    }
    out.own_cpu_ns = thread_cpu_ns() - cpu_before;
    out.wall_ns = started.elapsed().as_nanos() as u64;
    out
}

/// The clock of a [`Sample`]'s `t_ms`: the results crate's, so that the live stream reads it
/// without the lab.
pub use meshbench_results::usage::now_ms;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Averages and maxima of the samples between `from_ms` and `to_ms` (inclusive). Rates come
/// from the first and last sample inside; with fewer than two samples there is no rate.
/// What [`summarize`] could not measure, and why: CPU and bytes are differences between two
/// samples, so a window that held fewer than two says nothing of them (its zeros are no
/// reading); nor of anything else when it held none.
pub fn unmeasured(usage: &Usage) -> std::collections::BTreeMap<Figure, String> {
    let why = match usage.samples {
        0 => "no sample in the steady window; lengthen the step or lower sample_interval_ms",
        1 => "one sample in the steady window, and CPU and bytes are differences of two; lengthen the step or lower sample_interval_ms",
        _ => return Default::default(),
    };
    let figures: &[Figure] = match usage.samples {
        0 => &Figure::ALL,
        _ => &[Figure::Cpu, Figure::Rx, Figure::Tx],
    };
    figures.iter().map(|f| (*f, why.to_string())).collect()
}

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
        ]);
        let w = Watch {
            role: Role::from_word("proxy"),
            pgid: 7,
            cgroup: None,
            port: Some(8080),
            upstream_port: None,
            veth: None,
        };
        let net = Net {
            connections: 3,
            rx_bytes: 11,
            tx_bytes: 22,
        };
        let s = read_role(&w, 5, &read, &[7, 8], Some(net), 100);
        assert_eq!(s.cpu_ns, 1_500_000_000);
        assert_eq!(s.rss_bytes, 3 * 1024 * 1024);
        assert_eq!((s.rx_bytes, s.tx_bytes, s.connections), (11, 22, 3));
        assert_eq!(s.working_set_bytes, None);
    }

    #[test]
    fn a_netns_role_is_read_from_its_veth_and_tcp_table() {
        let read = fixture(&[
            (HOST_NET_DEV, "Inter-|\n face |bytes\n mbh1: 500 5 0 0 0 0 0 0 900 9 0 0 0 0 0 0\n"),
            (
                "/proc/7/net/tcp",
                "  sl local rem st\n 0: 0200D50A:1F90 0100D50A:D000 01 x\n 1: 0200D50A:1F90 0100D50A:D001 06 x\n",
            ),
        ]);
        let w = Watch {
            role: Role::from_word("server_proxy"),
            pgid: 7,
            cgroup: None,
            port: Some(8080),
            upstream_port: None,
            veth: Some("mbh1".into()),
        };
        let s = read_role(&w, 5, &read, &[], None, 100);
        assert_eq!(
            (s.rx_bytes, s.tx_bytes),
            (900, 500),
            "the host end's tx is the role's rx"
        );
        assert_eq!(s.connections, 1);
    }

    #[test]
    fn bytes_are_attributed_to_the_role_on_either_end_of_a_connection() {
        use crate::sockdiag::Conn;
        let conn = |sport, dport, cookie, received, acked| Conn {
            sport,
            dport,
            cookie,
            bytes_received: received,
            bytes_acked: acked,
        };
        let watch = |role: &str, port, upstream| Watch {
            role: Role::from_word(role),
            pgid: 1,
            cgroup: None,
            port: Some(port),
            upstream_port: upstream,
            veth: None,
        };
        // client -> proxy (9000) -> backend (9001), one connection on each link, seen twice.
        let watches = [
            watch("proxy", 9000, Some(9001)),
            watch("backend", 9001, None),
        ];
        let mut last = HashMap::new();
        let mut totals = vec![Net::default(); 2];
        let first = [
            conn(50000, 9000, 1, 0, 0),      // the client's end
            conn(9000, 50000, 2, 100, 1000), // the proxy's inbound end
            conn(50001, 9001, 3, 1000, 100), // the proxy's outbound end
            conn(9001, 50001, 4, 100, 1000), // the backend's end
        ];
        attribute_bytes(&first, &mut last, &watches, &mut totals);
        assert_eq!(
            totals[0],
            Net {
                connections: 1,
                rx_bytes: 1100,
                tx_bytes: 1100
            }
        );
        assert_eq!(
            totals[1],
            Net {
                connections: 1,
                rx_bytes: 100,
                tx_bytes: 1000
            }
        );
        let second = [
            conn(9000, 50000, 2, 150, 1500),
            conn(9001, 50001, 4, 150, 1500),
        ];
        attribute_bytes(&second, &mut last, &watches, &mut totals);
        assert_eq!(totals[0].rx_bytes, 1150, "only the delta of connection 2");
        assert_eq!(
            totals[1],
            Net {
                connections: 1,
                rx_bytes: 150,
                tx_bytes: 1500
            }
        );
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
        assert!(unmeasured(&u).is_empty());
        // One sample in the window: its memory is a reading, its CPU and bytes are not (a
        // difference needs two), and say so rather than store zeros as figures.
        let one = summarize(&samples, 2000, 2500);
        assert_eq!(one.samples, 1);
        let missing = unmeasured(&one);
        assert_eq!(
            missing.keys().copied().collect::<Vec<_>>(),
            [Figure::Cpu, Figure::Rx, Figure::Tx]
        );
        assert!(missing[&Figure::Cpu].contains("one sample"), "{missing:?}");
        assert_eq!(unmeasured(&Usage::default()).len(), Figure::ALL.len());
    }

    #[test]
    fn the_sampler_agrees_with_proc_for_a_busy_process() {
        // A child that spins (bounded, but far longer than the 300 ms it is read after: a
        // finished child is a zombie without a resident set): its CPU per the sampler matches
        // /proc's own count.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 20000000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let w = Watch {
            role: Role::from_word("spin"),
            pgid: pid,
            cgroup: None,
            port: None,
            upstream_port: None,
            veth: None,
        };
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let clk = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        std::thread::sleep(Duration::from_millis(300));
        let s = read_role(&w, now_ms(), &read, &[pid], None, clk);
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
