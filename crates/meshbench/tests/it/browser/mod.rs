//! The npm folder of the browser and dashboard tests (this directory: package.json and
//! package-lock.json pin playwright-core, @grafana/schema and typescript;
//! scripts/install-web-test.sh installs them into node_modules/), and where those tests leave
//! what a person may want to look at. A test that needs a package that is not installed fails
//! and says how to install it: these tests do not pass by doing nothing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// This directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/browser")
}

/// `node_modules/NAME`, or a panic that says what is missing and how to install it.
pub fn require(package: &str) -> PathBuf {
    let node = Command::new("node").arg("--version").output();
    if !node.as_ref().is_ok_and(|o| o.status.success()) {
        panic!("no Node.js (`node` is not on PATH); run scripts/install-web-test.sh");
    }
    let path = dir().join("node_modules").join(package);
    if !path.join("package.json").is_file() {
        panic!(
            "the npm package {package} is not installed in {}; run scripts/install-web-test.sh \
             (scripts/install-deps.sh runs it)",
            dir().join("node_modules").display()
        );
    }
    path
}

/// Debian's Chromium (scripts/install-deps.sh installs it), or `$MESHBENCH_CHROMIUM`.
pub fn chromium() -> PathBuf {
    let path = std::env::var_os("MESHBENCH_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !path.is_file() {
        panic!(
            "no Chromium at {}; run scripts/install-deps.sh (or set MESHBENCH_CHROMIUM)",
            path.display()
        );
    }
    path
}

/// `TARGET/test-artifacts`, created: screenshots and generated files worth a look.
pub fn artifacts() -> PathBuf {
    // The binary under test is TARGET/PROFILE/meshbench.
    let target = Path::new(env!("CARGO_BIN_EXE_meshbench"))
        .parent()
        .and_then(Path::parent)
        .expect("the target directory")
        .to_path_buf();
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create test-artifacts");
    dir
}
