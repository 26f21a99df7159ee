//! Sending a command's load from agents: `--agents N|ADDR,...` (or the experiment file's
//! `agents:`) becomes a gathered [`Fleet`], held for the whole command; and the agents' shared
//! token and mutual TLS, as `meshbench agent` reads them and as agent pods are given them.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use meshbench_experiment::config::FleetConfig;
use meshbench_runner::agents::{Fleet, FleetError, FleetReach, Tls, TlsFiles, Token};

use super::signals::Signals;
use super::units::parse_duration;
use crate::cli::{AgentAuthFlags, AgentsFlags};
use crate::usage;

/// The fleet the flags (or else the file) ask for; `None`: this process sends the load. A
/// signal while it waits for the agents ends the command (130 / 143), nothing measured.
pub fn gather(
    flags: &AgentsFlags,
    file: Option<&FleetConfig>,
    signals: &Signals,
) -> Result<Option<Fleet>> {
    let reach = match (&flags.agents, file) {
        (Some(given), _) => reach_from_flag(given, flags)?,
        (None, Some(a)) if !a.addresses.is_empty() => FleetReach::Dial(a.addresses.clone()),
        (None, Some(a)) => FleetReach::Listen {
            listener: listen(a.listen.as_deref().unwrap_or(&flags.agents_listen))?,
            agents: a.count.unwrap_or(1),
            wait: Duration::from_secs_f64(a.wait_secs.unwrap_or(60.0).max(0.0)),
        },
        (None, None) => return Ok(None),
    };
    let (token, tls) = auth(&flags.auth)?;
    if let FleetReach::Listen {
        listener, agents, ..
    } = &reach
    {
        errln!(
            "meshbench: waiting for {agents} agent(s) on {}",
            listener
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string())
        );
    }
    let fleet = match Fleet::gather(reach, token, tls, &signals.stop) {
        Err(FleetError::Stopped { joined, wanted }) => {
            return Err(signals.interrupted(format_args!(
                "before the load (agents {joined} of {wanted} dialled in): nothing was measured"
            )))
        }
        fleet => fleet?,
    };
    errln!("meshbench: {} agent(s) ready", fleet.len());
    Ok(Some(fleet))
}

fn reach_from_flag(given: &str, flags: &AgentsFlags) -> Result<FleetReach> {
    if let Ok(n) = given.parse::<usize>() {
        if n == 0 {
            return Err(usage(
                "--agents 0: give at least one agent, or leave --agents out",
            ));
        }
        return Ok(FleetReach::Listen {
            listener: listen(&flags.agents_listen)?,
            agents: n,
            wait: parse_duration("--agents-wait", &flags.agents_wait)?,
        });
    }
    let addrs: Vec<String> = given.split(',').map(|a| a.trim().to_string()).collect();
    if let Some(bad) = addrs.iter().find(|a| !a.contains(':') || a.ends_with(':')) {
        return Err(usage(format!(
            "--agents {given}: '{bad}' is neither a number of agents nor HOST:PORT"
        )));
    }
    Ok(FleetReach::Dial(addrs))
}

fn listen(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .map_err(|e| usage(format!("--agents-listen {addr}: cannot listen there: {e}")))
}

/// The shared token and the optional mutual-TLS files, checked (bad input: exit 2).
pub fn auth(flags: &AgentAuthFlags) -> Result<(Token, Option<Tls>)> {
    let token = Token::load(flags.token_file.as_deref()).map_err(|e| usage(e.to_string()))?;
    let tls = match (
        &flags.agent_tls_cert,
        &flags.agent_tls_key,
        &flags.agent_tls_ca,
    ) {
        (Some(cert), Some(key), Some(ca)) => Some(
            Tls::load(&TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            })
            .map_err(|e| usage(e.to_string()))?,
        ),
        _ => None,
    };
    Ok((token, tls))
}

/// The agents' shared token, and its text for their Secret: from `file`, else
/// `MESHBENCH_AGENT_TOKEN`, else a new one (said in one line).
pub fn token_for_pods(file: Option<&Path>) -> Result<(Token, String)> {
    let text = match Token::load(file) {
        Ok(_) if file.is_some() => std::fs::read_to_string(file.expect("given"))?
            .trim()
            .to_string(),
        Ok(_) => std::env::var(meshbench_runner::agents::TOKEN_ENV)?
            .trim()
            .to_string(),
        Err(meshbench_runner::agents::TokenError::Missing) => {
            errln!("meshbench: no agent token given; a new one is in the Secret");
            new_token()
        }
        Err(e) => return Err(usage(e.to_string())),
    };
    let token = Token::new(text.clone()).map_err(|e| usage(e.to_string()))?;
    Ok((token, text))
}

fn new_token() -> String {
    let mut bytes = [0u8; 32];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
