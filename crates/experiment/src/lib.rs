//! Experiments: the file a user writes ([`config`]) and the ordered steps it expands to
//! ([`plan`]). The file's words for topologies, programs and role classes are the contracts'
//! types (`meshbench_results::{Topology, Program, Class}`), read straight from the YAML;
//! nothing here starts a process (nor depends on the lab). Systems meshbench does not start are the file's `external` section
//! ([`external`]): URLs and the PromQL that reads their roles. Each step's typed parameters are [`params::StepParams`]. Running the
//! steps is the runner's (`meshbench-runner`); this crate stays pure so that every rule of the
//! file is tested without a process.

pub mod changes;
pub mod cluster;
pub mod config;
pub mod external;
pub mod params;
pub mod plan;
mod read;

use thiserror::Error;

pub use config::{load, parse, Experiment};

pub use plan::{ChainVariant, ExternalVariant, Plan, Step, Work};

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
