//! `meshbench agent`: flags checked, the token and TLS files read, then the runner's agent
//! serves coordinators; its events are printed one line each on stderr.

use std::net::TcpListener;

use anyhow::Result;
use meshbench_runner::agents::agent::{self, AgentConfig, Reach};
use meshbench_runner::agents::AgentError;

use super::common::fleet::auth;
use super::common::signals::Signals;
use super::common::units::parse_duration;
use crate::cli::AgentArgs;
use crate::{exit, usage};

pub fn execute(args: AgentArgs) -> Result<u8> {
    let (token, tls) = auth(&args.auth)?;
    let patience = parse_duration("--patience", &args.patience)?;
    let name = args.name.clone().unwrap_or_else(host_name);
    let reach = match &args.coordinator {
        Some(c) => {
            if !c.contains(':') {
                return Err(usage(format!(
                    "--coordinator {c}: give HOST:PORT, e.g. meshbench-coordinator:7700"
                )));
            }
            Reach::Dial {
                coordinator: c.clone(),
                patience,
            }
        }
        None => {
            let addr = args.listen.as_deref().unwrap_or("127.0.0.1:7700");
            let listener = TcpListener::bind(addr)
                .map_err(|e| usage(format!("--listen {addr}: cannot listen there: {e}")))?;
            Reach::Listen(listener)
        }
    };
    let signals = Signals::install()?;
    let config = AgentConfig { name, token, tls };
    let outcome = agent::serve(reach, &config, &signals.stop, &|event| {
        errln!("meshbench agent: {event}")
    });
    if let Some(code) = signals.exit_code() {
        return Ok(code);
    }
    match outcome {
        Ok(()) => Ok(exit::OK),
        Err(e @ AgentError::Handshake(_)) | Err(e @ AgentError::NoCoordinator { .. }) => {
            errln!("meshbench agent: {e}");
            Ok(exit::FAILED)
        }
        Err(e) => Err(e.into()),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("agent-{}", std::process::id()))
}
