//! The request loop: one thread, one epoll, a share of the connections, one pacer, one recorder,
//! for every protocol.
//!
//! A connection offers *slots*: one for HTTP/1.1, `--streams` for HTTP/2. Free slots wait in one
//! queue, longest-free first; a due request takes the first free slot whose connection is open
//! to its host (or, failing that, one whose connection can be re-aimed), so that a request always
//! travels on a connection whose TLS name matches its URL. A request that finds no slot waits,
//! and its latency still counts from its intended time.
//!
//! Per plain HTTP/1.1 request the loop makes one `send` and one `recv` and shares one
//! `epoll_pwait2` with every other socket that became ready at the same moment; there is no
//! timer per request (timeouts are found by a periodic scan) and no allocation. TLS goes through
//! rustls on the same sockets; HTTP/2 through the h2 crate, polled by this loop (see
//! [`crate::h2conn`]).
//!
//! A response ends when the kernel says its last segment arrived (`SO_TIMESTAMPNS`), not when the
//! loop got round to reading it. That lets an open HTTP/1.1 loop with free connections sleep
//! until its next send and pick up the responses that came in meanwhile: one wake-up per request
//! instead of two, with latency exact to the kernel's clock. When a request would have to wait
//! for a connection (or in a closed loop, over HTTP/2, or while draining) the loop wakes on every
//! arrival instead.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use meshbench_net::clock::{thread_cpu_ns, Clock};
use meshbench_net::http1::{Progress, ResponseReader};
use meshbench_net::poller::{Interest, Poller};
use meshbench_net::rng::SplitMix64;
use meshbench_net::socket::{self, Connect};
use meshbench_net::stream::{self, Handshake, IoState, Stream};

use crate::h2conn::{H2Conn, H2Stream, StreamPoll};
use crate::pacer::Pacer;
use crate::recorder::{ErrorKind, Interval, Recorder};
use crate::spec::{ConnSpec, Order, Protocol, Targets, Wire};

const SECOND: u64 = 1_000_000_000;
/// A send later than this while a connection was free means the generator fell behind.
const LATE_NS: u64 = 1_000_000;
/// First and last pause after a failed connect or handshake, so that a dead target is not
/// hammered in a tight loop (the wait is part of the next request's latency).
const BACKOFF_MIN_NS: u64 = 1_000_000;
const BACKOFF_MAX_NS: u64 = 100_000_000;
/// Longest sleep in the loop, so that a stop request is seen promptly.
const MAX_WAIT_NS: u64 = 50_000_000;
/// While sleeping through arrivals, requests in flight are looked at at least this often, so
/// connections come free promptly even at low rates.
const LAZY_READ_NS: u64 = 1_000_000;
/// While sleeping through arrivals, the loop wakes at most this often: at high rates the requests
/// due in between go out together, at most this late (the schedule lag shows it; latency still
/// counts from the intended time). At 20,000 wake-ups a second the rest is syscalls.
const WAKE_EVERY_NS: u64 = 50_000;
/// `--connection-rate` tokens older than this are dropped.
const TOKEN_LAPSE_NS: u64 = 100_000_000;
/// How many free slots a request looks through for a connection already open to its host.
const HOST_SCAN: usize = 64;

/// One worker's part of a run.
pub struct WorkerPlan {
    pub targets: Arc<Targets>,
    pub conn: ConnSpec,
    pub connections: usize,
    /// Requests this worker may have in flight (every slot unless `--concurrency` caps it).
    pub max_in_flight: usize,
    pub pacer: Pacer,
    /// Paces new connections (`--connection-rate`), if limited.
    pub connect_pacer: Option<Pacer>,
    /// Where this worker starts in the target list (round-robin) and its random stream.
    pub first_target: usize,
    pub seed: u64,
    /// Measured requests this worker may start (`-n`), if bounded.
    pub budget: Option<u64>,
    /// Run-clock time at which measurement starts (after the warm-up).
    pub measure_start: u64,
    /// Run-clock time at which sending stops, if bounded by duration.
    pub send_until: Option<u64>,
    pub timeout_ns: u64,
    pub drain_ns: u64,
}

/// What a worker hands back when it ends.
pub struct WorkerReport {
    pub recorder: Recorder,
    /// CPU time of this thread during the measured window.
    pub cpu_ns: u64,
    /// Wall time of the measured window as this worker saw it.
    pub window_ns: u64,
}

/// Messages a worker sends while it runs.
pub enum WorkerEvent {
    /// Pre-connection is done; the worker waits for the start signal.
    Ready,
    /// One second (or the final part of one) of the measured window.
    Interval(Interval),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket; opens when a request needs it.
    Closed,
    /// Non-blocking TCP connect under way.
    Connecting,
    /// TLS or HTTP/2 handshake under way.
    Handshaking,
    /// Requests can go out.
    Ready,
}

struct Conn {
    state: State,
    host: u32,
    fd: RawFd,
    /// The HTTP/1.1 byte stream (HTTP/2 connections hand theirs to `h2`).
    stream: Option<Stream>,
    h2: Option<H2Conn>,
    io: Option<Rc<IoState>>,
    /// Requests waiting for this connection to be ready (or for a free HTTP/2 stream).
    waiting: VecDeque<u32>,
    in_flight: u32,
    /// Requests started on this connection (for `--requests-per-connection`), and answered.
    started: u64,
    answered: u64,
    /// Takes no more requests; closes when the last one is answered.
    draining: bool,
    /// The socket is watched for writability too.
    want_write: bool,
    /// HTTP/2: requests were queued outside an event; the connection must be polled to write them.
    dirty: bool,
    /// Socket bytes already added to the recorder.
    counted_in: u64,
    counted_out: u64,
    /// When `connect()` was called and when TCP completed (run clock).
    opened_at: u64,
    tcp_at: u64,
    backoff_ns: u64,
    retry_at: u64,
}

struct Slot {
    busy: bool,
    target: u32,
    /// Intended and actual send times of the request.
    intended: u64,
    sent: u64,
    measured: bool,
    /// HTTP/1.1: bytes of the request written so far, and the response parser.
    written: usize,
    reader: ResponseReader,
    h2: Option<H2Stream>,
    /// An HTTP/1.1 transfer is half done.
    streaming: bool,
    /// When this slot last became free (to tell generator lag from queueing).
    free_since: u64,
}

/// Shared between the run and its workers.
pub struct Control {
    pub clock: Clock,
    /// Set by a signal or by the caller: stop sending, drain, report.
    pub stop: Arc<AtomicBool>,
    /// Run-clock time at which the workers start (set once all are connected).
    pub start_at: std::sync::atomic::AtomicU64,
    pub started: std::sync::Barrier,
}

/// A request taken from the pacer that has not found a slot yet.
#[derive(Clone, Copy)]
struct Due {
    intended: u64,
    measured: bool,
    target: u32,
}

struct Worker<'a> {
    plan: WorkerPlan,
    /// The run's requests and hosts (immutable; borrowed so the hot path clones nothing).
    targets: &'a Targets,
    ctl: &'a Control,
    poller: Poller,
    conns: Vec<Conn>,
    slots: Vec<Slot>,
    /// Slots per connection.
    streams: usize,
    /// Free slots, longest-free first. May hold stale entries (slots taken through `by_host`
    /// since), skipped when met; `free_count` is the true number of free slots.
    free: VecDeque<u32>,
    free_count: usize,
    /// With several hosts: per host, free slots whose connection was open to it when freed
    /// (checked when taken), so that a request finds a connection to its host in O(1).
    by_host: HashMap<u32, Vec<u32>>,
    by_host_entries: usize,
    /// A due request waiting for a slot on a connection that suits it.
    held: Option<Due>,
    /// Connections waiting out a connect back-off.
    backing_off: Vec<u32>,
    /// HTTP/2 connections with requests queued since their last poll.
    dirty: Vec<u32>,
    rec: Recorder,
    interval: Interval,
    next_second: u64,
    sending: bool,
    in_flight: usize,
    buf: Box<[u8]>,
    /// Connections in the middle of a transfer: the loop must not sleep through them.
    streaming: usize,
    /// The kernel stamps received data (cleared at the first read without a stamp). Without it
    /// the loop never sleeps through arrivals, which would otherwise add to latency.
    timestamps: bool,
    /// CLOCK_REALTIME minus the run clock, refreshed at every wake-up, to place kernel receive
    /// timestamps on the run clock.
    realtime_offset: i64,
    next_target: usize,
    rng: SplitMix64,
    /// Whether the worker is in its measured window (connection figures count from then).
    measuring: bool,
}

/// A kernel receive timestamp (CLOCK_REALTIME ns) on the run clock, given realtime minus run
/// clock at the last wake-up.
fn on_run_clock(stamp: u64, realtime_offset: i64) -> u64 {
    (stamp as i64 - realtime_offset).max(0) as u64
}

/// Runs one worker to completion.
pub fn run_worker(
    plan: WorkerPlan,
    ctl: &Control,
    events: Sender<WorkerEvent>,
) -> io::Result<WorkerReport> {
    let poller = match Poller::new(1024) {
        Ok(p) => p,
        Err(e) => {
            // Still take part in the start barrier, or the other threads would wait forever.
            let _ = events.send(WorkerEvent::Ready);
            ctl.started.wait();
            return Err(e);
        }
    };
    let targets = Arc::clone(&plan.targets);
    let streams = match plan.conn.protocol {
        Protocol::Http1 => 1,
        Protocol::Http2 => plan.conn.streams.max(1),
    };
    let mut w = Worker {
        poller,
        conns: Vec::with_capacity(plan.connections),
        slots: Vec::with_capacity(plan.connections * streams),
        streams,
        free: VecDeque::with_capacity(plan.connections * streams),
        free_count: 0,
        by_host: HashMap::new(),
        by_host_entries: 0,
        held: None,
        backing_off: Vec::new(),
        dirty: Vec::new(),
        rec: Recorder::new(),
        interval: Interval::new(0),
        next_second: plan.measure_start + SECOND,
        sending: true,
        in_flight: 0,
        buf: vec![0u8; 64 * 1024].into_boxed_slice(),
        realtime_offset: 0,
        streaming: 0,
        timestamps: true,
        next_target: plan.first_target,
        rng: SplitMix64(plan.seed),
        measuring: false,
        targets: &targets,
        plan,
        ctl,
    };
    meshbench_net::clock::set_timer_slack(1_000);
    w.preconnect();
    let _ = events.send(WorkerEvent::Ready);
    ctl.started.wait();
    let base = ctl.start_at.load(Ordering::Acquire);
    w.shift_times(base);
    // Nothing goes out before the common start (a closed loop would otherwise send early).
    let early = base.saturating_sub(ctl.clock.now());
    if early > 0 {
        std::thread::sleep(Duration::from_nanos(early));
    }
    w.event_loop(&events)
}

impl Worker<'_> {
    /// Opens every connection (to the host of the first requests) before the clock starts, so
    /// that the first requests do not pay for the handshakes. Connections that fail stay closed
    /// and are retried when used.
    fn preconnect(&mut self) {
        let deadline = self.ctl.clock.now() + self.plan.timeout_ns.min(5 * SECOND);
        let first_host = self
            .plan
            .targets
            .requests
            .get(self.plan.first_target)
            .map_or(0, |t| t.host);
        for i in 0..self.plan.connections {
            self.conns.push(Conn {
                state: State::Closed,
                host: first_host,
                fd: -1,
                stream: None,
                h2: None,
                io: None,
                waiting: VecDeque::new(),
                in_flight: 0,
                started: 0,
                answered: 0,
                draining: false,
                want_write: false,
                dirty: false,
                counted_in: 0,
                counted_out: 0,
                opened_at: 0,
                tcp_at: 0,
                backoff_ns: 0,
                retry_at: 0,
            });
            for _ in 0..self.streams {
                self.slots.push(Slot {
                    busy: false,
                    target: 0,
                    intended: 0,
                    sent: 0,
                    measured: false,
                    written: 0,
                    reader: ResponseReader::default(),
                    h2: None,
                    streaming: false,
                    free_since: 0,
                });
            }
            // A pool larger than the concurrency opens the rest on demand.
            if i * self.streams < self.plan.max_in_flight {
                let _ = self.open(i as u32, 0);
            }
        }
        loop {
            let now = self.ctl.clock.now();
            let pending = self
                .conns
                .iter()
                .any(|c| matches!(c.state, State::Connecting | State::Handshaking));
            if !pending || now >= deadline {
                break;
            }
            let n = self
                .poller
                .wait(Some(Duration::from_millis(10)))
                .unwrap_or(0);
            for e in 0..n {
                let ev = self.poller.event(e);
                self.on_event(ev.token as u32, ev.readable || ev.closed, ev.writable, now);
            }
        }
        for i in 0..self.conns.len() {
            if self.conns[i].state != State::Ready {
                self.close(i as u32);
            }
            self.conns[i].backoff_ns = 0;
            self.conns[i].retry_at = 0;
        }
        self.backing_off.clear();
        for s in 0..self.slots.len() as u32 {
            self.free_count += 1;
            self.free.push_back(s);
            self.index_by_host(s);
        }
    }

    fn many_hosts(&self) -> bool {
        self.targets.hosts.len() > 1
    }

    /// Files free slot `s` under its connection's host, if the connection is open.
    fn index_by_host(&mut self, s: u32) {
        if !self.many_hosts() {
            return;
        }
        let conn = &self.conns[s as usize / self.streams];
        if conn.state == State::Closed {
            return;
        }
        self.by_host.entry(conn.host).or_default().push(s);
        self.by_host_entries += 1;
        if self.by_host_entries > 4 * self.slots.len() + 64 {
            // Stale entries of hosts seldom asked for: rebuild from the free slots.
            self.by_host.clear();
            self.by_host_entries = 0;
            for slot in 0..self.slots.len() {
                let conn = &self.conns[slot / self.streams];
                if !self.slots[slot].busy && conn.state != State::Closed {
                    self.by_host.entry(conn.host).or_default().push(slot as u32);
                    self.by_host_entries += 1;
                }
            }
        }
    }

    /// Worker times were planned relative to 0; the run starts at `base`.
    fn shift_times(&mut self, base: u64) {
        let p = &mut self.plan;
        p.measure_start += base;
        p.send_until = p.send_until.map(|t| t + base);
        self.next_second = p.measure_start + SECOND;
        for pacer in [Some(&mut p.pacer), p.connect_pacer.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Pacer::Open(s) = pacer {
                s.shift(base);
            }
        }
        for s in &mut self.slots {
            s.free_since = base;
        }
    }

    /// Starts a TCP connection for conn `c` to its host; leaves it Connecting, or further if
    /// the connect completed at once. On failure the connection stays Closed.
    fn open(&mut self, c: u32, now: u64) -> Result<(), io::Error> {
        let addr = self.targets.hosts[self.conns[c as usize].host as usize].addr;
        if self.measuring {
            self.rec.conns.opened += 1;
        }
        let (fd, done) = match socket::connect(&addr)? {
            Connect::Done(fd) => (fd, true),
            Connect::InProgress(fd) => (fd, false),
        };
        let raw = fd.as_raw_fd();
        self.poller.add(
            raw,
            c as u64,
            if done {
                Interest::READ
            } else {
                Interest::WRITE
            },
        )?;
        // Without timestamps the loop falls back to its own clock and stays awake for arrivals.
        if socket::enable_rx_timestamps(raw).is_err() {
            self.timestamps = false;
        }
        let conn = &mut self.conns[c as usize];
        conn.fd = raw;
        conn.want_write = !done;
        conn.opened_at = now;
        conn.started = 0;
        conn.answered = 0;
        conn.draining = false;
        conn.state = State::Connecting;
        // Until TLS or h2 takes it over, the plain stream owns the socket.
        let stream = Stream::plain(fd);
        conn.io = Some(stream.state());
        conn.counted_in = 0;
        conn.counted_out = 0;
        conn.stream = Some(stream);
        if done {
            self.tcp_connected(c, now);
        }
        Ok(())
    }

    /// TCP is up: record the connect time and start TLS, HTTP/2, or go.
    fn tcp_connected(&mut self, c: u32, now: u64) {
        let conn = &mut self.conns[c as usize];
        conn.tcp_at = now;
        if self.measuring {
            self.rec
                .conns
                .connect
                .saturating_record((now - conn.opened_at) / 1000);
        }
        if let Some(config) = &self.plan.conn.tls {
            let host = &self.targets.hosts[conn.host as usize];
            let name = host
                .server_name
                .clone()
                .unwrap_or_else(|| rustls::pki_types::ServerName::IpAddress(host.addr.ip().into()));
            let session = match rustls::ClientConnection::new(config.clone(), name) {
                Ok(s) => s,
                Err(e) => {
                    let msg = meshbench_net::tls::describe_error(&e);
                    return self.fail_conn(c, ErrorKind::Tls, Some(&msg), now);
                }
            };
            let plain = conn.stream.take().expect("an open connection has a stream");
            conn.stream = Some(plain.into_tls(session));
            conn.state = State::Handshaking;
            self.drive_tls(c, now);
        } else {
            self.transport_ready(c, now);
        }
    }

    /// Advances a TLS handshake; when done, records it and moves on.
    fn drive_tls(&mut self, c: u32, now: u64) {
        let conn = &mut self.conns[c as usize];
        let stream = conn
            .stream
            .as_mut()
            .expect("a handshaking connection has a stream");
        match stream.handshake() {
            Ok(Handshake::Pending { want_write }) => self.set_write_interest(c, want_write),
            Ok(Handshake::Done) => {
                let session = stream.session().expect("TLS stream");
                let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
                if self.measuring {
                    let conns = &mut self.rec.conns;
                    conns.handshakes += 1;
                    conns.resumed += resumed as u64;
                    conns
                        .handshake
                        .saturating_record((now - conn.tcp_at) / 1000);
                }
                if self.plan.conn.protocol == Protocol::Http2 && alpn.as_deref() != Some(b"h2") {
                    let chose = alpn.map_or("no protocol".to_string(), |p| {
                        String::from_utf8_lossy(&p).into_owned()
                    });
                    let msg = format!("the server refused h2 over ALPN (it chose {chose})");
                    return self.fail_conn(c, ErrorKind::Tls, Some(&msg), now);
                }
                self.transport_ready(c, now);
            }
            Err(e) => {
                let (kind, msg) = match stream::tls_error(&e) {
                    Some(t) => (ErrorKind::Tls, meshbench_net::tls::describe_error(t)),
                    None => (
                        ErrorKind::Tls,
                        format!("connection lost during the handshake ({e})"),
                    ),
                };
                self.fail_conn(c, kind, Some(&msg), now);
            }
        }
    }

    /// The byte stream is up: HTTP/1.1 can send; HTTP/2 starts its own handshake.
    fn transport_ready(&mut self, c: u32, now: u64) {
        let conn = &mut self.conns[c as usize];
        match self.plan.conn.protocol {
            Protocol::Http1 => {
                conn.state = State::Ready;
                self.set_write_interest(c, false);
                self.send_waiting(c, now);
            }
            Protocol::Http2 => {
                let stream = conn.stream.take().expect("an open connection has a stream");
                conn.h2 = Some(H2Conn::start(stream));
                conn.state = State::Handshaking;
                self.drive_h2(c, now);
            }
        }
    }

    fn set_write_interest(&mut self, c: u32, on: bool) {
        let conn = &mut self.conns[c as usize];
        if conn.want_write != on && conn.fd >= 0 {
            conn.want_write = on;
            let interest = if on { Interest::BOTH } else { Interest::READ };
            let _ = self.poller.modify(conn.fd, c as u64, interest);
        }
    }

    /// Adds the bytes conn `c` moved since the last look to the recorder (measured window only).
    fn account(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let Some(io) = &conn.io else {
            return;
        };
        let (i, o) = (io.bytes_in.get(), io.bytes_out.get());
        if self.measuring {
            self.rec.bytes_received += i - conn.counted_in;
            self.rec.bytes_sent += o - conn.counted_out;
        }
        conn.counted_in = i;
        conn.counted_out = o;
    }

    /// Closes conn `c` (whatever state), leaving its requests to the caller.
    fn close(&mut self, c: u32) {
        self.account(c);
        let conn = &mut self.conns[c as usize];
        conn.stream = None; // closing the fd also removes it from epoll
        conn.h2 = None;
        conn.io = None;
        conn.fd = -1;
        conn.state = State::Closed;
        conn.want_write = false;
        conn.draining = false;
        let streams = self.streams;
        for s in c as usize * streams..(c as usize + 1) * streams {
            let slot = &mut self.slots[s];
            slot.reader.reset();
            slot.h2 = None;
            slot.written = 0;
            self.set_streaming(s as u32, false);
        }
    }

    /// Keeps the count of HTTP/1.1 transfers half done (a request not fully written or a
    /// response partly read): the loop must not sleep through them.
    fn set_streaming(&mut self, s: u32, on: bool) {
        let slot = &mut self.slots[s as usize];
        if slot.streaming != on {
            slot.streaming = on;
            if on {
                self.streaming += 1;
            } else {
                self.streaming -= 1;
            }
        }
    }

    fn event_loop(&mut self, events: &Sender<WorkerEvent>) -> io::Result<WorkerReport> {
        let clock = self.ctl.clock;
        let timeout = self.plan.timeout_ns;
        let scan_every = (timeout / 20).clamp(1_000_000, 100_000_000);
        let mut next_scan = 0;
        let mut cpu_at_start: Option<u64> = None;
        let mut drain_until = u64::MAX;
        let mut now = clock.now();
        let mut last_wake = 0;
        let lazy_protocol = self.plan.conn.protocol == Protocol::Http1;
        loop {
            if cpu_at_start.is_none() && now >= self.plan.measure_start {
                cpu_at_start = Some(thread_cpu_ns());
                self.measuring = true;
            }
            if self.sending && self.ctl.stop.load(Ordering::Relaxed) {
                self.stop_sending(now);
            }
            if self.sending && self.plan.send_until.is_some_and(|end| now >= end) {
                // A late wake-up must not lose the arrivals intended before the end: they go
                // out now (late, and measured from their intended times), then sending stops.
                self.dispatch(now);
                self.stop_sending(now);
            }
            if self.sending {
                self.dispatch(now);
            }
            if !self.dirty.is_empty() {
                self.flush_dirty(now);
            }
            if !self.sending {
                if drain_until == u64::MAX {
                    drain_until = now + self.plan.drain_ns;
                }
                if self.in_flight == 0 || now >= drain_until {
                    break;
                }
            }
            if now >= next_scan {
                self.expire(now, timeout);
                next_scan = now + scan_every;
            }
            if now >= self.next_second {
                self.flush_interval(events);
            }
            let lazy = lazy_protocol && self.may_sleep_through_arrivals();
            let mut wake = self.next_wake(now, next_scan, drain_until);
            if lazy {
                if self.in_flight > 0 {
                    wake = wake.min(now + LAZY_READ_NS);
                }
                wake = wake.max(last_wake + WAKE_EVERY_NS);
            }
            let wait = Duration::from_nanos(wake.saturating_sub(now));
            let n = if lazy {
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                self.poller.wait(Some(Duration::ZERO))?
            } else {
                self.poller.wait(Some(wait))?
            };
            now = clock.now();
            last_wake = now;
            self.realtime_offset = meshbench_net::clock::realtime_ns() as i64 - now as i64;
            for e in 0..n {
                let ev = self.poller.event(e);
                let c = ev.token as u32;
                self.on_event(c, ev.readable || ev.closed, ev.writable, now);
                self.account(c);
            }
            if !self.backing_off.is_empty() {
                self.end_backoffs(now);
            }
        }
        let end = clock.now();
        self.rec.unfinished += self.in_flight as u64;
        self.flush_interval(events);
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu_at_start.unwrap_or_else(thread_cpu_ns));
        Ok(WorkerReport {
            recorder: std::mem::take(&mut self.rec),
            cpu_ns,
            window_ns: end.saturating_sub(self.plan.measure_start),
        })
    }

    /// When something is next due: the pacer (if a slot is free for it), a held request's
    /// connection token, a second boundary, a timeout scan, the end of sending, a connect
    /// back-off, the end of the drain.
    fn next_wake(&self, now: u64, next_scan: u64, drain_until: u64) -> u64 {
        let mut wake = self.next_second.min(next_scan).min(now + MAX_WAIT_NS);
        if self.sending {
            if self.held.is_some() {
                if let Some(p) = &self.plan.connect_pacer {
                    wake = wake.min(p.wake_at().unwrap_or(u64::MAX));
                }
            } else if self.free_count > 0 {
                wake = wake.min(self.plan.pacer.wake_at().unwrap_or(u64::MAX));
            }
            if let Some(end) = self.plan.send_until.filter(|&end| end > now) {
                wake = wake.min(end);
            }
        } else {
            wake = wake.min(drain_until);
        }
        let backoff = self
            .backing_off
            .iter()
            .map(|&c| self.conns[c as usize].retry_at)
            .min();
        wake.min(backoff.unwrap_or(u64::MAX))
    }

    /// Whether the loop may sleep until its next send and read what arrived meanwhile (see the
    /// module header): an open loop, sending, with a free slot, no transfer half done, and
    /// kernel receive timestamps to date the arrivals.
    fn may_sleep_through_arrivals(&self) -> bool {
        self.sending
            && self.plan.pacer.is_open()
            && self.free_count > 0
            && self.held.is_none()
            && self.streaming == 0
            && self.timestamps
    }

    /// Stops sending. Open-loop requests that were due but never sent (no connection came free
    /// in time) count as unfinished, so that a stalled target cannot hide them.
    fn stop_sending(&mut self, now: u64) {
        self.sending = false;
        if let Some(d) = self.held.take() {
            if d.measured {
                self.rec.unfinished += 1;
            }
        }
        if !self.plan.pacer.is_open() {
            return;
        }
        let until = self
            .plan
            .send_until
            .map_or(now, |end| now.min(end.saturating_sub(1)));
        while let Some(t) = self.plan.pacer.due(until) {
            if t >= self.plan.measure_start {
                self.rec.unfinished += 1;
            }
        }
    }

    /// Hands out due requests to free slots.
    fn dispatch(&mut self, now: u64) {
        while self.free_count > 0 && self.sending && self.in_flight < self.plan.max_in_flight {
            let due = match self.held.take() {
                Some(d) => d,
                None => match self.next_request(now) {
                    Some(d) => d,
                    None => return,
                },
            };
            let host = self.targets.requests[due.target as usize].host;
            let Some(s) = self.pick_slot(host, now) else {
                self.held = Some(due);
                return;
            };
            self.free_count -= 1;
            self.start(s, due, now);
        }
    }

    /// The free slot a request for `host` should take: one whose connection is open to that
    /// host (by the host index, or among the longest-free), else the longest-free one whose
    /// connection is idle and may be re-aimed. Re-aiming or reopening a connection needs a
    /// connection token when `--connection-rate` is set.
    fn pick_slot(&mut self, host: u32, now: u64) -> Option<u32> {
        let indexed = if self.by_host.is_empty() {
            None
        } else {
            self.by_host.get_mut(&host)
        };
        if let Some(list) = indexed {
            while let Some(s) = list.pop() {
                self.by_host_entries -= 1;
                let conn = &self.conns[s as usize / self.streams];
                let usable = !self.slots[s as usize].busy
                    && conn.host == host
                    && conn.state != State::Closed
                    && !conn.draining
                    && conn.retry_at <= now;
                if usable {
                    // Its entry in `free` is now stale and will be skipped.
                    return Some(s);
                }
            }
        }
        // Drop stale entries at the front, then look at the longest-free slots.
        while self
            .free
            .front()
            .is_some_and(|&s| self.slots[s as usize].busy)
        {
            self.free.pop_front();
        }
        let mut reusable = None;
        for (pos, &s) in self.free.iter().take(HOST_SCAN).enumerate() {
            if self.slots[s as usize].busy {
                continue;
            }
            let conn = &self.conns[s as usize / self.streams];
            if conn.retry_at > now || conn.draining {
                continue;
            }
            if conn.host == host && conn.state != State::Closed {
                return self.free.remove(pos);
            }
            if reusable.is_none() && conn.in_flight == 0 && conn.waiting.is_empty() {
                reusable = Some(pos);
            }
        }
        let pos = reusable?;
        if let Some(p) = &mut self.plan.connect_pacer {
            // Tokens left unused while no connection was needed lapse after 100 ms, so a quiet
            // spell cannot turn into a burst of new connections.
            let oldest = now.saturating_sub(TOKEN_LAPSE_NS);
            while p.wake_at().is_some_and(|t| t < oldest) {
                p.due(now);
            }
            p.due(now)?;
        }
        self.free.remove(pos)
    }

    /// The next due request. Stops sending when the duration or the request budget is reached.
    /// In an open loop, a request that waited longer than the timeout for a free connection is
    /// counted as timed out without being sent.
    fn next_request(&mut self, now: u64) -> Option<Due> {
        loop {
            if let Some(end) = self.plan.send_until {
                // Nothing intended at or after the end goes out; the loop itself stops sending
                // when the clock reaches the end, so the window is the whole duration.
                if self.plan.pacer.wake_at().unwrap_or(now) >= end {
                    return None;
                }
            }
            let t = self.plan.pacer.due(now)?;
            let measured = t >= self.plan.measure_start;
            if measured {
                if let Some(b) = &mut self.plan.budget {
                    if *b == 0 {
                        self.sending = false;
                        return None;
                    }
                    *b -= 1;
                }
            }
            if now - t > self.plan.timeout_ns && self.plan.pacer.is_open() {
                if measured {
                    self.count_error(ErrorKind::Timeout, None);
                }
                continue;
            }
            return Some(Due {
                intended: t,
                measured,
                target: self.pick_target(),
            });
        }
    }

    fn pick_target(&mut self) -> u32 {
        let n = self.targets.requests.len();
        if n == 1 {
            return 0;
        }
        match self.targets.order {
            Order::RoundRobin => {
                let t = self.next_target % n;
                self.next_target = t + 1;
                t as u32
            }
            Order::Random => (self.rng.next_u64() % n as u64) as u32,
        }
    }

    fn start(&mut self, s: u32, due: Due, now: u64) {
        let c = s / self.streams as u32;
        let slot = &mut self.slots[s as usize];
        slot.intended = due.intended;
        slot.measured = due.measured;
        slot.target = due.target;
        slot.busy = true;
        slot.sent = now;
        slot.written = 0;
        if due.measured {
            let lag = now - due.intended;
            let queued = slot.free_since > due.intended;
            self.rec.send(lag, lag > LATE_NS && !queued, queued);
        }
        self.in_flight += 1;
        let host = self.targets.requests[due.target as usize].host;
        let conn = &mut self.conns[c as usize];
        conn.in_flight += 1;
        if conn.host != host {
            if conn.state != State::Closed {
                self.close(c);
            }
            self.conns[c as usize].host = host;
        }
        if self.conns[c as usize].state == State::Closed {
            if let Err(e) = self.open(c, now) {
                let kind = if e.raw_os_error().is_some() {
                    ErrorKind::Connect
                } else {
                    ErrorKind::Other
                };
                self.conns[c as usize].waiting.push_back(s);
                return self.fail_conn(c, kind, None, now);
            }
        }
        let conn = &mut self.conns[c as usize];
        conn.started += 1;
        if self
            .plan
            .conn
            .requests_per_connection
            .is_some_and(|n| conn.started >= n)
        {
            conn.draining = true;
        }
        conn.waiting.push_back(s);
        if conn.state == State::Ready {
            if conn.h2.is_some() {
                // Batched: the loop polls the connection once for all requests queued now.
                if !conn.dirty {
                    conn.dirty = true;
                    self.dirty.push(c);
                }
            } else {
                self.send_waiting(c, now);
            }
        }
    }

    /// Polls the HTTP/2 connections that got new requests, so that their frames go out.
    fn flush_dirty(&mut self, now: u64) {
        while let Some(c) = self.dirty.pop() {
            self.conns[c as usize].dirty = false;
            self.drive_h2(c, now);
            self.account(c);
        }
    }

    /// Sends what waits on a ready connection (HTTP/2: as many as the peer allows).
    fn send_waiting(&mut self, c: u32, now: u64) {
        while let Some(&s) = self.conns[c as usize].waiting.front() {
            let target = self.slots[s as usize].target as usize;
            let targets = self.targets;
            match &targets.requests[target].wire {
                Wire::Http1(_) => {
                    self.conns[c as usize].waiting.pop_front();
                    self.write_h1(s, now);
                }
                Wire::Http2(req) => {
                    let Some(h2) = self.conns[c as usize].h2.as_mut() else {
                        return;
                    };
                    match h2.send(req) {
                        Ok(None) => return,
                        Ok(Some(stream)) => {
                            self.conns[c as usize].waiting.pop_front();
                            self.slots[s as usize].h2 = Some(stream);
                        }
                        Err((kind, msg)) => return self.fail_conn(c, kind, Some(&msg), now),
                    }
                }
            }
        }
    }

    /// Writes (more of) an HTTP/1.1 request.
    fn write_h1(&mut self, s: u32, now: u64) {
        let c = s / self.streams as u32;
        let targets = self.targets;
        let slot = &mut self.slots[s as usize];
        let Wire::Http1(request) = &targets.requests[slot.target as usize].wire else {
            return;
        };
        let Some(stream) = self.conns[c as usize].stream.as_mut() else {
            return;
        };
        let result = if slot.written < request.len() {
            stream.write_some(&request[slot.written..])
        } else {
            stream.flush_pending().map(|()| 0)
        };
        match result {
            Ok(n) => {
                slot.written += n;
                let pending = slot.written < request.len() || stream.write_blocked();
                let busy = pending || slot.reader.in_progress();
                self.set_write_interest(c, pending);
                self.set_streaming(s, busy);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.set_write_interest(c, true);
                self.set_streaming(s, true);
            }
            Err(e) => self.fail_conn(c, ErrorKind::of_io(&e), None, now),
        }
    }

    fn on_event(&mut self, c: u32, readable: bool, writable: bool, now: u64) {
        if readable {
            if let Some(io) = &self.conns[c as usize].io {
                io.read_ready.set(true);
            }
        }
        match self.conns[c as usize].state {
            State::Connecting => {
                let fd = self.conns[c as usize].fd;
                if matches!(socket::take_error(fd), Ok(None)) {
                    self.set_write_interest(c, false);
                    self.tcp_connected(c, now);
                } else {
                    self.fail_conn(c, ErrorKind::Connect, None, now);
                }
            }
            State::Handshaking if self.conns[c as usize].h2.is_some() => self.drive_h2(c, now),
            State::Handshaking => self.drive_tls(c, now),
            State::Ready if self.conns[c as usize].h2.is_some() => self.drive_h2(c, now),
            State::Ready => {
                let s = c * self.streams as u32;
                if !self.slots[s as usize].busy {
                    // Only a close (or stray bytes) can arrive on an idle connection.
                    if readable {
                        self.read_idle(c);
                    }
                    return;
                }
                if writable {
                    self.write_h1(s, now);
                }
                if readable && self.slots[s as usize].busy && self.conns[c as usize].fd >= 0 {
                    self.read_h1(s, now);
                }
            }
            State::Closed => {}
        }
    }

    fn read_idle(&mut self, c: u32) {
        let Some(stream) = self.conns[c as usize].stream.as_mut() else {
            return;
        };
        match stream.read_some(&mut self.buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            _ => self.close(c),
        }
    }

    fn read_h1(&mut self, s: u32, now: u64) {
        let c = s / self.streams as u32;
        let head = self.targets.requests[self.slots[s as usize].target as usize].head;
        loop {
            let conn = &mut self.conns[c as usize];
            let Some(stream) = conn.stream.as_mut() else {
                return;
            };
            let tls = stream.session().is_some();
            let slot = &mut self.slots[s as usize];
            match stream.read_some(&mut self.buf) {
                Ok(0) => {
                    return match slot.reader.eof() {
                        Some(status) => self.finish(s, status, false, now),
                        None => self.fail_conn(c, ErrorKind::Reset, None, now),
                    }
                }
                Ok(n) => {
                    let stamp = stream.stamp();
                    if stamp.is_none() {
                        self.timestamps = false;
                    }
                    // When the last byte arrived, on the run clock, within [sent, now].
                    let arrived = stamp.map_or(now, |t| {
                        on_run_clock(t, self.realtime_offset).clamp(slot.sent, now)
                    });
                    match slot.reader.feed(&self.buf[..n], head) {
                        Ok(Progress::Partial) => {
                            self.set_streaming(s, true);
                            if !tls {
                                return;
                            }
                        }
                        Ok(Progress::Complete {
                            status,
                            keep_alive,
                            consumed,
                        }) => {
                            return if consumed < n {
                                // Bytes nobody asked for: the stream can no longer be trusted.
                                self.fail_conn(c, ErrorKind::Protocol, None, now)
                            } else {
                                self.finish(s, status, keep_alive, arrived)
                            };
                        }
                        Err(_) => return self.fail_conn(c, ErrorKind::Protocol, None, now),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    let (kind, msg) = match stream::tls_error(&e) {
                        Some(t) => (ErrorKind::Tls, Some(meshbench_net::tls::describe_error(t))),
                        None => (ErrorKind::of_io(&e), None),
                    };
                    return self.fail_conn(c, kind, msg.as_deref(), now);
                }
            }
        }
    }

    /// Polls an HTTP/2 connection and its streams after an event.
    fn drive_h2(&mut self, c: u32, now: u64) {
        // Send what waits, then poll the connection once: it writes the queued frames and reads
        // what arrived. Streams can only have progressed if bytes were read. A request the
        // peer's stream limit held back gets another round once streams have ended.
        for _ in 0..3 {
            self.send_waiting(c, now);
            let conn = &mut self.conns[c as usize];
            let (Some(h2), Some(io)) = (conn.h2.as_mut(), conn.io.as_ref()) else {
                return;
            };
            let before = io.bytes_in.get();
            let polled = h2.poll();
            let read = io.bytes_in.get() != before;
            let opened = h2.is_open() && conn.state == State::Handshaking;
            if opened {
                conn.state = State::Ready;
            }
            match polled {
                Poll::Ready(Err((kind, msg))) => return self.fail_conn(c, kind, Some(&msg), now),
                Poll::Ready(Ok(())) => {
                    // Ended cleanly after a GOAWAY: what is still outstanding was refused.
                    return self.fail_conn(c, ErrorKind::GoAway, Some("GOAWAY (NO_ERROR)"), now);
                }
                Poll::Pending => {}
            }
            let ended = if read { self.poll_streams(c, now) } else { 0 };
            if self.conns[c as usize].waiting.is_empty() || (ended == 0 && !opened) {
                break;
            }
        }
        let blocked = self.conns[c as usize]
            .io
            .as_ref()
            .is_some_and(|io| io.write_blocked.get());
        self.set_write_interest(c, blocked);
    }

    /// Polls the streams of conn `c`; returns how many ended.
    fn poll_streams(&mut self, c: u32, now: u64) -> usize {
        let arrived = self.arrival(c, now);
        let base = c as usize * self.streams;
        let mut ended = 0;
        for s in base..base + self.streams {
            let slot = &mut self.slots[s];
            let Some(stream) = slot.h2.as_mut() else {
                continue;
            };
            match stream.poll() {
                StreamPoll::Pending => continue,
                StreamPoll::Done { status } => {
                    slot.h2 = None;
                    let sent = slot.sent;
                    self.finish(s as u32, status, true, arrived.max(sent));
                }
                StreamPoll::Failed(kind, msg) => {
                    slot.h2 = None;
                    self.fail_slot(s as u32, kind, Some(&msg), now);
                }
            }
            ended += 1;
        }
        ended
    }

    /// When the latest bytes on conn `c` arrived, on the run clock.
    fn arrival(&self, c: u32, now: u64) -> u64 {
        let stamp = self.conns[c as usize]
            .io
            .as_ref()
            .and_then(|io| io.stamp.get());
        stamp.map_or(now, |t| on_run_clock(t, self.realtime_offset).min(now))
    }

    /// A complete response that arrived at `arrived`.
    fn finish(&mut self, s: u32, status: u16, keep_alive: bool, arrived: u64) {
        let c = s / self.streams as u32;
        let slot = &mut self.slots[s as usize];
        if slot.measured {
            self.rec
                .response(status, arrived - slot.intended, arrived - slot.sent);
            let host = self.targets.requests[slot.target as usize].host;
            self.rec.host(host, status >= 400);
            self.interval.requests += 1;
            if status >= 400 {
                self.interval.errors += 1;
            }
            self.interval
                .latency
                .saturating_record((arrived - slot.intended) / 1000);
        }
        slot.free_since = arrived;
        slot.reader.reset();
        let measured = slot.measured;
        self.set_streaming(s, false);
        let conn = &mut self.conns[c as usize];
        conn.in_flight -= 1;
        conn.answered += 1;
        conn.backoff_ns = 0;
        if !keep_alive {
            self.close(c);
        } else if conn.draining && conn.in_flight == 0 {
            if measured {
                self.rec.conns.closed_by_client += 1;
            }
            self.close(c);
        }
        self.release(s);
    }

    /// Fails one request (an HTTP/2 stream, or a request whose connection is gone).
    fn fail_slot(&mut self, s: u32, kind: ErrorKind, msg: Option<&str>, now: u64) {
        let c = s / self.streams as u32;
        let slot = &self.slots[s as usize];
        if slot.measured {
            let host = self.targets.requests[slot.target as usize].host;
            self.rec.host(host, true);
            self.count_error(kind, msg);
        }
        self.conns[c as usize].in_flight -= 1;
        let slot = &mut self.slots[s as usize];
        slot.h2 = None;
        slot.reader.reset();
        slot.free_since = now;
        self.set_streaming(s, false);
        self.release(s);
    }

    /// Fails every request on conn `c` and closes it; a failure to connect or shake hands puts
    /// the connection into back-off.
    fn fail_conn(&mut self, c: u32, kind: ErrorKind, msg: Option<&str>, now: u64) {
        // A connection that failed before it could carry a request (or, over HTTP/2, before its
        // first answer: a server that does not speak h2) backs off before the next attempt.
        let conn = &self.conns[c as usize];
        let establishing = conn.state != State::Ready
            || kind == ErrorKind::Tls
            || (conn.h2.is_some() && conn.answered == 0);
        let waiting = std::mem::take(&mut self.conns[c as usize].waiting);
        let base = c as usize * self.streams;
        let busy: Vec<u32> = (base..base + self.streams)
            .filter(|&s| self.slots[s].busy)
            .map(|s| s as u32)
            .collect();
        self.close(c);
        if establishing {
            let conn = &mut self.conns[c as usize];
            conn.backoff_ns = (conn.backoff_ns * 2).clamp(BACKOFF_MIN_NS, BACKOFF_MAX_NS);
            conn.retry_at = now + conn.backoff_ns;
            self.backing_off.push(c);
        }
        drop(waiting);
        for s in busy {
            self.fail_slot(s, kind, msg, now);
        }
    }

    fn count_error(&mut self, kind: ErrorKind, msg: Option<&str>) {
        match msg {
            Some(m) => self.rec.error_with(kind, m),
            None => self.rec.error(kind),
        }
        self.interval.requests += 1;
        self.interval.errors += 1;
    }

    /// A slot became free: it joins the queue; the loop hands out what is due once the events
    /// of this wake-up are handled, longest-free slot first (so that "waited for a connection"
    /// is judged fairly, and failures never recurse into new sends).
    fn release(&mut self, s: u32) {
        self.slots[s as usize].busy = false;
        self.in_flight -= 1;
        self.free_count += 1;
        if self.free.len() > 2 * self.slots.len() + 64 {
            // Entries left behind by slots taken through the host index.
            let slots = &self.slots;
            let mut seen = vec![false; slots.len()];
            self.free.retain(|&f| {
                let keep = !slots[f as usize].busy && !seen[f as usize];
                seen[f as usize] = true;
                keep
            });
        }
        self.free.push_back(s);
        self.index_by_host(s);
    }

    fn end_backoffs(&mut self, now: u64) {
        self.backing_off
            .retain(|&c| self.conns[c as usize].retry_at > now);
    }

    /// Fails every request in flight for longer than the timeout.
    fn expire(&mut self, now: u64, timeout: u64) {
        for s in 0..self.slots.len() {
            let slot = &self.slots[s];
            if !slot.busy || now - slot.sent <= timeout {
                continue;
            }
            let c = s / self.streams;
            if self.streams > 1 && self.conns[c].state == State::Ready {
                // One late stream: cancel it (dropping it resets it), keep the connection.
                self.conns[c].waiting.retain(|&w| w as usize != s);
                self.fail_slot(s as u32, ErrorKind::Timeout, None, now);
            } else {
                self.fail_conn(c as u32, ErrorKind::Timeout, None, now);
            }
        }
    }

    fn flush_interval(&mut self, events: &Sender<WorkerEvent>) {
        let second = self.interval.second;
        let done = std::mem::replace(&mut self.interval, Interval::new(second + 1));
        self.next_second += SECOND;
        let _ = events.send(WorkerEvent::Interval(done));
    }
}
