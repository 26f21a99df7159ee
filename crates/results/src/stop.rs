//! How a caller ends a run early, in two steps: *stop* (stop sending, wait for the requests in
//! flight, report) and *hurry* (report now, counting what is still in flight as unfinished).
//!
//! One handle is shared by whoever may ask (a signal handler, a capacity search, a test) and
//! everything that must listen (the engine's workers, the lab's cool-down, an experiment's step
//! loop, every wait for a system under test). It lives with the contracts because every crate
//! that waits honours the same one; [`Stop::sleep`] is the one "sleep unless stopped". Both flags only ever go from false to true, and setting them is async-signal-safe (two
//! atomic stores), so a signal handler may call [`Stop::request`] and [`Stop::hurry`] directly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A shared request to end a run early. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<Flags>);

#[derive(Debug, Default)]
struct Flags {
    requested: AtomicBool,
    hurried: AtomicBool,
}

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stop sending; requests in flight may still finish (up to the drain time).
    #[inline]
    pub fn request(&self) {
        self.0.requested.store(true, Ordering::Relaxed);
    }

    /// Stop sending and stop waiting: what is in flight counts as unfinished. Implies
    /// [`Stop::request`].
    #[inline]
    pub fn hurry(&self) {
        self.0.requested.store(true, Ordering::Relaxed);
        self.0.hurried.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was asked (by either call).
    #[inline]
    pub fn requested(&self) -> bool {
        self.0.requested.load(Ordering::Relaxed)
    }

    /// Whether the caller wants the result now, without draining.
    #[inline]
    pub fn hurried(&self) -> bool {
        self.0.hurried.load(Ordering::Relaxed)
    }

    /// Sleeps for `d`, waking every 20 ms or less to look at the stop; `false` when a stop was
    /// asked (before or during the sleep), so a waiting loop ends within 20 ms of Ctrl-C.
    pub fn sleep(&self, d: std::time::Duration) -> bool {
        const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(20);
        let end = std::time::Instant::now() + d;
        loop {
            if self.requested() {
                return false;
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(LOOK_EVERY));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hurry_implies_stop_and_clones_share() {
        let a = Stop::new();
        let b = a.clone();
        assert!(!b.requested() && !b.hurried());
        a.request();
        assert!(b.requested() && !b.hurried());
        a.hurry();
        assert!(b.requested() && b.hurried());
    }

    #[test]
    fn sleep_ends_early_on_a_stop_and_says_so() {
        let stop = Stop::new();
        assert!(stop.sleep(std::time::Duration::from_millis(1)));
        let asker = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            asker.request();
        });
        let began = std::time::Instant::now();
        assert!(!stop.sleep(std::time::Duration::from_secs(30)));
        assert!(began.elapsed() < std::time::Duration::from_secs(5));
        t.join().unwrap();
    }
}
