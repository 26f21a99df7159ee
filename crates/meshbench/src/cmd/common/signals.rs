//! Ctrl-C and SIGTERM, as they arrive in the field: a terminal, `timeout -s INT` or a CI runner
//! signals the whole process group, so one keypress can reach the process twice within
//! microseconds. Signals within [`BURST`] of the one that counted are the same request.
//!
//! - the first asks the run to stop: it stops sending, waits for what is in flight, and writes
//!   its partial result (JSON, summary, store row);
//! - a second, later one hurries it: no more waiting, what it has is written now;
//! - a third, later still, ends the process at once (exit 130 / 143), for a run stuck where no
//!   flag is looked at.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use meshbench_engine::Stop;
use meshbench_net::clock::monotonic_ns;
use signal_hook::consts::{SIGINT, SIGTERM};

/// Signals closer than this to the last one that counted are its echo, not a new request.
pub const BURST: std::time::Duration = std::time::Duration::from_millis(500);

/// Which signal arrived, if any, and the stop handle the runs watch.
pub struct Signals {
    pub stop: Stop,
    which: Arc<AtomicUsize>,
}

/// What the handler remembers between signals (atomics only: it runs in a signal handler).
#[derive(Default)]
struct Counted {
    /// How many signals counted so far (echoes excluded).
    count: AtomicUsize,
    /// CLOCK_MONOTONIC of the last signal that counted, in nanoseconds.
    at_ns: AtomicU64,
}

impl Signals {
    pub fn install() -> std::io::Result<Self> {
        let stop = Stop::new();
        let which = Arc::new(AtomicUsize::new(0));
        let counted = Arc::new(Counted::default());
        for sig in [SIGINT, SIGTERM] {
            let (stop, which, counted) = (stop.clone(), which.clone(), counted.clone());
            let handler = move || {
                let now = monotonic_ns();
                let n = counted.count.load(Ordering::Relaxed);
                if n > 0
                    && now.saturating_sub(counted.at_ns.load(Ordering::Relaxed))
                        < BURST.as_nanos() as u64
                {
                    return;
                }
                counted.count.store(n + 1, Ordering::Relaxed);
                counted.at_ns.store(now, Ordering::Relaxed);
                match n {
                    0 => {
                        let _ = which.compare_exchange(
                            0,
                            sig as usize,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                        stop.request();
                    }
                    1 => stop.hurry(),
                    // SAFETY: _exit is async-signal-safe; nothing is left to flush that a
                    // hurried run would still write.
                    _ => unsafe { libc::_exit(128 + sig) },
                }
            };
            // SAFETY: the handler only does atomic loads and stores, reads CLOCK_MONOTONIC
            // (`monotonic_ns`: async-signal-safe) and may call _exit.
            unsafe { signal_hook::low_level::register(sig, handler)? };
        }
        Ok(Signals { stop, which })
    }

    /// The exit code for the signal received, if one was.
    pub fn exit_code(&self) -> Option<u8> {
        match self.which.load(Ordering::Relaxed) {
            0 => None,
            s if s == SIGTERM as usize => Some(crate::exit::SIGTERM),
            _ => Some(crate::exit::SIGINT),
        }
    }

    /// A run the signal stopped before it measured anything: its exit code (130 / 143) and
    /// one line, `stopped by SIGINT {what}` (printed by `errln!`, which breaks it where it
    /// would not fit 120 columns).
    pub fn interrupted(&self, what: impl std::fmt::Display) -> anyhow::Error {
        let code = self.exit_code().unwrap_or(crate::exit::SIGINT);
        let name = match code {
            crate::exit::SIGTERM => "SIGTERM",
            _ => "SIGINT",
        };
        let line = format!("stopped by {name} {what}");
        anyhow::Error::new(crate::Interrupted { code, line })
    }
}
