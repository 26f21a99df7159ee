//! The request loop: one thread, one epoll, a share of the connections, one pacer, one recorder,
//! for every protocol. [`run_worker`] is what [`crate::run()`] starts on each thread.
//!
//! The loop reads in terms of its pieces: the pacer says when a request is due
//! ([`crate::pacer`]); the slot pool (`slots`) says which slot it may take, or holds it; the
//! slot's request (`request`) keeps its times from intended to arrived; each connection (`conn`)
//! keeps its state from closed to ready. This module owns the loop itself: when to wake, what to
//! send, when to stop. Its two halves are `connect` (opening, handshakes, closing, back-off) and
//! `exchange` (requests and responses on the wire: HTTP/1.1 plain or TLS, HTTP/2 through
//! [`crate::h2conn`], HTTP/3 through [`crate::h3conn`] over QUIC, whose timers the loop also
//! wakes for).
//!
//! Per plain HTTP/1.1 request the loop makes one `send` and one `recv` and shares one
//! `epoll_pwait2` with every other socket that became ready at the same moment; there is no
//! timer per request (timeouts are found by a periodic scan) and no allocation.
//!
//! A response ends when the kernel says its last packet arrived (`SO_TIMESTAMPNS`), not when the
//! loop got round to reading it. That lets an open HTTP/1.1 loop with free connections sleep
//! until its next send and pick up the responses that came in meanwhile: one wake-up per request
//! instead of two, with latency exact to the kernel's clock. When a request would have to wait
//! for a connection (or in a closed loop, over HTTP/2 or HTTP/3, or while draining) the loop
//! wakes on every arrival instead.

mod connect;
mod exchange;
mod worker;

pub use worker::{Control, Tracing, WorkerEvent, WorkerPlan, WorkerReport};

use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use meshbench_net::clock::{thread_cpu_ns, thread_run_delay_ns};
use meshbench_net::http1::ResponseReader;
use meshbench_net::poller::Poller;
use meshbench_net::rng::SplitMix64;

use crate::conn::{Conn, State, LINGER_TOKEN};
use crate::h2conn::H2Stream;
use crate::h3conn::H3Stream;
use crate::idle::{Idle, CALIBRATION};
use crate::pacer::Pacer;
use crate::recorder::{ErrorKind, Interval, Recorder};
use crate::request::{Due, Phase, LATE_NS};
use crate::slots::SlotPool;
use crate::spec::Targets;
use meshbench_results::{Order, Protocol};

const SECOND: u64 = 1_000_000_000;
/// Longest sleep in the loop, so that a stop request is seen promptly.
const MAX_WAIT_NS: u64 = 50_000_000;
/// While sleeping through arrivals with half the slots or more in flight, requests in flight
/// are looked at at least this often, so connections come free promptly even at low rates.
/// With more slots free than busy the loop reads them at its next send (their arrival times
/// are the kernel's, so reading later changes no figure).
const LAZY_READ_NS: u64 = 1_000_000;
/// While sleeping through arrivals, the loop wakes at most this often: at high rates the requests
/// due in between go out together, at most this late (the schedule lag shows it; latency still
/// counts from the intended time). At 20,000 wake-ups a second the rest is syscalls.
const WAKE_EVERY_NS: u64 = 50_000;

/// A tagged request on a slot: its id and what its send looked like.
#[derive(Debug, Clone, Copy)]
struct Mark {
    id: u64,
    sent_unix_ns: u64,
    lag_ns: u64,
}

/// Attribution's state in a worker, which exists only when attribution is on (the slots'
/// own state is the same size either way).
struct Traces {
    plan: Tracing,
    /// Measured sends counted for the sampling.
    counted: u64,
    /// Per slot: the tagged request on it.
    marks: Vec<Option<Mark>>,
    /// Per slot, HTTP/1.1: the tagged request's bytes (the allocation kept for the next one).
    tagged: Vec<Vec<u8>>,
}

/// The wire side of one slot's request (its times are in the slot pool).
#[derive(Default)]
struct SlotWire {
    /// HTTP/1.1: bytes of the request written so far, and the response parser.
    written: usize,
    reader: ResponseReader,
    /// HTTP/2: the request's stream, once the peer took it.
    h2: Option<H2Stream>,
    /// HTTP/3: the request in flight (its stream opens when the peer's limit allows).
    h3: Option<H3Stream>,
    /// An HTTP/1.1 transfer is half done.
    streaming: bool,
}

struct Worker<'a> {
    plan: WorkerPlan,
    /// The run's requests and hosts (immutable; borrowed so the hot path clones nothing).
    targets: &'a Targets,
    ctl: &'a Control,
    poller: Poller,
    conns: Vec<Conn>,
    /// Which slot a due request may take, and each slot's request.
    slots: SlotPool,
    /// Per slot, its request's bytes and parser (indexed like `slots`).
    wire: Vec<SlotWire>,
    /// Connections waiting out a connect back-off.
    backing_off: Vec<u32>,
    /// HTTP/2 connections with requests queued since their last poll.
    dirty: Vec<u32>,
    /// Connections with a socket waiting for the server's close ([`Conn::linger`]); may hold
    /// connections whose wait has ended since (skipped when scanned).
    lingering: Vec<u32>,
    rec: Recorder,
    interval: Interval,
    next_second: u64,
    sending: bool,
    buf: Box<[u8]>,
    /// Connections in the middle of a transfer: the loop must not sleep through them.
    streaming: usize,
    /// Connections opening (TCP connect or a handshake under way): the loop must not sleep
    /// through them either, or each step would wait for the next send to be noticed and a new
    /// connection's every request would carry the pacer's idle time.
    opening: usize,
    /// The kernel stamps received data (cleared at the first read without a stamp). Without it
    /// the loop never sleeps through arrivals, which would otherwise add to latency.
    timestamps: bool,
    /// CLOCK_REALTIME minus the run clock, refreshed at every wake-up, to place kernel receive
    /// timestamps on the run clock.
    realtime_offset: i64,
    next_target: usize,
    /// The first send's intended and actual run-clock times (`None` before it).
    first_send: Option<(u64, u64)>,
    /// The next of `conn.source_addrs` to connect from.
    next_source: usize,
    rng: SplitMix64,
    /// Whether the worker is in its measured window (connection figures count from then).
    measuring: bool,
    /// How long before a send to stop sleeping, learnt from the wake-ups so far.
    idle: Idle,
    /// The thread's run-queue delay at the last second boundary.
    run_delay_seen: Option<u64>,
    /// The millisecond of the run clock the last sends went out in, and how many did.
    burst_ms: u64,
    burst: u64,
    /// Attribution's tags (`None`: it is off).
    traces: Option<Box<Traces>>,
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
    let streams = if plan.conn.protocol.is_multiplexed() {
        plan.conn.streams.max(1)
    } else {
        1
    };
    let slots = plan.connections * streams;
    let mut w = Worker {
        poller,
        conns: Vec::with_capacity(plan.connections),
        slots: SlotPool::new(
            plan.connections,
            streams,
            plan.max_in_flight,
            targets.hosts.len() > 1,
        ),
        wire: (0..slots).map(|_| SlotWire::default()).collect(),
        backing_off: Vec::new(),
        dirty: Vec::new(),
        lingering: Vec::new(),
        rec: Recorder::new(),
        interval: Interval::new(0),
        next_second: plan.measure_start + SECOND,
        sending: true,
        buf: vec![0u8; 64 * 1024].into_boxed_slice(),
        realtime_offset: 0,
        streaming: 0,
        opening: 0,
        timestamps: true,
        next_target: plan.first_target,
        first_send: None,
        next_source: plan.first_source,
        rng: SplitMix64(plan.seed),
        measuring: false,
        idle: Idle::new(plan.idle, plan.slack, plan.pacer.mean_gap_ns().unwrap_or(0)),
        run_delay_seen: None,
        burst_ms: 0,
        burst: 0,
        traces: plan.trace.map(|t| {
            Box::new(Traces {
                plan: t,
                counted: 0,
                marks: vec![None; slots],
                tagged: vec![Vec::new(); slots],
            })
        }),
        targets: &targets,
        plan,
        ctl,
    };
    meshbench_net::clock::set_timer_slack(1_000);
    w.idle.under_quota(w.plan.under_quota);
    w.preconnect();
    if w.plan.pacer.is_open() {
        w.calibrate_idle();
    }
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
        self.conns
            .extend((0..self.plan.connections).map(|_| Conn::new(first_host)));
        for c in 0..self.plan.connections as u32 {
            // A pool larger than the requests in flight opens the rest on demand.
            if (self.slots.slots_of(c).start as usize) < self.plan.max_in_flight {
                let _ = self.open(c, 0);
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
        for c in 0..self.conns.len() {
            if self.conns[c].state != State::Ready {
                self.close(c as u32);
            }
            self.conns[c].forgive();
        }
        self.backing_off.clear();
        self.slots.offer_all(&self.conns);
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
        self.slots.idle_from(base);
    }

    /// Keeps the count of HTTP/1.1 transfers half done (a request not fully written or a
    /// response partly read): the loop must not sleep through them.
    fn set_streaming(&mut self, s: u32, on: bool) {
        let wire = &mut self.wire[s as usize];
        if wire.streaming != on {
            wire.streaming = on;
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
        let mut run_delay_at_start: Option<u64> = None;
        let mut drain_until = u64::MAX;
        let mut now = clock.now();
        let mut last_wake = 0;
        let lazy_protocol = self.plan.conn.protocol == Protocol::Http1;
        let quic = self.plan.conn.protocol == Protocol::Http3;
        loop {
            if cpu_at_start.is_none() && now >= self.plan.measure_start {
                cpu_at_start = Some(thread_cpu_ns());
                run_delay_at_start = thread_run_delay_ns();
                self.measuring = true;
            }
            if self.sending && self.ctl.stop.requested() {
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
                if self.slots.in_flight() == 0 || now >= drain_until || self.ctl.stop.hurried() {
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
                if self.slots.in_flight() > 0 && self.slots.free() <= self.slots.in_flight() {
                    wake = wake.min(now + LAZY_READ_NS);
                }
                wake = wake.max(last_wake + WAKE_EVERY_NS);
            }
            let for_send = self.send_due_at().is_some_and(|t| t <= wake);
            let n = self.idle_until(now, wake, for_send, lazy)?;
            now = clock.now();
            last_wake = now;
            self.realtime_offset = meshbench_net::clock::realtime_ns() as i64 - now as i64;
            for e in 0..n {
                let ev = self.poller.event(e);
                let c = ev.token as u32;
                self.on_event(c, ev.readable || ev.closed, ev.writable, now);
                // A lingering socket (its own token) moves no counted bytes.
                if c & LINGER_TOKEN == 0 {
                    self.account(c);
                }
            }
            if !self.backing_off.is_empty() {
                self.end_backoffs(now);
            }
            if quic {
                self.quic_timers(now);
            }
        }
        let end = clock.now();
        self.rec.unfinished += self.slots.in_flight() as u64;
        self.flush_interval(events);
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu_at_start.unwrap_or_else(thread_cpu_ns));
        let run_delay_ns = run_delay_at_start
            .zip(thread_run_delay_ns())
            .map(|(from, to)| to.saturating_sub(from));
        Ok(WorkerReport {
            recorder: std::mem::take(&mut self.rec),
            cpu_ns,
            run_delay_ns,
            window_ns: end.saturating_sub(self.plan.measure_start),
            first_send: self.first_send,
            slack_ns: if self.plan.pacer.is_open() {
                self.idle.slack_ns()
            } else {
                0
            },
            ahead_ns: if self.plan.pacer.is_open() {
                self.idle.ahead_ns(self.plan.send_early)
            } else {
                0
            },
            wake_cost_ns: self.idle.wake_cost_ns(),
        })
    }

    /// When something is next due: the pacer (if a slot is free for it), a held request's
    /// connection token, a second boundary, a timeout scan, the end of sending, a connect
    /// back-off, the end of the drain.
    fn next_wake(&self, now: u64, next_scan: u64, drain_until: u64) -> u64 {
        let mut wake = self.next_second.min(next_scan).min(now + MAX_WAIT_NS);
        if self.sending {
            if self.slots.is_holding() {
                if let Some(p) = &self.plan.connect_pacer {
                    wake = wake.min(p.wake_at().unwrap_or(u64::MAX));
                }
            } else if let Some(send) = self.send_due_at() {
                wake = wake.min(send);
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
            .min(self.next_quic_timer().unwrap_or(u64::MAX))
    }

    /// When QUIC next needs a connection (loss detection, acknowledgements, idle), over HTTP/3:
    /// a scan of the connections, which HTTP/3 runs have few of.
    fn next_quic_timer(&self) -> Option<u64> {
        if self.plan.conn.protocol != Protocol::Http3 {
            return None;
        }
        self.conns
            .iter()
            .filter_map(|c| c.h3.as_ref().and_then(|h3| h3.timer()))
            .min()
    }

    /// Drives the QUIC connections whose timer is due.
    fn quic_timers(&mut self, now: u64) {
        for c in 0..self.conns.len() as u32 {
            let due = self.conns[c as usize]
                .h3
                .as_ref()
                .and_then(|h3| h3.timer())
                .is_some_and(|t| t <= now);
            if due {
                self.drive_h3(c, now);
                self.account(c);
            }
        }
    }

    /// When the next send is due, if one may go out then (a slot is free for it).
    fn send_due_at(&self) -> Option<u64> {
        if self.sending && self.slots.has_free() && !self.slots.is_holding() {
            self.plan.pacer.wake_at()
        } else {
            None
        }
    }

    /// Waits until `wake` or, unless arrivals can wait (`lazy`), until a socket is ready;
    /// returns the number of events ready. When `wake` is a send's time, sleeps only until the
    /// idle margin before it and spins the rest, or, leading, only until the aim ahead of it,
    /// spinning nothing (see [`crate::idle`]).
    fn idle_until(&mut self, now: u64, wake: u64, for_send: bool, lazy: bool) -> io::Result<usize> {
        let clock = self.ctl.clock;
        let target = if for_send {
            self.idle.sleep_until(wake)
        } else {
            wake
        };
        // Until when the loop may spin: the send's instant, unless the worker leads (it sends at
        // its aim, early).
        let spin_to = if for_send && self.idle.leads() {
            target
        } else {
            wake
        };
        // A far send is approached in two stages; the loop comes back for the second.
        let first_stage = for_send
            .then(|| self.idle.stage_before(now, target))
            .flatten();
        let sleep_to = first_stage.unwrap_or(target);
        if sleep_to > now {
            let wait = Duration::from_nanos(sleep_to - now);
            let n = if lazy {
                std::thread::sleep(wait);
                0
            } else {
                self.poller.wait(Some(wait))?
            };
            if n > 0 {
                return Ok(n);
            }
            let woke = clock.now();
            if self.measuring {
                self.rec.wake_error(woke.saturating_sub(sleep_to));
            }
            if first_stage.is_some() {
                return if lazy {
                    self.poller.wait(Some(Duration::ZERO))
                } else {
                    Ok(0)
                };
            }
            if for_send {
                // The margin covers the last sleep before a send: learn from those alone.
                self.idle.woke(sleep_to, woke);
            }
            if !lazy && woke >= spin_to {
                return Ok(0);
            }
        }
        // The margin: spin on the clock if arrivals can wait, else poll the sockets.
        let spun_from = clock.now();
        let mut t = spun_from;
        while t < spin_to {
            if lazy {
                std::hint::spin_loop();
            } else {
                let n = self.poller.wait(Some(Duration::ZERO))?;
                if n > 0 {
                    self.spun(clock.now() - spun_from);
                    return Ok(n);
                }
            }
            t = clock.now();
        }
        self.spun(t - spun_from);
        self.poller.wait(Some(Duration::ZERO))
    }

    fn spun(&mut self, ns: u64) {
        if self.measuring {
            self.rec.spin_ns += ns;
        }
    }

    /// Learns the clock before the start: a few short sleeps give the first estimate of their
    /// error, and the CPU they took the cost of a wake-up.
    fn calibrate_idle(&mut self) {
        if !self.idle.sleeps() {
            return;
        }
        let clock = self.ctl.clock;
        let cpu_before = thread_cpu_ns();
        for _ in 0..CALIBRATION {
            let asked = clock.now() + 100_000;
            std::thread::sleep(Duration::from_nanos(100_000));
            self.idle.woke(asked, clock.now());
        }
        self.idle
            .calibrated(thread_cpu_ns() - cpu_before, CALIBRATION as u64);
    }

    /// Whether the loop may sleep until its next send and read what arrived meanwhile (see the
    /// module header): an open loop, sending, with a free slot, no transfer half done, no
    /// connection opening (its connect and handshake need an answer from the loop, which the
    /// kernel cannot timestamp for it), and kernel receive timestamps to date the arrivals.
    fn may_sleep_through_arrivals(&self) -> bool {
        self.sending
            && self.plan.pacer.is_open()
            && self.slots.has_free()
            && !self.slots.is_holding()
            && self.streaming == 0
            && self.opening == 0
            && self.timestamps
    }

    /// Stops sending. Open-loop requests that were due but never sent (no connection came free
    /// in time) count as timeouts when they waited longer than the timeout (as they would have
    /// had a connection come free), else as unfinished, so that a stalled target cannot hide
    /// them.
    fn stop_sending(&mut self, now: u64) {
        self.sending = false;
        let open = self.plan.pacer.is_open();
        let stale_before = now.saturating_sub(self.plan.timeout_ns);
        if let Some(d) = self.slots.take_held() {
            if d.measured && open && d.intended < stale_before {
                self.count_error(ErrorKind::Timeout, None);
            } else if d.measured {
                self.rec.unfinished += 1;
            }
        }
        let until = self
            .plan
            .send_until
            .map_or(now, |end| now.min(end.saturating_sub(1)));
        let backlog = self
            .plan
            .pacer
            .take_backlog(until, self.plan.measure_start, stale_before);
        for _ in 0..backlog.timed_out {
            self.count_error(ErrorKind::Timeout, None);
        }
        self.rec.unfinished += backlog.unsent;
    }

    /// Hands out due requests to free slots, a held request first; stops at one that finds no
    /// slot (the pool holds it).
    fn dispatch(&mut self, now: u64) {
        let mut sent = 0;
        let horizon = if self.plan.pacer.is_open() {
            let next_due = self.plan.pacer.wake_at();
            self.idle.horizon(now, next_due, self.plan.send_early)
        } else {
            now
        };
        while self.sending && self.slots.may_start() {
            let due = match self.slots.take_held() {
                Some(d) => d,
                None => match self.next_request(now, horizon) {
                    Some(d) => d,
                    None => break,
                },
            };
            let host = self.targets.requests[due.target as usize].host;
            let tokens = self.plan.connect_pacer.as_mut();
            let Some((s, times)) = self.slots.assign(due, host, now, &self.conns, tokens) else {
                break;
            };
            if self.first_send.is_none() {
                self.first_send = Some((due.intended, now));
            }
            if due.measured {
                // Late is late beyond the budget: within it is by design.
                let late = times.late && times.lag_ns - LATE_NS > self.idle.slack_ns();
                self.rec.send(times.lag_ns, late, times.queued);
                self.interval.sends += 1;
                self.interval.lag.saturating_record(times.lag_ns / 1000);
                sent += 1;
            }
            self.mark(s, due.measured, times.lag_ns, now);
            self.start(s, host, now);
        }
        if sent > 0 {
            self.sent_in_wake(now, sent);
        }
    }

    /// Tags the request just given to slot `s` when it is one of attribution's sample (one
    /// measured send in `every`), else clears the slot's mark.
    #[inline]
    fn mark(&mut self, s: u32, measured: bool, lag_ns: u64, now: u64) {
        let realtime_offset = self.realtime_offset;
        let Some(t) = self.traces.as_deref_mut() else {
            return;
        };
        t.marks[s as usize] = None;
        if !measured {
            return;
        }
        t.counted += 1;
        if t.counted % u64::from(t.plan.every) == 0 {
            t.marks[s as usize] = Some(Mark {
                id: t.plan.id_base | t.counted,
                sent_unix_ns: (now as i64 + realtime_offset).max(0) as u64,
                lag_ns,
            });
        }
    }

    /// `n` measured sends went out in the wake-up at `now`: how many a wake-up carries, and the
    /// largest burst in a millisecond of the run clock.
    fn sent_in_wake(&mut self, now: u64, n: u64) {
        self.rec.sends_per_wake(n);
        let ms = now / 1_000_000;
        if ms == self.burst_ms {
            self.burst += n;
        } else {
            self.burst_ms = ms;
            self.burst = n;
        }
        self.rec.largest_burst_per_ms = self.rec.largest_burst_per_ms.max(self.burst);
    }

    /// The next due request. Stops sending when the duration or the request budget is reached.
    /// In an open loop, a request that waited longer than the timeout for a free connection is
    /// counted as timed out without being sent. A request due by `horizon` (the idle policy's,
    /// [`Idle::horizon`]: the lead window by default, the slack with `--send-early`) is due now,
    /// and intended now (its latency counts from the real send).
    fn next_request(&mut self, now: u64, horizon: u64) -> Option<Due> {
        loop {
            if let Some(end) = self.plan.send_until {
                // Nothing intended at or after the end goes out; the loop itself stops sending
                // when the clock reaches the end, so the window is the whole duration.
                if self.plan.pacer.wake_at().unwrap_or(now) >= end {
                    return None;
                }
            }
            let due_at = self.plan.pacer.due(horizon)?;
            // Whether it counts is the schedule's say, even when it leaves early.
            let measured = due_at >= self.plan.measure_start;
            let t = due_at.min(now);
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
                self.next_target = t + self.plan.target_stride;
                t as u32
            }
            Order::Random => (self.rng.next_u64() % n as u64) as u32,
        }
    }

    /// Puts the request just started on slot `s` (to `host`) on its connection: re-aims or
    /// opens the connection if need be, then sends, or queues until the connection is ready.
    fn start(&mut self, s: u32, host: u32, now: u64) {
        let c = self.slots.conn_of(s);
        self.wire[s as usize].written = 0;
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
                self.conns[c as usize].waiting.push_back(s);
                return self.fail_conn(c, ErrorKind::of_connect(&e), None, now);
            }
        }
        let conn = &mut self.conns[c as usize];
        conn.start_one(self.plan.conn.requests_per_connection);
        conn.waiting.push_back(s);
        if conn.state == State::Ready {
            if conn.is_multiplexed() {
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

    fn count_error(&mut self, kind: ErrorKind, msg: Option<&str>) {
        match msg {
            Some(m) => self.rec.error_with(kind, m),
            None => self.rec.error(kind),
        }
        self.interval.counts.error(kind);
    }

    /// Fails every request in flight for longer than the timeout; closes the sockets whose
    /// server did not close them in time.
    fn expire(&mut self, now: u64, timeout: u64) {
        if !self.lingering.is_empty() {
            self.end_lingers(now);
        }
        let multiplexed = self.slots.streams() > 1;
        let grpc = self.plan.conn.protocol == Protocol::Grpc;
        for s in 0..self.slots.len() as u32 {
            if !self.slots.request(s).is_overdue(now, timeout) {
                continue;
            }
            let c = self.slots.conn_of(s);
            let ready = self.conns[c as usize].state == State::Ready;
            if grpc && ready && self.slots.request(s).phase() != Phase::Sending {
                // A gRPC call past its deadline ends as gRPC clients end it: cancelled (its
                // stream reset, the connection kept) with DEADLINE_EXCEEDED.
                self.deadline_passed(s, now);
            } else if multiplexed && ready {
                // One late stream: cancel it (dropping it resets it), keep the connection. One
                // the peer's stream limit held back leaves the connection's queue.
                if self.slots.request(s).phase() == Phase::Sending {
                    self.conns[c as usize].waiting.retain(|&w| w != s);
                }
                self.fail_slot(s, ErrorKind::Timeout, None, now);
            } else {
                let conn = &self.conns[c as usize];
                // Say where it stuck when it is not the server's answer.
                let msg = match conn.state {
                    State::Connecting => Some("TCP connect not finished"),
                    State::Handshaking if conn.h3.is_some() => Some("QUIC handshake not finished"),
                    State::Handshaking if conn.h2.is_none() => Some("TLS handshake not finished"),
                    State::Handshaking => Some("HTTP/2 handshake not finished"),
                    _ if self.wire[s as usize].reader.in_progress() => Some("response incomplete"),
                    _ => None,
                };
                self.fail_conn(c, ErrorKind::Timeout, msg, now);
            }
        }
    }

    fn flush_interval(&mut self, events: &Sender<WorkerEvent>) {
        // Once a second: did this thread wait for a CPU other processes held?
        let delay = thread_run_delay_ns();
        if let (Some(now), Some(before)) = (delay, self.run_delay_seen) {
            self.idle
                .contended(now.saturating_sub(before) >= SECOND / 10);
        }
        self.run_delay_seen = delay;
        let second = self.interval.second;
        let done = std::mem::replace(&mut self.interval, Interval::new(second + 1));
        self.next_second += SECOND;
        let _ = events.send(WorkerEvent::Interval(self.plan.index, Box::new(done)));
    }
}
