//! The built-in backend as a separate process (`meshbench backend`), so that its CPU is never
//! counted as the load generator's and it can be pinned or limited on its own.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::LabError;

/// A running `meshbench backend` child process; killed when dropped.
pub struct BackendProcess {
    child: Child,
    addr: SocketAddr,
}

impl BackendProcess {
    /// Starts `exe backend --listen 127.0.0.1:0 ARGS...` and waits for its address.
    pub fn start(exe: &Path, args: &[&str]) -> Result<Self, LabError> {
        let mut child = Command::new(exe)
            .args(["backend", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| LabError::Spawn("the backend".into(), e))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let mut addr = None;
        // The banner may follow a line about generated TLS files.
        for _ in 0..4 {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let text = line.trim();
            addr = text
                .strip_prefix("listening on http://")
                .or_else(|| text.strip_prefix("listening on https://"))
                .and_then(|a| a.parse().ok());
            if addr.is_some() {
                break;
            }
        }
        match addr {
            Some(addr) => Ok(BackendProcess { child, addr }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(LabError::BackendBanner(line.trim().to_string()))
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
