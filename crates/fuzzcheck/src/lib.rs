//! What each fuzz target checks, as plain functions: `fuzz/fuzz_targets/<name>.rs` (cargo-fuzz,
//! nightly) calls them on what libFuzzer generates, and `tests/corpus.rs` (stable, part of
//! `cargo test --workspace`) calls them on every file kept in `fuzz/corpus/<name>/`, so a crash
//! the fuzzer once found stays fixed without cargo-fuzz installed.
//!
//! The contract of every check: it returns for any input, and panics only when the code under
//! test breaks a property (a panic of its own, a wrong answer, unbounded work or memory). A
//! typed error from the code under test is a correct answer, not a failure.

pub mod experiment;
pub mod histogram;
pub mod http1;
pub mod targets;

/// A check: returns for a correct answer, panics for a broken property.
pub type Check = fn(&[u8]);

/// Every fuzz target by name, as its corpus directory and its fuzz target are named.
pub const TARGETS: &[(&str, Check)] = &[
    ("http1_response", http1::http1_response),
    ("url_template", targets::url_template),
    ("targets_file", targets::targets_file),
    ("experiment_file", experiment::experiment_file),
    ("histogram_decode", histogram::histogram_decode),
];
