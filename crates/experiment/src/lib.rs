//! Experiments: the file a user writes ([`config`]) and the ordered steps it expands to
//! ([`plan`]). Running the steps needs the engine, the lab and the store, and happens in the
//! binary; this crate stays pure so that every rule of the file is tested without a process.

pub mod config;
pub mod params;
pub mod plan;

use thiserror::Error;

pub use config::{load, parse, Experiment, Topology};
pub use params::{CpuAllotment, StepParams};
pub use plan::{Plan, Step};

/// Why an experiment file could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {reason}")]
    Read { file: String, reason: String },
    #[error("{file}: not valid YAML: {reason}")]
    Syntax { file: String, reason: String },
    #[error("{file}: {}", problems.join(&format!("\n{file}: ")))]
    Invalid { file: String, problems: Vec<String> },
}
