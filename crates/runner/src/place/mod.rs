//! Where a step is realised: each place is a [`crate::measured::Place`] that brings a system
//! to the step's shape and a [`crate::measured::Realised`] that says where the load goes and
//! what is read of the system; the measured step itself is written once, in `measured.rs`.
//!
//! - [`rig`]: this machine, a fresh rig per step (the lab's processes under their limits);
//! - [`cluster`]: a Kubernetes cluster set up for the run (its agent pods send the load);
//! - [`external`]: a system meshbench does not start, read through Prometheus.

pub mod cluster;
pub mod external;
pub mod rig;
