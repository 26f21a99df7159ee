//! Sending a command's load from agents: `--agents N|ADDR,...` (or the experiment file's
//! `agents:`) becomes a gathered [`Fleet`], held for the whole command.

use std::net::TcpListener;
use std::time::Duration;

use anyhow::Result;
use meshbench_experiment::config::FleetConfig;
use meshbench_runner::agents::{Fleet, FleetError, FleetReach};

use super::parse_duration;
use super::signals::Signals;
use crate::cli::AgentsFlags;
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
    let (token, tls) = super::agent::auth(&flags.auth)?;
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
