//! `meshbench agent`: waits for a coordinator (listening, or dialling it) and drives the
//! segments it is given, one step at a time, streaming each second back. It never runs load
//! without a coordinator: a control connection that goes quiet for [`PEER_SILENT`] stops the
//! load at once (no drain), so a dead coordinator leaves no orphan load on anyone's gateway.

use std::fmt;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use meshbench_engine::{Segment, Stop};
use meshbench_net::clock::monotonic_ns;

use super::auth::{handshake, Hello, Side, Token};
use super::link::{Link, Tls};
use super::wire::{Framed, Message};
use super::{AgentError, HandshakeError, HEARTBEAT, PEER_SILENT};
use crate::LoadOptions;

/// How long a prepared agent waits for its `Start` before it gives the step up.
const START_PATIENCE: Duration = Duration::from_secs(60);
/// How long the handshake may take.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(5);
/// The most tagged requests (per-hop attribution) an agent sends with one step's part: about
/// 100 bytes of JSON each, 5 MB in all, inside the protocol's frame ([`super::wire::MAX_FRAME`]);
/// the rest are not split (a lower `attribution.sample` keeps every one).
const MAX_TRACES_SENT: usize = 50_000;

/// Who the agent is and what it trusts.
pub struct AgentConfig {
    pub name: String,
    pub token: Token,
    pub tls: Option<Tls>,
}

/// How the agent meets its coordinator.
pub enum Reach {
    /// Wait for coordinators to dial in (`--listen`), one session at a time, forever.
    Listen(TcpListener),
    /// Dial the coordinator (`--coordinator`), retrying while it is not there; give up after
    /// `patience` without one. One session: the agent ends when the coordinator says goodbye.
    Dial {
        coordinator: String,
        patience: Duration,
    },
}

/// What the agent reports to whoever runs it (the binary prints these).
#[derive(Debug)]
pub enum AgentEvent {
    Listening(String),
    Dialling(String),
    Joined {
        coordinator: String,
        name: String,
    },
    /// A connection that did not become a session (wrong token, other version, busy).
    Turned {
        peer: String,
        why: String,
    },
    Step {
        step: u32,
        segment: Segment,
    },
    StepEnded {
        step: u32,
        requests: u64,
    },
    StepFailed {
        step: u32,
        reason: String,
    },
    CoordinatorLost {
        peer: String,
        why: String,
    },
    SessionEnded {
        peer: String,
    },
}

impl fmt::Display for AgentEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentEvent::Listening(a) => write!(f, "agent listening on {a}"),
            AgentEvent::Dialling(a) => write!(f, "agent dialling its coordinator at {a}"),
            AgentEvent::Joined { coordinator, name } => {
                write!(f, "joined {name} at {coordinator}")
            }
            AgentEvent::Turned { peer, why } => write!(f, "turned away {peer}: {why}"),
            AgentEvent::Step { step, segment } => {
                let (i, n) = (segment.index, segment.count);
                write!(
                    f,
                    "step {step}: driving arrivals {i}, {i}+{n}, {i}+2*{n}, ... of the plan"
                )
            }
            AgentEvent::StepEnded { step, requests } => {
                write!(f, "step {step}: done, {requests} requests")
            }
            AgentEvent::StepFailed { step, reason } => write!(f, "step {step}: failed: {reason}"),
            AgentEvent::CoordinatorLost { peer, why } => {
                write!(f, "coordinator {peer} lost ({why}): load stopped")
            }
            AgentEvent::SessionEnded { peer } => write!(f, "coordinator {peer} ended the session"),
        }
    }
}

/// Serves coordinators until `shutdown` (a signal), or, when dialling, until the session ends.
pub fn serve(
    reach: Reach,
    config: &AgentConfig,
    shutdown: &Stop,
    report: &(dyn Fn(AgentEvent) + Sync),
) -> Result<(), AgentError> {
    match reach {
        Reach::Listen(listener) => listen(listener, config, shutdown, report),
        Reach::Dial {
            coordinator,
            patience,
        } => dial(&coordinator, patience, config, shutdown, report),
    }
}

fn listen(
    listener: TcpListener,
    config: &AgentConfig,
    shutdown: &Stop,
    report: &(dyn Fn(AgentEvent) + Sync),
) -> Result<(), AgentError> {
    listener.set_nonblocking(true)?;
    report(AgentEvent::Listening(
        listener
            .local_addr()
            .map_or_else(|_| "?".into(), |a| a.to_string()),
    ));
    std::thread::scope(|s| {
        let mut current: Option<(String, std::thread::ScopedJoinHandle<'_, ()>)> = None;
        while !shutdown.requested() {
            if current.as_ref().is_some_and(|(_, h)| h.is_finished()) {
                current = None;
            }
            let tcp = match listener.accept() {
                Ok((tcp, _)) => tcp,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                Err(e) => return Err(AgentError::Io(e)),
            };
            let _ = tcp.set_nonblocking(false);
            let Ok(link) = Link::accepted(tcp, config.tls.as_ref()) else {
                continue;
            };
            let mut framed = Framed::new(link);
            if let Some((busy_with, _)) = &current {
                let peer = framed.peer();
                let why = format!("busy with coordinator {busy_with}; try again after its session");
                let _ = framed.send(&Message::Refused {
                    reason: why.clone(),
                });
                report(AgentEvent::Turned { peer, why });
                continue;
            }
            match handshake(
                &mut framed,
                &Hello::ours(Side::Agent, &config.name),
                &config.token,
                HANDSHAKE_WAIT,
            ) {
                Ok(hello) => {
                    let peer = framed.peer();
                    report(AgentEvent::Joined {
                        coordinator: peer.clone(),
                        name: hello.name.clone(),
                    });
                    let handle = s.spawn(move || {
                        let end = session(&mut framed, shutdown, report);
                        report(end.event(peer));
                    });
                    current = Some((hello.name, handle));
                }
                Err(e) => report(AgentEvent::Turned {
                    peer: framed.peer(),
                    why: e.to_string(),
                }),
            }
        }
        Ok(())
    })
}

fn dial(
    coordinator: &str,
    patience: Duration,
    config: &AgentConfig,
    shutdown: &Stop,
    report: &(dyn Fn(AgentEvent) + Sync),
) -> Result<(), AgentError> {
    report(AgentEvent::Dialling(coordinator.to_string()));
    let host = coordinator
        .rsplit_once(':')
        .map_or(coordinator, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let mut since = Instant::now();
    let mut backoff = Duration::from_millis(100);
    let mut last = String::from("not tried");
    while !shutdown.requested() {
        if since.elapsed() > patience {
            return Err(AgentError::NoCoordinator {
                addr: coordinator.to_string(),
                waited: patience,
                last,
            });
        }
        let tcp = match connect(coordinator) {
            Ok(tcp) => tcp,
            Err(e) => {
                last = e.to_string();
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        let mut framed = Framed::new(Link::dialled(tcp, host, config.tls.as_ref())?);
        match handshake(
            &mut framed,
            &Hello::ours(Side::Agent, &config.name),
            &config.token,
            HANDSHAKE_WAIT,
        ) {
            Ok(hello) => {
                let peer = framed.peer();
                report(AgentEvent::Joined {
                    coordinator: peer.clone(),
                    name: hello.name,
                });
                let end = session(&mut framed, shutdown, report);
                report(end.event(peer));
                match end {
                    End::Bye | End::Shutdown => return Ok(()),
                    End::Lost(_) => since = Instant::now(),
                    End::Refused(reason) => {
                        return Err(HandshakeError::Refused {
                            peer: framed.peer(),
                            reason,
                        }
                        .into())
                    }
                }
            }
            // A coordinator that is there but will not have this agent: say so and end.
            Err(e @ (HandshakeError::Io { .. } | HandshakeError::Silent { .. })) => {
                last = e.to_string();
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// How a session ended.
enum End {
    Bye,
    Lost(String),
    /// The coordinator does not want this agent (every seat taken, the session over).
    Refused(String),
    Shutdown,
}

impl End {
    fn event(&self, peer: String) -> AgentEvent {
        match self {
            End::Bye | End::Shutdown => AgentEvent::SessionEnded { peer },
            End::Lost(why) | End::Refused(why) => AgentEvent::CoordinatorLost {
                peer,
                why: why.clone(),
            },
        }
    }
}

/// A step being driven on its own thread.
struct Running {
    step: u32,
    stop: Stop,
    start: Option<Sender<u64>>,
    handle: JoinHandle<()>,
}

impl Running {
    /// Stops the load now (no drain) and waits for the engine to end.
    fn abandon(self) {
        self.stop.hurry();
        drop(self.start);
        let _ = self.handle.join();
    }
}

/// One coordinator's session: answer pings, drive each step, stream its seconds, stop when
/// told or when the coordinator goes quiet.
fn session(framed: &mut Framed, shutdown: &Stop, report: &(dyn Fn(AgentEvent) + Sync)) -> End {
    let (out_tx, out_rx) = mpsc::channel::<Message>();
    let mut run: Option<Running> = None;
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    let end = loop {
        if let Err(e) = flush(framed, &out_rx, &mut last_sent, report) {
            break End::Lost(e.to_string());
        }
        if shutdown.requested() {
            if let Some(r) = &run {
                r.stop.request();
            }
        }
        if let Some(r) = run.take_if(|r| r.handle.is_finished()) {
            let _ = r.handle.join();
            let _ = flush(framed, &out_rx, &mut last_sent, report);
            if shutdown.requested() {
                break End::Shutdown;
            }
        }
        if shutdown.requested() && run.is_none() {
            break End::Shutdown;
        }
        if last_sent.elapsed() >= HEARTBEAT {
            if framed.send(&Message::Alive).is_err() {
                break End::Lost("the connection broke".into());
            }
            last_sent = Instant::now();
        }
        let msg = match framed.recv(Duration::from_millis(20)) {
            Ok(Some(m)) => m,
            Ok(None) if last_heard.elapsed() > PEER_SILENT => {
                break End::Lost(format!("silent for {}s", PEER_SILENT.as_secs()))
            }
            Ok(None) => continue,
            Err(e) => break End::Lost(e.to_string()),
        };
        last_heard = Instant::now();
        match msg {
            Message::Ping { id } => {
                let pong = Message::Pong {
                    id,
                    clock_ns: monotonic_ns(),
                };
                if framed.send(&pong).is_err() {
                    break End::Lost("the connection broke".into());
                }
                last_sent = Instant::now();
            }
            Message::Prepare {
                step,
                options,
                segment,
            } => prepare(&mut run, step, &options, segment, &out_tx, report),
            Message::Start { step, at_ns } => {
                if let Some(r) = run.as_mut().filter(|r| r.step == step) {
                    if let Some(tx) = r.start.take() {
                        let _ = tx.send(at_ns);
                    }
                }
            }
            Message::Stop { step, hurry } => {
                if let Some(r) = run.as_ref().filter(|r| r.step == step) {
                    if hurry {
                        r.stop.hurry()
                    } else {
                        r.stop.request()
                    }
                }
            }
            Message::Bye => break End::Bye,
            Message::Refused { reason } => break End::Refused(reason),
            // Nothing else is for an agent; a confused coordinator is not a reason to stop.
            _ => {}
        }
    };
    if let Some(r) = run {
        r.abandon();
    }
    end
}

/// `Prepare`: starts step `step` on `segment` of `options` unless a step is still running
/// or the options do not resolve, which the coordinator is told as the step's failure.
fn prepare(
    run: &mut Option<Running>,
    step: u32,
    options: &LoadOptions,
    segment: Segment,
    out_tx: &Sender<Message>,
    report: &(dyn Fn(AgentEvent) + Sync),
) {
    if let Some(r) = run {
        let _ = out_tx.send(Message::Failed {
            step,
            reason: format!("still driving step {}", r.step),
        });
        return;
    }
    match options.resolve() {
        Err(e) => {
            report(AgentEvent::StepFailed {
                step,
                reason: e.to_string(),
            });
            let _ = out_tx.send(Message::Failed {
                step,
                reason: e.to_string(),
            });
        }
        Ok(mut spec) => {
            spec.segment = segment;
            report(AgentEvent::Step { step, segment });
            *run = Some(start_step(step, spec, out_tx.clone()));
        }
    }
}

fn flush(
    framed: &mut Framed,
    out: &Receiver<Message>,
    last_sent: &mut Instant,
    report: &(dyn Fn(AgentEvent) + Sync),
) -> std::io::Result<()> {
    while let Ok(m) = out.try_recv() {
        match &m {
            Message::Done { step, part } => report(AgentEvent::StepEnded {
                step: *step,
                requests: part.recorder.counts.total(),
            }),
            Message::Failed { step, reason } => report(AgentEvent::StepFailed {
                step: *step,
                reason: reason.clone(),
            }),
            _ => {}
        }
        framed.send(&m)?;
        *last_sent = Instant::now();
    }
    Ok(())
}

/// Drives `spec` on a thread of its own: `Ready` once connected, then the start it is given,
/// each second as it completes, and `Done` (or `Failed`) at the end.
fn start_step(step: u32, spec: meshbench_engine::LoadSpec, out: Sender<Message>) -> Running {
    let stop = Stop::new();
    let (start_tx, start_rx) = mpsc::channel::<u64>();
    let engine_stop = stop.clone();
    let handle = std::thread::spawn(move || {
        let ready_out = out.clone();
        let waiting = engine_stop.clone();
        let outcome = meshbench_engine::run_part(
            &spec,
            engine_stop,
            move || {
                let _ = ready_out.send(Message::Ready { step });
                match start_rx.recv_timeout(START_PATIENCE) {
                    Ok(at) => Some(at),
                    Err(_) => {
                        // No start came (the coordinator is gone or gave the step up).
                        waiting.hurry();
                        None
                    }
                }
            },
            |live| {
                for iv in live.seconds {
                    let _ = out.send(Message::Second {
                        step,
                        interval: Box::new(iv.clone()),
                    });
                }
            },
        );
        let _ = out.send(match outcome {
            Ok(mut part) => {
                // The tagged requests travel in the part: as many as one frame holds.
                part.recorder.traces.truncate(MAX_TRACES_SENT);
                Message::Done {
                    step,
                    part: Box::new(part),
                }
            }
            Err(e) => Message::Failed {
                step,
                reason: e.to_string(),
            },
        });
    });
    Running {
        step,
        stop,
        start: Some(start_tx),
        handle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_join_line_names_the_coordinator_once() {
        let e = AgentEvent::Joined {
            coordinator: "127.0.0.1:7700".into(),
            name: "coordinator 4242".into(),
        };
        assert_eq!(e.to_string(), "joined coordinator 4242 at 127.0.0.1:7700");
    }
}
