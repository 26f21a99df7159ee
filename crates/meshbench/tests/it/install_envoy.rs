//! scripts/install-envoy.sh's check of what is already installed. The script downloads only
//! when the pinned version is not there, so that check must neither miss the Envoy that is
//! there (a second run would download and replace it) nor take another version for it. Each
//! case runs the script with a PATH that has no python3: had it decided to download, it stops
//! at once with "python3 ... is needed", so no test ever reaches PyPI.

use crate::common;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

/// The version the script pins.
const PINNED: &str = "1.40.0";

/// The Envoy installed here, or a failure that says how to install it.
fn installed_envoy() -> PathBuf {
    let envoy = std::env::var_os("MESHBENCH_ENVOY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/local/bin/envoy"));
    assert!(
        envoy.exists(),
        "Envoy is not installed at {}: run scripts/install-envoy.sh",
        envoy.display()
    );
    envoy
}

/// Runs the script with its Envoy home at `home` and its link at `link`, on a PATH holding
/// only the few tools it calls before a download (python3 not among them).
fn run_script(dir: &Path, home: &Path, link: &Path) -> Output {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["uname", "mkdir", "dirname", "ln", "grep", "mktemp", "rm"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} not found in /usr/bin or /bin"));
        let _ = symlink(found, bin.join(tool));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-envoy.sh");
    Command::new("/bin/bash")
        .arg(script)
        .env_clear()
        .env("PATH", &bin)
        .env("ENVOY_HOME", home)
        .env("ENVOY_LINK", link)
        .output()
        .unwrap()
}

#[test]
fn install_envoy_keeps_the_installed_pinned_envoy_without_downloading() {
    let real = installed_envoy();
    // The check once piped `envoy --version` into `grep -q` under `pipefail`: grep left at
    // its first match, Envoy's next write got SIGPIPE, and about one check in three said
    // "not installed". Enough runs to see that.
    for run in 0..20 {
        let dir = scratch_dir("install-envoy-pinned");
        let home = dir.join(PINNED);
        std::fs::create_dir_all(&home).unwrap();
        symlink(&real, home.join("envoy")).unwrap();
        let link = dir.join("link").join("envoy");
        let out = run_script(&dir, &home, &link);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "run {run}: the installed Envoy {PINNED} was not recognised ({}): {stderr}",
            out.status
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), home.join("envoy"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn install_envoy_does_not_take_another_version_in_the_pinned_directory_for_the_pinned_one() {
    // Envoy's --version names its own path, here `.../1.40.0/envoy`: the version must be read
    // from the version field, not from anywhere in the text.
    let dir = scratch_dir("install-envoy-other");
    let home = dir.join(PINNED);
    std::fs::create_dir_all(&home).unwrap();
    let fake = home.join("envoy");
    std::fs::write(
        &fake,
        "#!/bin/sh\nprintf '\\n%s  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.39.0/Clean/RELEASE/BoringSSL\\n\\n' \"$0\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = dir.join("link").join("envoy");
    let out = run_script(&dir, &home, &link);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("python3"),
        "Envoy 1.39.0 was taken for {PINNED} ({}): {stderr}",
        out.status
    );
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "the link was made to another version"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
