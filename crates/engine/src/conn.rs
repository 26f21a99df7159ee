//! One client connection's bookkeeping: its state from closed to ready, the host it is aimed
//! at, its byte stream (plain, TLS, or handed to h2) or its QUIC connection (HTTP/3), what it carries, when it may retry after a
//! failed connect, how many of its bytes the recorder has seen, and its previous socket while
//! that waits for the server to close it first ([`Linger`]).
//!
//! It exists so that the worker's loop reads in steps ("open", "closed", "back off", "one more
//! request") and so that the slot pool can ask about connections ([`ConnFacts`]) without
//! knowing sockets. Contract: no syscalls here; the worker opens sockets and registers them with
//! epoll, then hands the stream to [`Conn::attach`]; dropping the stream in [`Conn::detach`]
//! closes the socket (which also removes it from epoll).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::rc::Rc;

use meshbench_net::stream::{IoState, Stream};

use crate::h2conn::H2Conn;
use crate::h3conn::H3Conn;
use crate::slots::ConnFacts;

/// First and last pause after a failed connect or handshake, so that a dead target is not
/// hammered in a tight loop (the wait is part of the next request's latency).
pub const BACKOFF_MIN_NS: u64 = 1_000_000;
pub const BACKOFF_MAX_NS: u64 = 100_000_000;

/// Requests that may fail in a row on one open connection (HTTP/2 streams reset or timed out)
/// before it drains and is replaced. A server that refuses every stream while never granting
/// connection flow-control window leaves each refused request body queued inside h2 for the
/// life of the connection; a fresh connection bounds that (and a fresh window is what a client
/// facing such a server wants anyway).
pub const MAX_FAILED_IN_A_ROW: u32 = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No socket; opens when a request needs it.
    Closed,
    /// Non-blocking TCP connect under way.
    Connecting,
    /// TLS, HTTP/2 or QUIC handshake under way.
    Handshaking,
    /// Requests can go out.
    Ready,
}

/// The socket of a connection that has carried its last response and waits for the server to
/// close it first (see [`Conn::linger`]). It has its own epoll token, [`LINGER_TOKEN`] plus
/// the connection's index, so that the connection can meanwhile open a new socket.
pub struct Linger {
    pub stream: Stream,
    /// When to stop waiting and close it anyway (run clock).
    pub until: u64,
}

/// Marks the epoll token of a lingering socket (connection indices stay below it).
pub const LINGER_TOKEN: u32 = 1 << 31;

pub struct Conn {
    pub state: State,
    /// The host it is open (or was last aimed) to: index into the target list's hosts.
    pub host: u32,
    pub fd: RawFd,
    /// The HTTP/1.1 byte stream (HTTP/2 connections hand theirs to `h2`).
    pub stream: Option<Stream>,
    pub h2: Option<H2Conn>,
    /// HTTP/3: the QUIC connection, which owns the UDP socket (boxed: it is large, and most
    /// runs have none).
    pub h3: Option<Box<H3Conn>>,
    /// Byte counts, receive stamp and readiness of the socket, whoever owns the stream.
    pub io: Option<Rc<IoState>>,
    /// Slots whose requests wait for this connection to be ready (or for a free HTTP/2 stream).
    pub waiting: VecDeque<u32>,
    /// Requests started on it and not yet answered or failed.
    pub in_flight: u32,
    /// Requests started on it (for `--requests-per-connection`), and answered.
    pub started: u64,
    pub answered: u64,
    /// Requests failed on it, while it stayed open, since its last answer.
    pub failed_in_a_row: u32,
    /// Takes no more requests; closes when the last one is answered.
    pub draining: bool,
    /// The socket is watched for writability too.
    pub want_write: bool,
    /// HTTP/2: requests were queued outside an event; the connection must be polled to write them.
    pub dirty: bool,
    /// Socket bytes already added to the recorder.
    counted_in: u64,
    counted_out: u64,
    /// When `connect()` was called and when TCP completed (run clock).
    pub opened_at: u64,
    pub tcp_at: u64,
    /// The current connect back-off, and when the next attempt may be made.
    pub backoff_ns: u64,
    pub retry_at: u64,
    /// The previous socket, done with, waiting for the server's close: the side that closes
    /// first keeps the TIME_WAIT, so the client lets the server go first. Independent of
    /// `state`: the connection is Closed (or already open again) meanwhile.
    pub linger: Option<Linger>,
}

impl Conn {
    /// A closed connection aimed at `host`.
    pub fn new(host: u32) -> Self {
        Conn {
            state: State::Closed,
            host,
            fd: -1,
            stream: None,
            h2: None,
            h3: None,
            io: None,
            waiting: VecDeque::new(),
            in_flight: 0,
            started: 0,
            answered: 0,
            failed_in_a_row: 0,
            draining: false,
            want_write: false,
            dirty: false,
            counted_in: 0,
            counted_out: 0,
            opened_at: 0,
            tcp_at: 0,
            backoff_ns: 0,
            retry_at: 0,
            linger: None,
        }
    }

    /// A socket `fd` was opened at `now` with its plain `stream` (which owns it); `connected`
    /// when the connect completed at once, else the socket is watched for writability.
    pub fn attach(&mut self, fd: RawFd, stream: Stream, connected: bool, now: u64) {
        self.fresh(fd, stream.state(), now);
        self.want_write = !connected;
        self.state = State::Connecting;
        self.stream = Some(stream);
    }

    /// A QUIC connection was started at `now` on its UDP socket `fd` (which it owns).
    pub fn attach_quic(&mut self, fd: RawFd, h3: H3Conn, now: u64) {
        self.fresh(fd, h3.io(), now);
        self.tcp_at = now;
        self.state = State::Handshaking;
        self.h3 = Some(Box::new(h3));
    }

    fn fresh(&mut self, fd: RawFd, io: Rc<IoState>, now: u64) {
        self.fd = fd;
        self.want_write = false;
        self.opened_at = now;
        self.started = 0;
        self.answered = 0;
        self.failed_in_a_row = 0;
        self.draining = false;
        self.io = Some(io);
        self.counted_in = 0;
        self.counted_out = 0;
    }

    /// Multiplexed (HTTP/2 or HTTP/3): requests are batched and polled.
    pub fn is_multiplexed(&self) -> bool {
        self.h2.is_some() || self.h3.is_some()
    }

    /// Drops the socket (whatever the state), leaving the requests on it to the caller.
    pub fn detach(&mut self) {
        self.stream = None; // closing the fd also removes it from epoll
        self.h2 = None;
        self.h3 = None;
        self.io = None;
        self.fd = -1;
        self.state = State::Closed;
        self.want_write = false;
        self.draining = false;
    }

    /// Bytes received and sent since the last call.
    pub fn bytes_moved(&mut self) -> (u64, u64) {
        let Some(io) = &self.io else {
            return (0, 0);
        };
        let (i, o) = (io.bytes_in.get(), io.bytes_out.get());
        let moved = (i - self.counted_in, o - self.counted_out);
        self.counted_in = i;
        self.counted_out = o;
        moved
    }

    /// A request starts on it; after `limit` of them it drains (`--requests-per-connection`).
    #[inline]
    pub fn start_one(&mut self, limit: Option<u64>) {
        self.started += 1;
        if limit.is_some_and(|n| self.started >= n) {
            self.draining = true;
        }
    }

    /// A request on it was answered.
    #[inline]
    pub fn answered_one(&mut self) {
        self.in_flight -= 1;
        self.answered += 1;
        self.failed_in_a_row = 0;
    }

    /// A request on it failed while it stays open (an HTTP/2 stream); after
    /// [`MAX_FAILED_IN_A_ROW`] in a row without an answer it drains.
    #[inline]
    pub fn failed_one(&mut self) {
        self.in_flight -= 1;
        if self.state != State::Closed {
            self.failed_in_a_row += 1;
            if self.failed_in_a_row >= MAX_FAILED_IN_A_ROW {
                self.draining = true;
            }
        }
    }

    /// It is open, draining and carries nothing: time to close it.
    #[inline]
    pub fn is_drained(&self) -> bool {
        self.draining && self.in_flight == 0 && self.state != State::Closed
    }

    /// Connecting or shaking hands failed at `now`: wait before the next attempt, twice as long
    /// as last time, within [`BACKOFF_MIN_NS`, `BACKOFF_MAX_NS`].
    pub fn back_off(&mut self, now: u64) {
        self.backoff_ns = (self.backoff_ns * 2).clamp(BACKOFF_MIN_NS, BACKOFF_MAX_NS);
        self.retry_at = now + self.backoff_ns;
    }

    /// Clears the back-off (a response came, or the clock is about to start).
    pub fn forgive(&mut self) {
        self.backoff_ns = 0;
        self.retry_at = 0;
    }
}

impl ConnFacts for Conn {
    #[inline]
    fn host(&self) -> u32 {
        self.host
    }

    #[inline]
    fn is_open(&self) -> bool {
        self.state != State::Closed
    }

    #[inline]
    fn accepts(&self, now: u64) -> bool {
        !self.draining && self.retry_at <= now
    }

    #[inline]
    fn is_idle(&self) -> bool {
        self.in_flight == 0 && self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn back_off_doubles_within_bounds() {
        let mut c = Conn::new(0);
        // (failure at, back-off after it, next attempt at)
        let failures = [
            (0, MS, MS),
            (MS, 2 * MS, 3 * MS),
            (3 * MS, 4 * MS, 7 * MS),
            (7 * MS, 8 * MS, 15 * MS),
        ];
        for (now, backoff, retry_at) in failures {
            c.back_off(now);
            assert_eq!(
                (c.backoff_ns, c.retry_at),
                (backoff, retry_at),
                "failure at {now}"
            );
        }
        for _ in 0..10 {
            c.back_off(0);
        }
        assert_eq!(c.backoff_ns, BACKOFF_MAX_NS);
        c.forgive();
        c.back_off(0);
        assert_eq!(c.backoff_ns, BACKOFF_MIN_NS);
    }

    #[test]
    fn facts_the_pool_sees() {
        let waiting = |c: &mut Conn| c.waiting.push_back(3);
        let in_flight = |c: &mut Conn| c.in_flight = 1;
        let draining = |c: &mut Conn| c.draining = true;
        let backing_off = |c: &mut Conn| c.back_off(0);
        let ready = |c: &mut Conn| c.state = State::Ready;
        let closed = |_: &mut Conn| {};
        // (case, change, open, accepts at 0, idle)
        type Change = fn(&mut Conn);
        let cases: [(&str, Change, bool, bool, bool); 6] = [
            ("new: closed, idle", closed, false, true, true),
            ("ready", ready, true, true, true),
            ("a request waits on it", waiting, false, true, false),
            ("a request in flight", in_flight, false, true, false),
            ("draining", draining, false, false, true),
            ("backing off", backing_off, false, false, true),
        ];
        for (case, change, open, accepts, idle) in cases {
            let mut c = Conn::new(4);
            change(&mut c);
            assert_eq!(c.host(), 4, "{case}");
            assert_eq!(
                (c.is_open(), c.accepts(0), c.is_idle()),
                (open, accepts, idle),
                "{case}"
            );
        }
        let mut c = Conn::new(0);
        c.back_off(0);
        assert!(c.accepts(BACKOFF_MIN_NS), "the back-off ends at retry_at");
    }

    #[test]
    fn requests_per_connection_drains() {
        // (limit, requests started, draining)
        let cases = [
            (None, 1_000, false),
            (Some(3), 2, false),
            (Some(3), 3, true),
            (Some(1), 1, true),
        ];
        for (limit, n, want) in cases {
            let mut c = Conn::new(0);
            for _ in 0..n {
                c.start_one(limit);
            }
            assert_eq!(c.draining, want, "limit {limit:?}, {n} started");
        }
    }

    #[test]
    fn failures_in_a_row_drain_an_open_connection() {
        let mut c = Conn::new(0);
        c.state = State::Ready;
        c.in_flight = 3 * MAX_FAILED_IN_A_ROW;
        for _ in 0..MAX_FAILED_IN_A_ROW - 1 {
            c.failed_one();
        }
        c.answered_one();
        assert!(!c.draining, "an answer ends the streak");
        for _ in 0..MAX_FAILED_IN_A_ROW - 1 {
            c.failed_one();
        }
        assert!(!c.draining);
        c.failed_one();
        assert!(
            c.draining && !c.is_drained(),
            "drains, streams still in flight"
        );
        while c.in_flight > 0 {
            c.failed_one();
        }
        assert!(c.is_drained(), "nothing in flight: close it");
        // A request failing with its closed connection is the connection's failure, not a streak.
        let mut closed = Conn::new(0);
        closed.in_flight = 1;
        closed.failed_one();
        assert_eq!((closed.failed_in_a_row, closed.is_drained()), (0, false));
    }

    #[test]
    fn bytes_moved_counts_each_byte_once() {
        let mut c = Conn::new(0);
        assert_eq!(c.bytes_moved(), (0, 0), "no socket");
        let io = Rc::new(IoState::default());
        c.io = Some(io.clone());
        // (bytes in so far, bytes out so far, moved since the last look)
        for (total_in, total_out, moved) in [(10, 5, (10, 5)), (10, 5, (0, 0)), (25, 7, (15, 2))] {
            io.bytes_in.set(total_in);
            io.bytes_out.set(total_out);
            assert_eq!(c.bytes_moved(), moved);
        }
    }
}
