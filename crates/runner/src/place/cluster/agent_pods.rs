//! The agent pods of a run gathered as its fleet, the one way for a cluster experiment and
//! for `meshbench k8s run`: once their objects are applied, the pods waited for until ready,
//! then the agents in them either dial this process (it listens) or are dialled through a
//! port-forward to each pod, again until each answers (an agent listens a moment after its
//! pod is Ready). Every wait ends on the run's stop, saying where it was ([`BringUp`]).

use std::net::TcpListener;
use std::time::{Duration, Instant};

use meshbench_engine::Stop;
use meshbench_k8s::{AgentPod, BlockingClient, ClusterError, Forward, Objects};
use thiserror::Error;

use super::BringUp;
use crate::agents::{Fleet, FleetError, FleetReach, Token, DEFAULT_PORT};

/// Between two tries to reach the agents through their port-forwards.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// How the agent pods and this process meet, and the token they share.
pub struct Coordinator {
    /// Where the agent pods dial this process; none: the agents listen in their pods and this
    /// process reaches each through a port-forward.
    pub listener: Option<TcpListener>,
    pub token: Token,
    /// The token as the agents' Secret holds it.
    pub token_text: String,
}

/// Why the agents could not be gathered.
#[derive(Debug, Error)]
pub enum AgentsError {
    #[error(transparent)]
    Pods(ClusterError),
    #[error(transparent)]
    Fleet(FleetError),
    /// A stop came; nothing was measured.
    #[error("stopped ({0})")]
    Stopped(BringUp),
}

/// The agents of a run, gathered.
pub struct Gathered {
    pub fleet: Fleet,
    pub pods: Vec<AgentPod>,
    /// A port-forward to each pod, when the agents are reached that way: the fleet's
    /// connections go through them, so they must outlive it.
    pub forwards: Vec<Forward>,
}

/// Waits for the `wanted` agent pods of `objects` (applied) to be ready, at most `wait`
/// (`progress` hears how many are), then gathers their agents as `coordinator` says, again at
/// most `wait`.
pub fn gather(
    client: &BlockingClient,
    objects: &Objects,
    wanted: usize,
    wait: Duration,
    coordinator: Coordinator,
    stop: &Stop,
    progress: impl FnMut(usize),
) -> Result<Gathered, AgentsError> {
    let pods = client
        .wait_agents(objects, wanted, wait, stop, progress)
        .map_err(|err| match err {
            ClusterError::Stopped { ready, wanted } => {
                AgentsError::Stopped(BringUp::AgentPods { ready, wanted })
            }
            err => AgentsError::Pods(err),
        })?;
    let gathered = |err| match err {
        FleetError::Stopped { joined, wanted } => {
            AgentsError::Stopped(BringUp::Dialling { joined, wanted })
        }
        err => AgentsError::Fleet(err),
    };
    let (fleet, forwards) = match coordinator.listener {
        Some(listener) => {
            let reach = FleetReach::Listen {
                listener,
                agents: wanted,
                wait,
            };
            let fleet = Fleet::gather(reach, coordinator.token, None, stop).map_err(gathered)?;
            (fleet, Vec::new())
        }
        None => {
            let namespace = objects.namespace();
            dial(client, &namespace, &pods, coordinator.token, wait, stop).map_err(gathered)?
        }
    };
    Ok(Gathered {
        fleet,
        pods,
        forwards,
    })
}

/// The agents as a fleet through a port-forward to each pod: dialled again until each has
/// answered, at most `wait`.
fn dial(
    client: &BlockingClient,
    namespace: &str,
    pods: &[AgentPod],
    token: Token,
    wait: Duration,
    stop: &Stop,
) -> Result<(Fleet, Vec<Forward>), FleetError> {
    let mut forwards = Vec::new();
    for pod in pods {
        let forward = client
            .port_forward(namespace, &pod.name, DEFAULT_PORT)
            .map_err(|e| FleetError::Dial {
                addr: format!("pod {namespace}/{}", pod.name),
                why: e.to_string(),
            })?;
        forwards.push(forward);
    }
    let addrs: Vec<String> = forwards.iter().map(|f| f.addr().to_string()).collect();
    let deadline = Instant::now() + wait;
    loop {
        match Fleet::gather(FleetReach::Dial(addrs.clone()), token.clone(), None, stop) {
            Ok(fleet) => return Ok((fleet, forwards)),
            Err(FleetError::Dial { .. } | FleetError::Handshake(_))
                if Instant::now() < deadline =>
            {
                if !stop.sleep(RETRY_EVERY) {
                    return Err(FleetError::Stopped {
                        joined: 0,
                        wanted: addrs.len(),
                    });
                }
            }
            Err(e) => {
                let through = forwards
                    .iter()
                    .find_map(|f| f.last_error())
                    .map_or(String::new(), |e| format!(" (the port-forward: {e})"));
                return Err(match e {
                    FleetError::Dial { addr, why } => FleetError::Dial {
                        addr,
                        why: format!("{why}{through}"),
                    },
                    other => other,
                });
            }
        }
    }
}
