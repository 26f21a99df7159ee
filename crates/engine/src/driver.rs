//! The request loop: one thread, one epoll, a share of the connections, one pacer, one recorder.
//!
//! Per request the loop makes one `send` and one `recv` and shares one `epoll_pwait2` with every
//! other socket that became ready at the same moment; there is no timer per request (timeouts
//! are found by a periodic scan) and no allocation. HTTP/1.1 connections carry one request at a
//! time; a request that finds no free connection waits in the pacer's backlog, and its latency
//! still counts from its intended time.
//!
//! A response ends when the kernel says its last segment arrived (`SO_TIMESTAMPNS`), not when the
//! loop got round to reading it. That lets an open loop with free connections sleep until its
//! next send and pick up the responses that came in meanwhile: one wake-up per request instead of
//! two, with latency exact to the kernel's clock. When a request would have to wait for a
//! connection (or in a closed loop, or while draining) the loop wakes on every arrival instead.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use meshbench_net::clock::{thread_cpu_ns, Clock};
use meshbench_net::http1::{Progress, ResponseReader};
use meshbench_net::poller::{Interest, Poller};
use meshbench_net::socket::{self, Connect};

use crate::pacer::Pacer;
use crate::recorder::{ErrorKind, Interval, Recorder};

const SECOND: u64 = 1_000_000_000;
/// A send later than this while a connection was free means the generator fell behind.
const LATE_NS: u64 = 1_000_000;
/// First and last pause after a failed connect, so that a dead target is not hammered in a
/// tight loop (the wait is part of the next request's latency).
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

/// One worker's part of a run.
pub struct WorkerPlan {
    pub addr: std::net::SocketAddr,
    pub request: Arc<[u8]>,
    pub head_request: bool,
    pub connections: usize,
    pub pacer: Pacer,
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
    /// No socket; connects when given a request.
    Closed,
    /// Non-blocking connect under way; a request waits for it.
    Connecting,
    /// Connected, no request in flight.
    Idle,
    /// A request is being written or awaits its response.
    Busy,
}

struct Conn {
    fd: Option<OwnedFd>,
    state: State,
    /// Intended and actual send times of the request in flight.
    intended: u64,
    sent: u64,
    measured: bool,
    /// Bytes of the request written so far.
    written: usize,
    /// True while the socket is also watched for writability.
    want_write: bool,
    /// A request is part-written or a response part-read: the loop must not sleep through it.
    streaming: bool,
    reader: ResponseReader,
    /// When this connection last became free (to tell generator lag from queueing).
    free_since: u64,
    backoff_ns: u64,
    retry_at: u64,
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

struct Worker<'a> {
    plan: WorkerPlan,
    ctl: &'a Control,
    poller: Poller,
    conns: Vec<Conn>,
    /// Connections ready for a request, longest-free first.
    free: VecDeque<usize>,
    /// Connections waiting out a connect back-off.
    backing_off: Vec<usize>,
    rec: Recorder,
    interval: Interval,
    next_second: u64,
    sending: bool,
    in_flight: usize,
    buf: Box<[u8]>,
    /// Connections with `streaming` set.
    streaming: usize,
    /// The kernel stamps received data (cleared at the first read without a stamp). Without it
    /// the loop never sleeps through arrivals, which would otherwise add to latency.
    timestamps: bool,
    /// CLOCK_REALTIME minus the run clock, refreshed at every wake-up, to place kernel receive
    /// timestamps on the run clock.
    realtime_offset: i64,
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
    let mut w = Worker {
        poller,
        conns: Vec::with_capacity(plan.connections),
        free: VecDeque::with_capacity(plan.connections),
        backing_off: Vec::new(),
        rec: Recorder::new(),
        interval: Interval::new(0),
        next_second: plan.measure_start + SECOND,
        sending: true,
        in_flight: 0,
        buf: vec![0u8; 64 * 1024].into_boxed_slice(),
        realtime_offset: 0,
        streaming: 0,
        timestamps: true,
        plan,
        ctl,
    };
    meshbench_net::clock::set_timer_slack(1_000);
    w.preconnect();
    let _ = events.send(WorkerEvent::Ready);
    ctl.started.wait();
    let base = ctl.start_at.load(Ordering::Acquire);
    w.shift_times(base);
    w.event_loop(&events)
}

impl Worker<'_> {
    /// Opens every connection before the clock starts, so that the first requests do not pay
    /// for the handshakes. Connections that fail stay closed and are retried when used.
    fn preconnect(&mut self) {
        let deadline = self.ctl.clock.now() + self.plan.timeout_ns.min(5 * SECOND);
        for i in 0..self.plan.connections {
            self.conns.push(Conn {
                fd: None,
                state: State::Closed,
                intended: 0,
                sent: 0,
                measured: false,
                written: 0,
                want_write: false,
                streaming: false,
                reader: ResponseReader::default(),
                free_since: 0,
                backoff_ns: 0,
                retry_at: 0,
            });
            self.open(i);
        }
        let mut connecting = self
            .conns
            .iter()
            .filter(|c| c.state == State::Connecting)
            .count();
        while connecting > 0 && self.ctl.clock.now() < deadline {
            let n = self
                .poller
                .wait(Some(Duration::from_millis(10)))
                .unwrap_or(0);
            for e in 0..n {
                let ev = self.poller.event(e);
                let i = ev.token as usize;
                if self.conns[i].state != State::Connecting {
                    continue;
                }
                connecting -= 1;
                if self.connected(i) {
                    self.conns[i].state = State::Idle;
                } else {
                    self.close(i);
                }
            }
        }
        for i in 0..self.conns.len() {
            if self.conns[i].state == State::Connecting {
                self.close(i);
            }
            self.free.push_back(i);
        }
    }

    /// Worker times were planned relative to 0; the run starts at `base`.
    fn shift_times(&mut self, base: u64) {
        let p = &mut self.plan;
        p.measure_start += base;
        p.send_until = p.send_until.map(|t| t + base);
        self.next_second = p.measure_start + SECOND;
        if let Pacer::Open(s) = &mut p.pacer {
            s.shift(base);
        }
        for c in &mut self.conns {
            c.free_since = base;
        }
    }

    /// Starts a connection for conn `i`; leaves it Idle, Connecting or (on failure) Closed.
    fn open(&mut self, i: usize) -> Option<io::Error> {
        let result = socket::connect(&self.plan.addr);
        let c = &mut self.conns[i];
        let (fd, state, interest) = match result {
            Ok(Connect::Done(fd)) => (fd, State::Idle, Interest::READ),
            Ok(Connect::InProgress(fd)) => (fd, State::Connecting, Interest::WRITE),
            Err(e) => return Some(e),
        };
        if let Err(e) = self.poller.add(fd.as_raw_fd(), i as u64, interest) {
            return Some(e);
        }
        // Without timestamps the loop falls back to its own clock and stays awake for arrivals.
        if socket::enable_rx_timestamps(fd.as_raw_fd()).is_err() {
            self.timestamps = false;
        }
        c.fd = Some(fd);
        c.state = state;
        c.want_write = false;
        c.reader.reset();
        None
    }

    /// Whether the non-blocking connect of conn `i` succeeded; if so the socket is now watched
    /// for reads and the connect back-off is reset.
    fn connected(&mut self, i: usize) -> bool {
        let c = &mut self.conns[i];
        let fd = c.fd.as_ref().map_or(-1, |f| f.as_raw_fd());
        if !matches!(socket::take_error(fd), Ok(None)) {
            return false;
        }
        c.backoff_ns = 0;
        let _ = self.poller.modify(fd, i as u64, Interest::READ);
        true
    }

    fn close(&mut self, i: usize) {
        self.set_streaming(i, false);
        let c = &mut self.conns[i];
        c.fd = None; // closing the fd also removes it from epoll
        c.state = State::Closed;
        c.written = 0;
        c.want_write = false;
        c.reader.reset();
    }

    /// Keeps the count of connections in the middle of a transfer.
    fn set_streaming(&mut self, i: usize, on: bool) {
        let c = &mut self.conns[i];
        if c.streaming != on {
            c.streaming = on;
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
        loop {
            if cpu_at_start.is_none() && now >= self.plan.measure_start {
                cpu_at_start = Some(thread_cpu_ns());
            }
            if self.sending
                && (self.ctl.stop.load(Ordering::Relaxed)
                    || self.plan.send_until.is_some_and(|end| now >= end))
            {
                self.stop_sending(now);
            }
            if self.sending {
                self.dispatch(now);
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
            let lazy = self.may_sleep_through_arrivals();
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
                self.on_event(
                    ev.token as usize,
                    ev.readable || ev.closed,
                    ev.writable,
                    now,
                );
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

    /// When something is next due: the pacer (if a connection is free for it), a second boundary,
    /// a timeout scan, the end of sending, a connect back-off, the end of the drain.
    fn next_wake(&self, now: u64, next_scan: u64, drain_until: u64) -> u64 {
        let mut wake = self.next_second.min(next_scan).min(now + MAX_WAIT_NS);
        if self.sending {
            if !self.free.is_empty() {
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
            .map(|&i| self.conns[i].retry_at)
            .min();
        wake.min(backoff.unwrap_or(u64::MAX))
    }

    /// Whether the loop may sleep until its next send and read what arrived meanwhile (see the
    /// module header): an open loop, sending, with a free connection, no transfer half done, and
    /// kernel receive timestamps to date the arrivals.
    fn may_sleep_through_arrivals(&self) -> bool {
        self.sending
            && self.plan.pacer.is_open()
            && !self.free.is_empty()
            && self.streaming == 0
            && self.timestamps
    }

    /// Stops sending. Open-loop requests that were due but never sent (no connection came free
    /// in time) count as unfinished, so that a stalled target cannot hide them.
    fn stop_sending(&mut self, now: u64) {
        self.sending = false;
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

    /// Hands out due requests to free connections.
    fn dispatch(&mut self, now: u64) {
        while let Some(&i) = self.free.front() {
            let Some((intended, measured)) = self.next_request(now) else {
                return;
            };
            self.free.pop_front();
            self.start(i, intended, measured, now);
        }
    }

    /// The next due request: (intended time, counts in the results). Stops sending when the
    /// duration or the request budget is reached. In an open loop, a request that waited longer
    /// than the timeout for a free connection is counted as timed out without being sent.
    fn next_request(&mut self, now: u64) -> Option<(u64, bool)> {
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
                    self.count_error(ErrorKind::Timeout);
                }
                continue;
            }
            return Some((t, measured));
        }
    }

    fn start(&mut self, i: usize, intended: u64, measured: bool, now: u64) {
        let c = &mut self.conns[i];
        c.intended = intended;
        c.measured = measured;
        if measured {
            let lag = now - intended;
            let queued = c.free_since > intended;
            self.rec.send(lag, lag > LATE_NS && !queued, queued);
        }
        self.in_flight += 1;
        c.sent = now;
        c.written = 0;
        if c.state == State::Closed {
            if let Some(e) = self.open(i) {
                self.fail(
                    i,
                    if e.raw_os_error().is_some() {
                        ErrorKind::Connect
                    } else {
                        ErrorKind::Other
                    },
                    now,
                );
                return;
            }
        }
        if self.conns[i].state == State::Idle {
            self.conns[i].state = State::Busy;
            self.write(i, now);
        }
        // Connecting: the request goes out once the handshake completes.
    }

    fn write(&mut self, i: usize, now: u64) {
        let c = &mut self.conns[i];
        let Some(fd) = c.fd.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        match socket::send(fd, &self.plan.request[c.written..]) {
            Ok(n) => {
                c.written += n;
                if c.measured {
                    self.rec.bytes_sent += n as u64;
                }
                let done = c.written == self.plan.request.len();
                if done == c.want_write {
                    c.want_write = !done;
                    let interest = if done { Interest::READ } else { Interest::BOTH };
                    let _ = self.poller.modify(fd, i as u64, interest);
                }
                let busy = !done || c.reader.in_progress();
                self.set_streaming(i, busy);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !c.want_write {
                    c.want_write = true;
                    let _ = self.poller.modify(fd, i as u64, Interest::BOTH);
                }
                self.set_streaming(i, true);
            }
            Err(e) => self.fail(i, ErrorKind::of_io(&e), now),
        }
    }

    fn on_event(&mut self, i: usize, readable: bool, writable: bool, now: u64) {
        match self.conns[i].state {
            State::Connecting => {
                if self.connected(i) {
                    self.conns[i].state = State::Busy;
                    self.write(i, now);
                } else {
                    self.fail(i, ErrorKind::Connect, now);
                }
            }
            State::Busy => {
                if writable && self.conns[i].written < self.plan.request.len() {
                    self.write(i, now);
                }
                if readable && self.conns[i].state == State::Busy {
                    self.read(i, now);
                }
            }
            State::Idle => {
                // Only a close (or stray bytes) can arrive on an idle connection.
                if readable {
                    let fd = self.conns[i].fd.as_ref().map_or(-1, |f| f.as_raw_fd());
                    match socket::recv(fd, &mut self.buf) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        _ => self.close(i),
                    }
                }
            }
            State::Closed => {}
        }
    }

    fn read(&mut self, i: usize, now: u64) {
        let head_request = self.plan.head_request;
        let c = &mut self.conns[i];
        let Some(fd) = c.fd.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        match socket::recv_timestamped(fd, &mut self.buf) {
            Ok((0, _)) => match c.reader.eof() {
                Some(status) => self.finish(i, status, false, now, now),
                None => self.fail(i, ErrorKind::Reset, now),
            },
            Ok((n, stamp)) => {
                if stamp.is_none() {
                    self.timestamps = false;
                }
                // When the last byte arrived, on the run clock, within [sent, now].
                let arrived = stamp.map_or(now, |t| {
                    ((t as i64 - self.realtime_offset).max(0) as u64).clamp(c.sent, now)
                });
                if c.measured {
                    self.rec.bytes_received += n as u64;
                }
                match c.reader.feed(&self.buf[..n], head_request) {
                    Ok(Progress::Partial) => self.set_streaming(i, true),
                    Ok(Progress::Complete {
                        status,
                        keep_alive,
                        consumed,
                    }) => {
                        if consumed < n {
                            // Bytes nobody asked for: the stream can no longer be trusted.
                            self.fail(i, ErrorKind::Protocol, now);
                        } else {
                            self.finish(i, status, keep_alive, arrived, now);
                        }
                    }
                    Err(_) => self.fail(i, ErrorKind::Protocol, now),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => self.fail(i, ErrorKind::of_io(&e), now),
        }
    }

    /// A complete response that arrived at `arrived`; `now` is when the loop read it.
    fn finish(&mut self, i: usize, status: u16, keep_alive: bool, arrived: u64, now: u64) {
        let c = &mut self.conns[i];
        if c.measured {
            self.rec
                .response(status, arrived - c.intended, arrived - c.sent);
            self.interval.requests += 1;
            if status >= 400 {
                self.interval.errors += 1;
            }
            self.interval
                .latency
                .saturating_record((arrived - c.intended) / 1000);
        }
        self.in_flight -= 1;
        c.state = State::Idle;
        c.free_since = arrived;
        self.set_streaming(i, false);
        if !keep_alive {
            self.close(i);
        }
        self.release(i, now);
    }

    fn fail(&mut self, i: usize, kind: ErrorKind, now: u64) {
        if self.conns[i].measured {
            self.count_error(kind);
        }
        let was_connect = kind == ErrorKind::Connect;
        self.in_flight -= 1;
        self.close(i);
        let c = &mut self.conns[i];
        c.free_since = now;
        if was_connect {
            c.backoff_ns = (c.backoff_ns * 2).clamp(BACKOFF_MIN_NS, BACKOFF_MAX_NS);
            c.retry_at = now + c.backoff_ns;
            self.backing_off.push(i);
        } else {
            self.release(i, now);
        }
    }

    fn count_error(&mut self, kind: ErrorKind) {
        self.rec.error(kind);
        self.interval.requests += 1;
        self.interval.errors += 1;
    }

    /// A connection became free: it joins the queue, and whatever is due goes out on the
    /// longest-free connection (so that "waited for a connection" is judged fairly).
    fn release(&mut self, i: usize, now: u64) {
        self.free.push_back(i);
        if self.sending {
            self.dispatch(now);
        }
    }

    fn end_backoffs(&mut self, now: u64) {
        let mut k = 0;
        while k < self.backing_off.len() {
            let i = self.backing_off[k];
            if self.conns[i].retry_at <= now {
                self.backing_off.swap_remove(k);
                self.release(i, now);
            } else {
                k += 1;
            }
        }
    }

    /// Fails every request in flight for longer than the timeout.
    fn expire(&mut self, now: u64, timeout: u64) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if matches!(c.state, State::Busy | State::Connecting) && now - c.sent > timeout {
                self.fail(i, ErrorKind::Timeout, now);
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
