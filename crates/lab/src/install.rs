//! Finding a server binary, and installing it when it is missing: its Debian package with
//! apt-get (the machines this runs on are Debian with root; anywhere else the error says what to
//! install by hand), or, for a program Debian does not package at the pinned version (Envoy), the
//! project's own install script, embedded in the binary so that one pin serves the scripts, the
//! tests and a user's first run.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::LabError;

/// `name` on PATH, or at one of `also` (e.g. /usr/sbin/nginx when /usr/sbin is not on PATH).
pub fn find(name: &str, also: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// `name` as [`find`] locates it, installing the Debian package of the same name first if
/// it is missing.
pub fn program(name: &str, also: &[&str]) -> Result<PathBuf, LabError> {
    ensure(name, name, || find(name, also))
}

/// The binary `find` locates, installing `package` first if it finds none.
pub fn ensure(
    package: &str,
    name: &str,
    find: impl Fn() -> Option<PathBuf>,
) -> Result<PathBuf, LabError> {
    if let Some(p) = find() {
        return Ok(p);
    }
    eprintln!("{name} not found: installing the Debian package {package} with apt-get");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
    };
    let ok = matches!(install(), Ok(s) if s.success())
        || (matches!(Command::new("apt-get").arg("update").stdout(Stdio::null()).status(), Ok(s) if s.success())
            && matches!(install(), Ok(s) if s.success()));
    match find() {
        Some(p) if ok => Ok(p),
        _ => Err(LabError::InstallFailed {
            package: package.to_string(),
            reason: "see apt-get's output above".to_string(),
        }),
    }
}

/// Runs `script` (a bash script's text, embedded from scripts/) as `$0 = name` with `env` added,
/// its output kept back: on success nothing is shown, on failure the error carries the last line
/// it wrote (its own one-line reason: every project script ends a failure with one).
pub fn script(name: &str, script: &str, env: &[(&str, &std::ffi::OsStr)]) -> Result<(), LabError> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(name)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Spawn(format!("bash for {name}"), e))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let reason = said
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map_or_else(|| format!("it ended with {}", out.status), str::to_string);
    Err(LabError::ScriptFailed {
        script: name.to_string(),
        reason,
    })
}
