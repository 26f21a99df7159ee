//! A monotonic clock in nanoseconds since an arbitrary origin.
//!
//! The engine keeps every time as a `u64` of nanoseconds so that schedules, histograms and
//! deadlines are plain integers: pacers are pure functions of these numbers and are tested
//! without any clock at all.

use std::time::Instant;

/// Monotonic nanoseconds since `origin`.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    /// CLOCK_MONOTONIC at `origin`: run-clock times converted for another process (an agent
    /// tells its coordinator when it started, in this clock).
    origin_monotonic: u64,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
            origin_monotonic: monotonic_ns(),
        }
    }

    /// A time of this clock on CLOCK_MONOTONIC.
    pub fn to_monotonic(&self, t: u64) -> u64 {
        self.origin_monotonic + t
    }

    /// A CLOCK_MONOTONIC time on this clock (0 if before its start).
    pub fn from_monotonic(&self, mono: u64) -> u64 {
        mono.saturating_sub(self.origin_monotonic)
    }

    /// Nanoseconds elapsed since the clock started.
    #[inline]
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// Reads clock `id` in nanoseconds (0 if the kernel refuses). Async-signal-safe.
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime is async-signal-safe.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds. Async-signal-safe (a signal handler may call it).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Time the calling thread spent runnable but waiting for a CPU, in nanoseconds (the second
/// field of `/proc/thread-self/schedstat`); `None` where the kernel does not keep it. Other
/// processes on the generator's CPU show here, not in its CPU time.
pub fn thread_run_delay_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Process-wide resource usage: (user + system CPU seconds, peak RSS in bytes).
pub fn process_usage() -> (f64, u64) {
    // SAFETY: zeroed rusage is a valid value, getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return (0.0, 0);
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (
        secs(ru.ru_utime) + secs(ru.ru_stime),
        ru.ru_maxrss as u64 * 1024,
    )
}

/// Asks the kernel to fire this thread's timers within `slack_ns` of their deadline (the default
/// is 50 µs, too coarse for a pacer that promises a schedule lag under 100 µs).
pub fn set_timer_slack(slack_ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, slack_ns as libc::c_ulong, 0, 0, 0);
    }
}

/// Wall-clock (CLOCK_REALTIME) nanoseconds: the clock of kernel receive timestamps.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}
