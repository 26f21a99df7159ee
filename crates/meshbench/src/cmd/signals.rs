//! Ctrl-C and SIGTERM: the first one asks the run to stop and write its partial result; a second
//! one ends the process at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};

/// Which signal arrived, if any, and the flag the engine watches.
pub struct Signals {
    pub stop: Arc<AtomicBool>,
    which: Arc<AtomicUsize>,
}

impl Signals {
    pub fn install() -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let which = Arc::new(AtomicUsize::new(0));
        for sig in [SIGINT, SIGTERM] {
            // Order matters: the conditional shutdown sees the flag before this signal sets it.
            signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, stop.clone())?;
            signal_hook::flag::register(sig, stop.clone())?;
            signal_hook::flag::register_usize(sig, which.clone(), sig as usize)?;
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
}
