//! Reading what a role of the system under test uses: CPU time, memory, network bytes and open
//! connections, from `/proc` and from cgroup files (v1 and v2). Every reader is a pure function
//! of the file's text, so tests feed fixtures and the lab feeds the real files; the experiment
//! runner (next stage) turns two readings into millicores and MiB over the steady-state window.

use thiserror::Error;

/// A file that does not say what it should.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SampleError {
    #[error("{file}: {what}")]
    Malformed { file: &'static str, what: String },
}

fn malformed(file: &'static str, what: impl Into<String>) -> SampleError {
    SampleError::Malformed {
        file,
        what: what.into(),
    }
}

/// User + system CPU time of a process, in nanoseconds, from `/proc/PID/stat`. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
pub fn proc_cpu_ns(stat: &str, clock_ticks_per_sec: u64) -> Result<u64, SampleError> {
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| malformed("/proc/PID/stat", "no ')' after the command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let tick = |i: usize| -> Result<u64, SampleError> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| malformed("/proc/PID/stat", format!("field {} is not a number", i + 3)))
    };
    let ticks = tick(11)? + tick(12)?;
    Ok(ticks * 1_000_000_000 / clock_ticks_per_sec.max(1))
}

/// Resident set size in bytes from `/proc/PID/status` (`VmRSS: N kB`).
pub fn proc_rss_bytes(status: &str) -> Result<u64, SampleError> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| malformed("/proc/PID/status", "no VmRSS line"))
}

/// The value of `key` in a flat `key value` file (cgroup `cpu.stat`, `memory.stat`).
fn keyed(text: &str, key: &str, file: &'static str) -> Result<u64, SampleError> {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse::<u64>().ok())?
        })
        .ok_or_else(|| malformed(file, format!("no '{key}' line")))
}

fn number(text: &str, file: &'static str) -> Result<u64, SampleError> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| malformed(file, format!("'{}' is not a number", text.trim())))
}

/// cgroup v2: CPU time in nanoseconds from `cpu.stat` (`usage_usec`).
pub fn cgroup2_cpu_ns(cpu_stat: &str) -> Result<u64, SampleError> {
    Ok(keyed(cpu_stat, "usage_usec", "cpu.stat")? * 1000)
}

/// cgroup v2: working set in bytes, as Kubernetes computes it: `memory.current` minus
/// `inactive_file` from `memory.stat` (page cache the kernel can drop at no cost).
pub fn cgroup2_working_set(memory_current: &str, memory_stat: &str) -> Result<u64, SampleError> {
    let current = number(memory_current, "memory.current")?;
    let inactive = keyed(memory_stat, "inactive_file", "memory.stat")?;
    Ok(current.saturating_sub(inactive))
}

/// cgroup v1: CPU time in nanoseconds from `cpuacct.usage`.
pub fn cgroup1_cpu_ns(cpuacct_usage: &str) -> Result<u64, SampleError> {
    number(cpuacct_usage, "cpuacct.usage")
}

/// cgroup v1: working set in bytes: `memory.usage_in_bytes` minus `total_inactive_file`.
pub fn cgroup1_working_set(usage_in_bytes: &str, memory_stat: &str) -> Result<u64, SampleError> {
    let usage = number(usage_in_bytes, "memory.usage_in_bytes")?;
    let inactive = keyed(memory_stat, "total_inactive_file", "memory.stat")?;
    Ok(usage.saturating_sub(inactive))
}

/// Received and sent bytes of one interface from `/proc/net/dev` (or `/proc/PID/net/dev`, which
/// is the process's network namespace).
pub fn net_dev_bytes(net_dev: &str, interface: &str) -> Result<(u64, u64), SampleError> {
    for line in net_dev.lines().skip(2) {
        let Some((name, counters)) = line.split_once(':') else {
            continue;
        };
        if name.trim() != interface {
            continue;
        }
        let f: Vec<u64> = counters
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        if f.len() < 9 {
            return Err(malformed(
                "/proc/net/dev",
                format!("{interface}: too few counters"),
            ));
        }
        return Ok((f[0], f[8]));
    }
    Err(malformed(
        "/proc/net/dev",
        format!("no interface {interface}"),
    ))
}

/// Established TCP connections from `/proc/net/tcp` or `tcp6`, optionally only those whose
/// local port is `port` (a server's accepted connections).
pub fn established_connections(proc_net_tcp: &str, port: Option<u16>) -> u64 {
    proc_net_tcp
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (Some(local), Some(state)) = (f.get(1), f.get(3)) else {
                return false;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            *state == "01" && port.is_none_or(|p| local_port == Some(p))
        })
        .count() as u64
}

/// CPU use between two readings, in millicores (1000 = one core busy the whole time).
pub fn millicores(cpu_ns_before: u64, cpu_ns_after: u64, wall_ns: u64) -> f64 {
    if wall_ns == 0 {
        return 0.0;
    }
    cpu_ns_after.saturating_sub(cpu_ns_before) as f64 * 1000.0 / wall_ns as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (nginx: worker (x)) S 1 4242 4242 0 -1 4194624 1200 0 0 0 250 75 0 0 20 0 1 0 1000 20000000 1500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn proc_figures_from_fixtures() {
        assert_eq!(proc_cpu_ns(STAT, 100).unwrap(), 3_250_000_000);
        assert!(proc_cpu_ns("4242 nginx S 1", 100).is_err());
        assert!(proc_cpu_ns("1 (x) S 1 2", 100).is_err());
        let status = "Name:\tnginx\nVmPeak:\t  20000 kB\nVmRSS:\t    6144 kB\nThreads:\t1\n";
        assert_eq!(proc_rss_bytes(status).unwrap(), 6144 * 1024);
        assert!(proc_rss_bytes("Name: x\n").is_err());
    }

    #[test]
    fn cgroup_v2_figures_from_fixtures() {
        let cpu = "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnr_periods 10\nnr_throttled 2\nthrottled_usec 30000\n";
        assert_eq!(cgroup2_cpu_ns(cpu).unwrap(), 1_500_000_000);
        let stat = "anon 10485760\nfile 4194304\nactive_file 1048576\ninactive_file 3145728\n";
        assert_eq!(
            cgroup2_working_set("20971520\n", stat).unwrap(),
            20971520 - 3145728
        );
        assert!(cgroup2_working_set("max\n", stat).is_err());
        assert!(cgroup2_cpu_ns("nr_periods 1\n").is_err());
    }

    #[test]
    fn cgroup_v1_figures_from_fixtures() {
        assert_eq!(cgroup1_cpu_ns("987654321\n").unwrap(), 987654321);
        let stat = "cache 4096\nrss 8192\ntotal_cache 4096\ntotal_inactive_file 2048\n";
        assert_eq!(cgroup1_working_set("16384\n", stat).unwrap(), 14336);
        // The per-cgroup `inactive_file` line must not be mistaken for the hierarchical one.
        assert!(cgroup1_working_set("16384\n", "inactive_file 5\n").is_err());
    }

    #[test]
    fn network_counters_and_connections_from_fixtures() {
        let dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 123456     100    0    0    0     0          0         0   654321     90    0    0    0     0       0          0\n  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n";
        assert_eq!(net_dev_bytes(dev, "lo").unwrap(), (123456, 654321));
        assert_eq!(net_dev_bytes(dev, "eth0").unwrap(), (1000, 2000));
        assert!(net_dev_bytes(dev, "veth9").is_err());
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n";
        assert_eq!(established_connections(tcp, None), 2);
        assert_eq!(established_connections(tcp, Some(8080)), 1);
        assert_eq!(established_connections(tcp, Some(9)), 0);
    }

    #[test]
    fn the_real_proc_files_of_this_process() {
        // USER_HZ is 100 on every Linux architecture this runs on.
        let read = |f: &str| std::fs::read_to_string(f).unwrap();
        // Spins until this thread has used 300 ms of CPU by the kernel's own clock (on a busy
        // machine that takes longer than 300 ms of wall time), bounded at 20 s.
        let thread_cpu_ns = || {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let before = proc_cpu_ns(&read("/proc/self/stat"), 100).unwrap();
        let (spun_from, start) = (thread_cpu_ns(), std::time::Instant::now());
        let mut x = 0u64;
        while thread_cpu_ns() - spun_from < 300_000_000
            && start.elapsed() < std::time::Duration::from_secs(20)
        {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = proc_cpu_ns(&read("/proc/self/stat"), 100).unwrap();
        assert!(
            after - before >= 250_000_000,
            "{} ns of CPU read after 300 ms of CPU spinning",
            after - before
        );
        assert!(proc_rss_bytes(&read("/proc/self/status")).unwrap() > 1 << 20);
        let (rx, tx) = net_dev_bytes(&read("/proc/self/net/dev"), "lo").unwrap();
        // Every byte sent on loopback is received on loopback.
        assert!(
            rx.abs_diff(tx) <= rx / 100 + 1_000_000,
            "lo rx {rx} tx {tx}"
        );
    }

    #[test]
    fn millicores_of_two_readings() {
        assert_eq!(millicores(0, 250_000_000, 1_000_000_000), 250.0);
        assert_eq!(millicores(5, 5, 1_000_000_000), 0.0);
        assert_eq!(millicores(0, 1, 0), 0.0);
    }
}
