//! An agent's I/O thread: the one owner of its control connection. It sends what the fleet
//! orders ([`Command`]), forwards what the agent says ([`Event`]), pings it, measures its clock
//! next to the socket, and reports it lost when it closes, breaks or goes quiet.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use meshbench_net::clock::monotonic_ns;
use thiserror::Error;

use super::super::wire::{Framed, Message};
use super::super::{HEARTBEAT, PEER_SILENT};

/// Clock probes per agent and step.
const SYNC_ROUNDS: u32 = 8;

/// Orders to an agent's I/O thread.
pub(super) enum Command {
    Send(Message),
    /// Measure the clock offset (the thread does the round trips itself, so that the times
    /// are taken next to the socket).
    Sync,
    Close,
}

/// What an agent's I/O thread reports.
pub(super) enum Event {
    Message(Message),
    Clock { offset_ns: i64, round_trip_ns: u64 },
    Lost(String),
}

/// An event and the id of the agent it is from.
pub(super) type Tagged = (u64, Event);

/// An agent's control connection: sends what the fleet says, forwards what the agent says,
/// pings every second, and reports the agent lost when it closes, breaks or goes quiet.
/// Keeps `largest` at the largest message sent.
pub(super) fn pump(
    id: u64,
    mut framed: Framed,
    commands: Receiver<Command>,
    events: Sender<Tagged>,
    largest: &AtomicUsize,
) {
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    let lost = |why: String| {
        let _ = events.send((id, Event::Lost(why)));
    };
    loop {
        loop {
            match commands.try_recv() {
                Ok(Command::Send(m)) => {
                    if let Err(e) = framed.send(&m) {
                        lost(format!("cannot send: {e}"));
                        return;
                    }
                    last_sent = Instant::now();
                    largest.fetch_max(framed.largest_sent, Ordering::Relaxed);
                }
                Ok(Command::Sync) => match probe(&mut framed, id, &events) {
                    Ok((offset_ns, round_trip_ns)) => {
                        last_heard = Instant::now();
                        let _ = events.send((
                            id,
                            Event::Clock {
                                offset_ns,
                                round_trip_ns,
                            },
                        ));
                    }
                    Err(why) => {
                        lost(why.to_string());
                        return;
                    }
                },
                Ok(Command::Close) | Err(mpsc::TryRecvError::Disconnected) => {
                    let _ = framed.send(&Message::Bye);
                    return;
                }
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        if last_sent.elapsed() >= HEARTBEAT {
            if framed.send(&Message::Ping { id: 0 }).is_err() {
                lost("the connection broke".into());
                return;
            }
            last_sent = Instant::now();
        }
        match framed.recv(Duration::from_millis(20)) {
            Ok(Some(m)) => {
                last_heard = Instant::now();
                match m {
                    Message::Alive | Message::Pong { .. } => {}
                    m => {
                        let _ = events.send((id, Event::Message(m)));
                    }
                }
            }
            Ok(None) if last_heard.elapsed() > PEER_SILENT => {
                lost(format!("silent for {}s", PEER_SILENT.as_secs()));
                return;
            }
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                lost("it closed the connection".into());
                return;
            }
            Err(e) => {
                lost(e.to_string());
                return;
            }
        }
    }
}

/// Why a clock probe failed: the agent is reported lost with this text.
#[derive(Debug, Error)]
enum ProbeError {
    #[error("cannot send: {0}")]
    Send(#[source] std::io::Error),
    #[error("no answer to a clock probe within 2s")]
    NoAnswer,
    #[error(transparent)]
    Recv(std::io::Error),
}

/// Round trips to the agent's clock: its offset (its clock minus ours) from the shortest.
fn probe(
    framed: &mut Framed,
    id: u64,
    events: &Sender<(u64, Event)>,
) -> Result<(i64, u64), ProbeError> {
    let mut best: Option<(i64, u64)> = None;
    for round in 1..=SYNC_ROUNDS {
        let t0 = monotonic_ns();
        framed
            .send(&Message::Ping { id: round })
            .map_err(ProbeError::Send)?;
        let answered = loop {
            match framed.recv(Duration::from_secs(2)) {
                Ok(Some(Message::Pong { id: r, clock_ns })) if r == round => break clock_ns,
                Ok(Some(Message::Pong { .. } | Message::Alive)) => {}
                Ok(Some(m)) => {
                    let _ = events.send((id, Event::Message(m)));
                }
                Ok(None) => return Err(ProbeError::NoAnswer),
                Err(e) => return Err(ProbeError::Recv(e)),
            }
        };
        let t2 = monotonic_ns();
        let rtt = t2 - t0;
        let offset = answered as i64 - (t0 + rtt / 2) as i64;
        if best.is_none_or(|(_, r)| rtt < r) {
            best = Some((offset, rtt));
        }
    }
    Ok(best.expect("at least one round"))
}
