//! The contracts between meshbench's crates: the types that cross from the crates that measure
//! (`engine`, `lab`, `runner`) to those that keep and read what was measured (`store`,
//! `analysis`, `report`). Serde types and pure functions of them only: no I/O, no protocol
//! stack, so a reader of results compiles neither QUIC nor Envoy's API.
//!
//! - [`run`]: the result of one run ([`RunResult`], the `meshbench/result/v1` document).
//! - [`histogram`]: the histograms a result carries, their bounds and their transport form.
//! - [`self_check`]: the generator's verdict on its run, inside a result.
//! - [`load`]: the words of a load (loop mode, arrival, protocol, order, close side, idle
//!   strategy), typed.
//! - [`step`]: what one step asked for ([`StepParams`]).
//! - [`topology`]: who talks to whom ([`Topology`]), what kind of step the file lists and the
//!   store keeps ([`StepKind`]), each role's class and layer, and what a measured run is
//!   compared as ([`Subject`]).
//! - [`role`]: who played what ([`Role`], [`ChainRole`]), the proxy programs ([`Program`]) and
//!   what played a role ([`PlayedBy`]).
//! - [`failure`]: why a step failed ([`StepFailure`]).
//! - [`stop`]: the one request to end a run early, honoured by every wait ([`Stop`]).
//! - [`usage`]: what a role used over a step ([`RoleUsage`], [`Sample`]).
//! - [`proxy`]: an Envoy role's own counts ([`ProxyCounters`]).
//! - [`control_plane`]: what a control-plane step asked istiod to serve ([`MeshScale`]) and
//!   what it measured ([`ControlPlaneFigures`]).
//! - [`attribution`]: where a request's latency goes, hop by hop ([`Attribution`]).
//! - [`change`]: the changes a step applies to its gateway under load ([`ChangeStream`]) and
//!   what each cost the requests in flight ([`ChangeFigures`]).
//! - `fixtures` (feature `fixtures`): a stored run's result, for other crates' tests.

pub mod attribution;
pub mod change;
pub mod control_plane;
pub mod failure;
pub mod histogram;
pub mod load;
pub mod proxy;
pub mod role;
pub mod run;
pub mod self_check;
pub mod step;
pub mod stop;
pub mod topology;
pub mod usage;

#[cfg(feature = "fixtures")]
pub mod fixtures;

pub use attribution::Attribution;
pub use change::{ChangeFigures, ChangeKind, ChangeRecord, ChangeStream, HaproxyReload};
pub use control_plane::{ControlPlaneFigures, MeshScale, ProxyKind, XdsType};
pub use failure::StepFailure;
pub use load::{Arrival, CloseFirst, IdleStrategy, LoopMode, Order, PacingSlack, Protocol};
pub use proxy::{ProxyCounters, ProxyRequests, UpstreamFailures};
pub use role::{ChainRole, Configuration, ControlPlaneKind, PlayedBy, Program, Role, Standalone};
pub use run::RunResult;
pub use self_check::{Cause, Finding, SelfCheck};
pub use step::{CpuAllotment, LoadPoint, Offer, StepParams};
pub use stop::Stop;
pub use topology::{Class, Layer, PeerAuthentication, StepKind, Subject, Topology};
pub use usage::{Figure, RoleUsage, Sample, Usage, UsageReader, UsageSource};
