//! How a caller ends a run early, in two steps: *stop* (stop sending, wait for the requests in
//! flight, report) and *hurry* (report now, counting what is still in flight as unfinished).
//!
//! One handle is shared by whoever may ask (a signal handler, a capacity search, a test) and
//! everything that must listen (the engine's workers, the lab's cool-down, an experiment's step
//! loop). Both flags only ever go from false to true, and setting them is async-signal-safe (two
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
    pub fn request(&self) {
        self.0.requested.store(true, Ordering::Relaxed);
    }

    /// Stop sending and stop waiting: what is in flight counts as unfinished. Implies
    /// [`Stop::request`].
    pub fn hurry(&self) {
        self.0.requested.store(true, Ordering::Relaxed);
        self.0.hurried.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was asked (by either call).
    pub fn requested(&self) -> bool {
        self.0.requested.load(Ordering::Relaxed)
    }

    /// Whether the caller wants the result now, without draining.
    pub fn hurried(&self) -> bool {
        self.0.hurried.load(Ordering::Relaxed)
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
}
