//! A result as a real run wrote it (`fixture-run.json`: 20 requests in a closed loop against
//! the backend), for the tests of the crates that read results. Tests change the fields they
//! are about.

use crate::run::RunResult;

/// The stored run's text, as the run wrote it.
pub const RUN_RESULT_JSON: &str = include_str!("fixture-run.json");

/// The stored run, parsed.
pub fn run_result() -> RunResult {
    serde_json::from_str(RUN_RESULT_JSON).expect("the fixture is a result")
}
