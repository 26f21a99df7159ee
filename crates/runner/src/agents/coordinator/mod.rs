//! The coordinator's side: a [`Fleet`] of agents held for a whole command (a run, an
//! experiment), and [`Fleet::measure`], one step driven by all of them and merged into one
//! result exactly as `engine::run` merges its threads.
//!
//! Each agent has one I/O thread (its control connection, heartbeats, clock probes); the
//! coordinating thread only plans, starts, merges and watches the deadline. A step:
//! 1. newcomers (agents that dialled in since, up to the fleet's size) join; missing dialled
//!    agents are dialled again;
//! 2. each agent's clock offset is measured (8 round trips, the shortest kept, as NTP does);
//! 3. agent i of n gets `Prepare(options, segment i of n)` and opens its connections;
//! 4. all ready, each gets `Start` at one instant, converted to its own clock;
//! 5. seconds are merged as they come (`engine::Seconds`), parts when they end (`engine::merge`).
//!
//! An agent that closes, breaks or goes quiet for [`PEER_SILENT`] is *lost*: its seconds so
//! far stay counted, the step ends on time without it and is partial, naming it and when.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use meshbench_engine::recorder::Interval;
use meshbench_engine::{Gathered, Live, LoadSpec, Seconds, Segment, Stop, StopAt};
use meshbench_net::clock::monotonic_ns;
use meshbench_results::RunResult;
use thiserror::Error;

use super::auth::{handshake, Hello, Side, Token};
use super::link::{Link, Tls};
use super::wire::{Framed, Message};
use super::{HandshakeError, PEER_SILENT};
use crate::LoadOptions;

mod pump;
mod share;

use pump::{pump, Command, Event, Tagged};
use share::{merge, AgentShare, Told};

const HANDSHAKE_WAIT: Duration = Duration::from_secs(5);
/// How often [`Fleet::gather`] looks at the stop while it waits for agents to dial in.
const GATHER_LOOK: Duration = Duration::from_millis(50);

/// How the coordinator meets its agents.
pub enum Reach {
    /// Listen and wait for `agents` to dial in (at most `wait`); later ones take the seats of
    /// lost ones at the next step, any beyond are refused.
    Listen {
        listener: TcpListener,
        agents: usize,
        wait: Duration,
    },
    /// Dial agents that listen; a lost one is dialled again before the next step.
    Dial(Vec<String>),
}

/// Why a fleet could not be gathered or a step not driven at all.
#[derive(Debug, Error)]
pub enum FleetError {
    #[error("only {joined} of {wanted} agents joined within {waited:?} (listening on {listen}); start the rest with `meshbench agent --coordinator {listen}`, or ask for fewer with --agents{turned_away}")]
    TooFew {
        joined: usize,
        wanted: usize,
        waited: Duration,
        listen: String,
        /// Why connections were turned away meanwhile (`; turned away ...`), if any were.
        turned_away: String,
    },
    #[error("agent {addr}: {why}")]
    Dial { addr: String, why: String },
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    #[error("no agent is left to drive the step")]
    NoAgents,
    /// A stop (Ctrl-C, SIGTERM) came while the agents were gathered.
    #[error("stopped while gathering the agents ({joined} of {wanted} joined)")]
    Stopped { joined: usize, wanted: usize },
    #[error("--connections {connections} cannot be divided over {agents} agents; give at least one connection per agent")]
    TooFewConnections { connections: usize, agents: usize },
    #[error("agent {name} cannot drive step {step}: {reason}")]
    AgentFailed {
        name: String,
        step: u32,
        reason: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One agent in the fleet.
struct Member {
    id: u64,
    name: String,
    address: String,
    /// Dialled agents: the address to dial again.
    dial: Option<String>,
    to: Sender<Command>,
    io: Option<JoinHandle<()>>,
    lost: bool,
}

/// A handshaken connection waiting to join at the next step.
struct Joiner {
    framed: Framed,
    hello: Hello,
}

/// The agents of one command.
pub struct Fleet {
    members: Vec<Member>,
    /// How many agents the fleet holds at most.
    seats: usize,
    events: (Sender<Tagged>, Receiver<Tagged>),
    joiners: Option<Receiver<Joiner>>,
    acceptor: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    token: Token,
    tls: Option<Tls>,
    name: String,
    next_id: u64,
    step: u32,
    notes: Arc<Mutex<Vec<String>>>,
    /// The largest control message sent to any agent so far, bytes.
    largest_message: Arc<AtomicUsize>,
}

impl Fleet {
    /// Gathers the agents: waits for them to dial in, or dials them. A `stop` ends the
    /// gathering within 50 ms while it waits, or before the next dial
    /// ([`FleetError::Stopped`]); the agents gathered so far are told the session is over.
    pub fn gather(
        reach: Reach,
        token: Token,
        tls: Option<Tls>,
        stop: &Stop,
    ) -> Result<Fleet, FleetError> {
        let name = format!(
            "coordinator {}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| std::process::id().to_string())
        );
        let mut fleet = Fleet {
            members: Vec::new(),
            seats: 0,
            events: mpsc::channel(),
            joiners: None,
            acceptor: None,
            token,
            tls,
            name,
            next_id: 0,
            step: 0,
            notes: Arc::default(),
            largest_message: Arc::default(),
        };
        let stopped = |fleet: &Fleet, wanted| FleetError::Stopped {
            joined: fleet.members.len(),
            wanted,
        };
        match reach {
            Reach::Dial(addrs) => {
                fleet.seats = addrs.len();
                for addr in addrs {
                    if stop.requested() {
                        return Err(stopped(&fleet, fleet.seats));
                    }
                    let (framed, hello) = fleet.dial(&addr)?;
                    fleet.add(framed, hello, Some(addr));
                }
            }
            Reach::Listen {
                listener,
                agents,
                wait,
            } => {
                fleet.seats = agents;
                let listen = listener.local_addr()?.to_string();
                fleet.listen(listener)?;
                let deadline = Instant::now() + wait;
                while fleet.members.len() < agents {
                    if stop.requested() {
                        return Err(stopped(&fleet, agents));
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    let joiners = fleet.joiners.as_ref().expect("listening");
                    match joiners.recv_timeout(left.min(GATHER_LOOK)) {
                        Ok(j) => fleet.add(j.framed, j.hello, None),
                        Err(_) if left.is_zero() => {
                            let turned_away: String = fleet
                                .take_notes()
                                .iter()
                                .map(|n| format!("; {n}"))
                                .collect();
                            return Err(FleetError::TooFew {
                                joined: fleet.members.len(),
                                wanted: agents,
                                waited: wait,
                                listen,
                                turned_away,
                            });
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        Ok(fleet)
    }

    /// Agents in the fleet now.
    pub fn len(&self) -> usize {
        self.members.iter().filter(|m| !m.lost).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest control message sent so far, bytes.
    pub fn largest_message(&self) -> usize {
        self.largest_message.load(Ordering::Relaxed)
    }

    /// Things worth a line that happened on the fleet's threads (a connection turned away).
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().expect("notes lock"))
    }

    fn note(&self, line: String) {
        self.notes.lock().expect("notes lock").push(line);
    }

    fn dial(&self, addr: &str) -> Result<(Framed, Hello), FleetError> {
        let fail = |why: String| FleetError::Dial {
            addr: addr.to_string(),
            why,
        };
        let sock = addr
            .to_socket_addrs()
            .map_err(|e| fail(e.to_string()))?
            .next()
            .ok_or_else(|| fail("no address".into()))?;
        let tcp = TcpStream::connect_timeout(&sock, Duration::from_secs(3)).map_err(|e| {
            fail(format!(
                "{e}; is `meshbench agent --listen {addr}` running?"
            ))
        })?;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut framed = Framed::new(
            Link::dialled(tcp, host, self.tls.as_ref()).map_err(|e| fail(e.to_string()))?,
        );
        let hello = handshake(
            &mut framed,
            &Hello::ours(Side::Coordinator, &self.name),
            &self.token,
            HANDSHAKE_WAIT,
        )?;
        Ok((framed, hello))
    }

    /// Accepts agents on their own threads (each handshake on its own, so that a slow or
    /// hostile connection holds nothing up) and queues them to join.
    fn listen(&mut self, listener: TcpListener) -> Result<(), FleetError> {
        listener.set_nonblocking(true)?;
        let (tx, rx) = mpsc::channel();
        let quit = Arc::new(AtomicBool::new(false));
        let (token, tls, notes) = (self.token.clone(), self.tls.clone(), self.notes.clone());
        let hello_name = self.name.clone();
        let stop = quit.clone();
        let handle = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let tcp = match listener.accept() {
                    Ok((tcp, _)) => tcp,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                };
                let _ = tcp.set_nonblocking(false);
                let (tx, token, tls, notes) =
                    (tx.clone(), token.clone(), tls.clone(), notes.clone());
                let ours = Hello::ours(Side::Coordinator, &hello_name);
                std::thread::spawn(move || {
                    let Ok(link) = Link::accepted(tcp, tls.as_ref()) else {
                        return;
                    };
                    let mut framed = Framed::new(link);
                    match handshake(&mut framed, &ours, &token, HANDSHAKE_WAIT) {
                        Ok(hello) => {
                            let _ = tx.send(Joiner { framed, hello });
                        }
                        Err(e) => notes
                            .lock()
                            .expect("notes lock")
                            .push(format!("turned away an agent: {e}")),
                    }
                });
            }
        });
        self.joiners = Some(rx);
        self.acceptor = Some((quit, handle));
        Ok(())
    }

    fn add(&mut self, framed: Framed, hello: Hello, dial: Option<String>) {
        let id = self.next_id;
        self.next_id += 1;
        let (to, commands) = mpsc::channel();
        let events = self.events.0.clone();
        let address = framed.peer();
        let largest = self.largest_message.clone();
        let io = std::thread::spawn(move || pump(id, framed, commands, events, &largest));
        self.members.push(Member {
            id,
            name: hello.name,
            address,
            dial,
            to,
            io: Some(io),
            lost: false,
        });
    }

    /// Before a step: lost agents leave, newcomers take free seats (the rest are refused),
    /// dialled agents that were lost are dialled once more.
    fn admit(&mut self) {
        let mut redial = Vec::new();
        for m in self.members.iter_mut().filter(|m| m.lost) {
            if let Some(h) = m.io.take() {
                let _ = h.join();
            }
            if let Some(addr) = m.dial.clone() {
                redial.push(addr);
            }
        }
        self.members.retain(|m| !m.lost);
        for addr in redial {
            match self.dial(&addr) {
                Ok((framed, hello)) => self.add(framed, hello, Some(addr)),
                Err(e) => self.note(format!("agent {addr} is still lost: {e}")),
            }
        }
        let Some(joiners) = &self.joiners else {
            return;
        };
        let waiting: Vec<Joiner> = joiners.try_iter().collect();
        for mut j in waiting {
            if self.members.len() < self.seats {
                self.note(format!("agent {} joined", j.hello.name));
                self.add(j.framed, j.hello, None);
            } else {
                let _ = j.framed.send(&Message::Refused {
                    reason: format!(
                        "the coordinator already has its {} agents; this one is not needed",
                        self.seats
                    ),
                });
                self.note(format!(
                    "refused agent {}: every seat is taken",
                    j.hello.name
                ));
            }
        }
    }

    fn send(&self, m: &Member, msg: Message) {
        let _ = m.to.send(Command::Send(msg));
    }

    /// Drives one step of `options` (resolved as `spec`, for the result's settings) over every
    /// agent, and merges what they measured. `on_live` sees the merged seconds as they come.
    pub fn measure(
        &mut self,
        options: &LoadOptions,
        spec: &LoadSpec,
        stop: &Stop,
        mut on_live: impl FnMut(&Live),
    ) -> Result<RunResult, FleetError> {
        let (agents, mut shares) = self.prepare(options)?;
        self.await_ready(&agents, &mut shares, options, stop)?;
        let (start, lead) = self.start_together(&agents, &shares);
        let wall_start = SystemTime::now() + Duration::from_nanos(lead) + spec.warmup;
        let gathered = self.merge_as_they_come(
            &agents,
            &mut shares,
            spec,
            stop,
            (start, lead),
            &mut on_live,
        );
        Ok(merge(
            spec,
            shares,
            gathered,
            start,
            wall_start,
            stop.requested(),
        ))
    }

    /// Steps 1 to 3: admits newcomers, measures each agent's clock, gives agent i of n its
    /// place (segment i of n) and sends it `Prepare`. Returns the members taking part (place
    /// index to member index) and their shares.
    fn prepare(
        &mut self,
        options: &LoadOptions,
    ) -> Result<(Vec<usize>, Vec<AgentShare>), FleetError> {
        self.admit();
        if self.members.is_empty() {
            return Err(FleetError::NoAgents);
        }
        let clocks = self.sync_clocks();
        let agents: Vec<usize> = (0..self.members.len())
            .filter(|&i| clocks.contains_key(&self.members[i].id))
            .collect();
        if agents.is_empty() {
            return Err(FleetError::NoAgents);
        }
        let n = agents.len();
        if options.connections < n {
            return Err(FleetError::TooFewConnections {
                connections: options.connections,
                agents: n,
            });
        }
        self.step += 1;
        let shares: Vec<AgentShare> = agents
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let m = &self.members[i];
                AgentShare::new(m, Segment::new(k as u64, n as u64), clocks[&m.id], options)
            })
            .collect();
        for s in &shares {
            let m = &self.members[agents[s.index]];
            self.send(
                m,
                Message::Prepare {
                    step: self.step,
                    options: Box::new(options.clone()),
                    segment: s.segment,
                },
            );
        }
        Ok((agents, shares))
    }

    /// Waits until every agent has connected (or is lost); an agent that failed stops them
    /// all, and nobody starts.
    fn await_ready(
        &mut self,
        agents: &[usize],
        shares: &mut [AgentShare],
        options: &LoadOptions,
        stop: &Stop,
    ) -> Result<(), FleetError> {
        let step = self.step;
        let ready_by =
            Instant::now() + options.timeout.max(Duration::from_secs(5)) + Duration::from_secs(30);
        let mut ready = vec![false; shares.len()];
        while ready
            .iter()
            .zip(shares.iter())
            .any(|(r, s)| !r && s.lost.is_none())
        {
            let left = ready_by.saturating_duration_since(Instant::now());
            if left.is_zero() || stop.requested() {
                for s in shares.iter_mut().filter(|s| s.lost.is_none()) {
                    s.lose("no ready in time".into(), 0.0);
                }
                break;
            }
            let Some((k, event)) = self.next_event(agents, left.min(Duration::from_millis(200)))
            else {
                continue;
            };
            match event {
                Event::Message(Message::Ready { step: s }) if s == step => ready[k] = true,
                Event::Message(Message::Failed { step: s, reason }) if s == step => {
                    self.stop_all(agents, step, true);
                    return Err(FleetError::AgentFailed {
                        name: shares[k].name.clone(),
                        step,
                        reason,
                    });
                }
                Event::Lost(why) => {
                    shares[k].lose(why, 0.0);
                    self.members[agents[k]].lost = true;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Step 4: one instant for all, far enough ahead for the slowest round trip, sent to each
    /// agent on its own clock. Returns the instant (the coordinator's monotonic clock, ns) and
    /// how far ahead it was set.
    fn start_together(&self, agents: &[usize], shares: &[AgentShare]) -> (u64, u64) {
        let worst_rtt = shares.iter().map(|s| s.round_trip_ns).max().unwrap_or(0);
        let lead = (3 * worst_rtt).max(50_000_000);
        let start = monotonic_ns() + lead;
        for s in shares.iter().filter(|s| s.lost.is_none()) {
            let at_ns = (start as i64 + s.offset_ns).max(0) as u64;
            self.send(
                &self.members[agents[s.index]],
                Message::Start {
                    step: self.step,
                    at_ns,
                },
            );
        }
        (start, lead)
    }

    /// Step 5: merges seconds as they come, until every agent is done or lost; passes on the
    /// caller's stop and hurry; loses agents that have not reported by the step's end.
    fn merge_as_they_come(
        &mut self,
        agents: &[usize],
        shares: &mut [AgentShare],
        spec: &LoadSpec,
        stop: &Stop,
        (start, lead): (u64, u64),
        on_live: &mut impl FnMut(&Live),
    ) -> Gathered {
        let step = self.step;
        let warmup_ns = spec.warmup.as_nanos() as u64;
        let deadline = match spec.stop {
            StopAt::Duration(d) => Some(
                Instant::now()
                    + Duration::from_nanos(lead)
                    + spec.warmup
                    + d
                    + spec.drain()
                    + PEER_SILENT
                    + Duration::from_secs(2),
            ),
            StopAt::Requests(_) => None,
        };
        let mut seconds = Seconds::new(shares.len());
        let mut gathered = Gathered::default();
        let mut completed: Vec<Interval> = Vec::new();
        for (k, s) in shares.iter().enumerate() {
            if s.lost.is_some() {
                seconds.gone(k, &mut completed);
            }
        }
        let mut told = Told::default();
        let elapsed = || monotonic_ns().saturating_sub(start);
        while shares.iter().any(|s| s.part.is_none() && s.lost.is_none()) {
            if stop.requested() && !told.stop || stop.hurried() && !told.hurry {
                told = Told {
                    stop: true,
                    hurry: stop.hurried(),
                };
                self.stop_all(agents, step, stop.hurried());
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                let at = elapsed() as f64 / 1e9;
                for (k, s) in shares.iter_mut().enumerate() {
                    if s.part.is_none() && s.lost.is_none() {
                        s.lose("no final report by the step's end".into(), at);
                        seconds.gone(k, &mut completed);
                    }
                }
                break;
            }
            if let Some((k, event)) = self.next_event(agents, Duration::from_millis(200)) {
                match event {
                    Event::Message(Message::Second { step: s, interval }) if s == step => {
                        shares[k].seen.add_second(&interval);
                        seconds.add(k, *interval, &mut completed);
                    }
                    Event::Message(Message::Done { step: s, part }) if s == step => {
                        shares[k].part = Some(*part);
                        seconds.gone(k, &mut completed);
                    }
                    Event::Message(Message::Failed { step: s, reason }) if s == step => {
                        shares[k].lose(format!("failed: {reason}"), elapsed() as f64 / 1e9);
                        seconds.gone(k, &mut completed);
                    }
                    Event::Lost(why) => {
                        if shares[k].part.is_none() && shares[k].lost.is_none() {
                            shares[k].lose(why, elapsed() as f64 / 1e9);
                            seconds.gone(k, &mut completed);
                        }
                        self.members[agents[k]].lost = true;
                    }
                    _ => {}
                }
            }
            completed.iter().for_each(|iv| gathered.push(iv));
            on_live(&gathered.live(elapsed(), warmup_ns, &completed));
            completed.clear();
        }
        seconds.finish(&mut completed);
        if !completed.is_empty() {
            completed.iter().for_each(|iv| gathered.push(iv));
            on_live(&gathered.live(elapsed(), warmup_ns, &completed));
        }
        gathered
    }

    /// The next event from one of the step's agents (`agents` maps place to member), as the
    /// place's index.
    fn next_event(&mut self, agents: &[usize], wait: Duration) -> Option<(usize, Event)> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.1.recv_timeout(left) {
                Ok((id, event)) => {
                    if let Some(k) = agents.iter().position(|&i| self.members[i].id == id) {
                        return Some((k, event));
                    }
                    if let (Event::Lost(_), Some(m)) =
                        (&event, self.members.iter_mut().find(|m| m.id == id))
                    {
                        m.lost = true;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    return None
                }
            }
        }
    }

    fn stop_all(&self, agents: &[usize], step: u32, hurry: bool) {
        for &i in agents {
            self.send(&self.members[i], Message::Stop { step, hurry });
        }
    }

    /// Every agent's clock offset; agents that do not answer are lost.
    fn sync_clocks(&mut self) -> BTreeMap<u64, (i64, u64)> {
        for m in &self.members {
            let _ = m.to.send(Command::Sync);
        }
        let mut clocks = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while clocks.len() + self.members.iter().filter(|m| m.lost).count() < self.members.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let Ok((id, event)) = self.events.1.recv_timeout(left) else {
                break;
            };
            match event {
                Event::Clock {
                    offset_ns,
                    round_trip_ns,
                } => {
                    clocks.insert(id, (offset_ns, round_trip_ns));
                }
                Event::Lost(why) => {
                    if let Some(m) = self.members.iter_mut().find(|m| m.id == id) {
                        m.lost = true;
                        let line = format!("agent {} lost before the step: {why}", m.name);
                        self.note(line);
                    }
                }
                Event::Message(_) => {}
            }
        }
        clocks
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some((quit, handle)) = self.acceptor.take() {
            quit.store(true, Ordering::Relaxed);
            let _ = handle.join();
        }
        for mut j in self.joiners.iter().flat_map(|j| j.try_iter()) {
            let _ = j.framed.send(&Message::Refused {
                reason: "the coordinator's session is over".into(),
            });
        }
        for m in &self.members {
            let _ = m.to.send(Command::Close);
        }
        for m in &mut self.members {
            if let Some(h) = m.io.take() {
                let _ = h.join();
            }
        }
    }
}
