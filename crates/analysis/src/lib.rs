//! Answers from measurements: the headline figures of an experiment (what each proxy costs,
//! the latency it adds, where the curves bend), comparisons with confidence intervals and a
//! typed verdict from one test (`verdict`), thresholds for CI pipelines, the capacity search
//! and replica sizing (from costs that are lines only where one is defined, `trend`), and
//! whether each Envoy's own request count agrees with the engine's (`witness`). Every answer
//! built on a run the generator's self-check calls INVALID carries that verdict (`invalid`).
//! Pure: the runs come in (from the store or a result file), typed answers go out; printing
//! and plotting are the binary's and the report's.

pub mod attribution;
pub mod capacity;
pub mod changes;
pub mod compare;
pub mod headline;
pub mod invalid;
pub mod runs;
pub mod sizing;
pub mod threshold;
pub mod trend;
pub mod verdict;
pub mod witness;

pub use headline::Headline;
pub use runs::{group, Group, Run};
