//! The executor as a library: everything between "what to measure" and "a stored step".
//!
//! ```text
//! LoadOptions ──resolve──► LoadSpec ──► measure: engine + sampler over one window ──► Measured
//!   (load, targets)                       (load_window)
//! Experiment ──► Plan ──► steps::run_experiment ──► for each step, by its kind (`Work`):
//!                         a chain or an external variant ──► measured::measured_step at its
//!                         Place (place/: rig, the lab's rig; cluster, a Kubernetes cluster;
//!                         external, systems read through Prometheus): realised, the load
//!                         aimed at it, measured, witnesses and each role's usage
//!                         ──► StepRecord ──► Session (store), Observer (progress)
//!                         a `control_plane` step: istiod serving a simulated mesh, no load:
//!                         control_plane
//! capacity::search: analysis's search picks each rate, a step measures it, the stored step
//!                   becomes a probe
//! ```
//!
//! Every command that sends traffic (`run`, `experiment`, `capacity`, `demo`) goes through
//! [`measure`], with typed options; nothing here parses a command line or prints. Progress and
//! warnings go to an [`Observer`].

pub mod agents;
pub mod attribution;
pub mod capacity;
pub mod changes;
pub mod control_plane;
pub mod load;
pub mod load_window;
mod measured;
pub mod observer;
pub mod place;
pub mod session;
pub mod setup;
pub mod source_addrs;
pub mod step_load;
pub mod steps;
pub mod targets;

use thiserror::Error;

pub use load::{Body, LoadError, LoadOptions, ProtoSource, QuicOptions, TargetSource, TlsOptions};
pub use load_window::{measure, Beside, LoadOrigin, LoadSource, MeasureError, Measured, Sampling};
pub use observer::{Observer, Quiet, StepAt};
pub use place::rig::load_options;
pub use session::{new_experiment, now_rfc3339, Finished, Kept, NotStored, Session};
pub use steps::{run_experiment, Site, StepRunner};

/// Why an experiment could not be carried out (a failed step is not one: it is stored).
#[derive(Debug, Error)]
pub enum RunnerError {
    #[error(transparent)]
    Store(#[from] meshbench_store::StoreError),
    #[error("cannot find the meshbench binary (it plays the backend role): {0}")]
    Exe(std::io::Error),
    #[error("step {step} at {rate} req/s could not be measured: {why}")]
    Unmeasured { step: usize, rate: f64, why: String },
    /// A measured step the store refused (a full disk); kept elsewhere, the run stops.
    #[error(transparent)]
    NotStored(Box<session::NotStored>),
    /// The cluster could not be set up for the run.
    #[error(transparent)]
    Cluster(#[from] place::cluster::SiteError),
}
