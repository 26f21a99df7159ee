//! The seed corpus as a regression test: every file under `fuzz/corpus/<target>/` goes through
//! the same check its fuzz target runs, on stable, in `cargo test --workspace`. A crash the
//! fuzzer found is kept there under a name saying what it was, so it stays fixed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[test]
fn every_corpus_file_passes_its_check() {
    let mut failed = Vec::new();
    for &(target, check) in meshbench_fuzzcheck::TARGETS {
        let dir = corpus_dir(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a readable directory entry").path())
            .collect();
        files.sort();
        assert!(files.len() >= 3, "{target}: only {} seeds", files.len());
        for path in files {
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
                let why = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                failed.push(format!(
                    "{target}/{}: {why}",
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} corpus files fail:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
