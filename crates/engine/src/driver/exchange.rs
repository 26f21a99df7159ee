//! Requests and responses on the wire, per protocol: HTTP/1.1 writes and parses on the
//! connection's own stream (plain or TLS), HTTP/2 polls the h2 connection and its streams,
//! HTTP/3 reads the datagrams, polls the h3 connection and its requests, and sends what QUIC
//! has ready.
//! Every ending goes through [`Worker::finish`] or [`Worker::fail_slot`], which record the
//! outcome from the slot's request times and give the slot back to the pool.
//!
//! Contract: per plain HTTP/1.1 request, one `send` and one `recv`; a response is dated by the
//! kernel's receive stamp when there is one; nothing here allocates per request.

use std::io;
use std::task::Poll;

use meshbench_net::http1::Progress;
use meshbench_net::poller::Interest;
use meshbench_net::socket;
use meshbench_net::stream;

use super::Worker;
use crate::conn::{State, LINGER_TOKEN};
use crate::h2conn::StreamPoll;
use crate::recorder::{ErrorKind, Status, MAX_TRACES};
use crate::request::arrival;
use crate::spec::{HttpRequest, Wire};
use meshbench_results::attribution::{self, Sent};

/// `request` (HTTP/1.1 bytes) with the attribution id header after its request line, into
/// `into` (its allocation kept for the next tagged request).
fn tag(into: &mut Vec<u8>, request: &[u8], id: u64) {
    let line_end = request
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(request.len(), |i| i + 2);
    into.clear();
    into.extend_from_slice(&request[..line_end]);
    into.extend_from_slice(attribution::ID_HEADER.as_bytes());
    into.extend_from_slice(b": ");
    into.extend_from_slice(attribution::id_text(id).as_bytes());
    into.extend_from_slice(b"\r\n");
    into.extend_from_slice(&request[line_end..]);
}

/// An HTTP/2 or HTTP/3 request with the attribution id header (a copy: only tagged requests
/// pay for it).
fn with_id(request: &HttpRequest, id: u64) -> HttpRequest {
    let mut tagged = request.clone();
    if let Ok(value) = http::HeaderValue::from_str(&attribution::id_text(id)) {
        tagged.headers.insert(
            http::header::HeaderName::from_static(attribution::ID_HEADER),
            value,
        );
    }
    tagged
}

impl Worker<'_> {
    /// Polls the HTTP/2 and HTTP/3 connections that got new requests, so that their frames go
    /// out.
    pub(super) fn flush_dirty(&mut self, now: u64) {
        while let Some(c) = self.dirty.pop() {
            self.conns[c as usize].dirty = false;
            if self.conns[c as usize].h3.is_some() {
                self.drive_h3(c, now);
            } else {
                self.drive_h2(c, now);
            }
            self.account(c);
        }
    }

    /// Sends what waits on a ready connection (HTTP/2: as many as the peer allows).
    pub(super) fn send_waiting(&mut self, c: u32, now: u64) {
        while let Some(&s) = self.conns[c as usize].waiting.front() {
            let target = self.slots.request(s).target() as usize;
            let targets = self.targets;
            match &targets.requests[target].wire {
                Wire::Http1(_) => {
                    self.conns[c as usize].waiting.pop_front();
                    self.write_h1(s, now);
                }
                Wire::Parts(req) => {
                    let tagged;
                    let mark = self.traces.as_ref().and_then(|t| t.marks[s as usize]);
                    let req = match mark {
                        Some(mark) => {
                            tagged = with_id(req, mark.id);
                            &tagged
                        }
                        None => req.as_ref(),
                    };
                    if let Some(h3) = self.conns[c as usize].h3.as_mut() {
                        // The request waits inside for the peer's stream limit, if need be.
                        let Some(stream) = h3.send(req) else {
                            return;
                        };
                        self.conns[c as usize].waiting.pop_front();
                        self.wire[s as usize].h3 = Some(stream);
                        self.slots.request_mut(s).on_wire();
                        continue;
                    }
                    let Some(h2) = self.conns[c as usize].h2.as_mut() else {
                        return;
                    };
                    match h2.send(req) {
                        Ok(None) => return,
                        Ok(Some(stream)) => {
                            self.conns[c as usize].waiting.pop_front();
                            self.wire[s as usize].h2 = Some(stream);
                            self.slots.request_mut(s).on_wire();
                        }
                        Err((kind, msg)) => return self.fail_conn(c, kind, Some(&msg), now),
                    }
                }
            }
        }
    }

    /// Writes (more of) an HTTP/1.1 request.
    pub(super) fn write_h1(&mut self, s: u32, now: u64) {
        let c = self.slots.conn_of(s);
        let targets = self.targets;
        let target = &targets.requests[self.slots.request(s).target() as usize];
        let Wire::Http1(request) = &target.wire else {
            return;
        };
        let conn = &mut self.conns[c as usize];
        // A connection's last request asks the server to close (when the request allows it).
        let request = match &target.closing {
            Some(closing) if conn.draining => closing,
            _ => request,
        };
        let Some(stream) = conn.stream.as_mut() else {
            return;
        };
        let wire = &mut self.wire[s as usize];
        let request: &[u8] = match self.traces.as_deref_mut() {
            Some(t) => match t.marks[s as usize] {
                Some(mark) => {
                    let bytes = &mut t.tagged[s as usize];
                    if wire.written == 0 {
                        tag(bytes, request, mark.id);
                    }
                    bytes
                }
                None => request,
            },
            None => request,
        };
        let result = if wire.written < request.len() {
            stream.write_some(&request[wire.written..])
        } else {
            stream.flush_pending().map(|()| 0)
        };
        match result {
            Ok(n) => {
                wire.written += n;
                let pending = wire.written < request.len() || stream.write_blocked();
                let busy = pending || wire.reader.in_progress();
                if !pending {
                    self.slots.request_mut(s).on_wire();
                }
                self.set_write_interest(c, pending);
                self.set_streaming(s, busy);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.set_write_interest(c, true);
                self.set_streaming(s, true);
            }
            Err(e) => {
                let msg = e.to_string();
                self.fail_conn(c, ErrorKind::of_io(&e), Some(&msg), now)
            }
        }
    }

    /// Handles what epoll reported for conn `c`, whatever its state.
    pub(super) fn on_event(&mut self, c: u32, readable: bool, writable: bool, now: u64) {
        if c & LINGER_TOKEN != 0 {
            return self.on_linger(c & !LINGER_TOKEN);
        }
        if readable {
            if let Some(io) = &self.conns[c as usize].io {
                io.read_ready.set(true);
            }
        }
        if self.conns[c as usize].h3.is_some() {
            return self.drive_h3(c, now);
        }
        match self.conns[c as usize].state {
            State::Connecting => {
                let fd = self.conns[c as usize].fd;
                match socket::take_error(fd) {
                    Ok(None) => {
                        self.set_write_interest(c, false);
                        self.tcp_connected(c, now);
                    }
                    Ok(Some(e)) => self.fail_conn(c, ErrorKind::of_connect(&e), None, now),
                    Err(_) => self.fail_conn(c, ErrorKind::Connect, None, now),
                }
            }
            State::Handshaking if self.conns[c as usize].h2.is_some() => self.drive_h2(c, now),
            State::Handshaking => self.drive_tls(c, now),
            State::Ready if self.conns[c as usize].h2.is_some() => self.drive_h2(c, now),
            State::Ready => {
                // HTTP/1.1: one slot per connection.
                let s = self.slots.slots_of(c).start;
                if !self.slots.request(s).is_busy() {
                    // Only a close (or stray bytes) can arrive on an idle connection.
                    if readable {
                        self.read_idle(c);
                    }
                    return;
                }
                if writable {
                    self.write_h1(s, now);
                }
                if readable && self.slots.request(s).is_busy() && self.conns[c as usize].fd >= 0 {
                    self.read_h1(s, now);
                }
            }
            State::Closed => {}
        }
    }

    /// Reads what arrived on a connection with no request: a close, or stray bytes that make
    /// it unusable.
    pub(super) fn read_idle(&mut self, c: u32) {
        let Some(stream) = self.conns[c as usize].stream.as_mut() else {
            return;
        };
        match stream.read_some(&mut self.buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Ok(0) => {
                self.count_close(true);
                self.close(c);
            }
            _ => self.close(c),
        }
    }

    /// Reads (more of) an HTTP/1.1 response.
    pub(super) fn read_h1(&mut self, s: u32, now: u64) {
        let c = self.slots.conn_of(s);
        let head = self.targets.requests[self.slots.request(s).target() as usize].head;
        loop {
            let conn = &mut self.conns[c as usize];
            let Some(stream) = conn.stream.as_mut() else {
                return;
            };
            let tls = stream.session().is_some();
            let wire = &mut self.wire[s as usize];
            match stream.read_some(&mut self.buf) {
                Ok(0) => {
                    let cut = wire.reader.in_progress();
                    return match wire.reader.eof() {
                        Some(status) => self.finish(s, status, false, now),
                        None => {
                            let msg = if cut {
                                "closed mid-response"
                            } else {
                                "closed before the response"
                            };
                            self.fail_conn(c, ErrorKind::Reset, Some(msg), now)
                        }
                    };
                }
                Ok(n) => {
                    let stamp = stream.stamp();
                    if stamp.is_none() {
                        self.timestamps = false;
                    }
                    let arrived = arrival(stamp, self.realtime_offset, now);
                    match wire.reader.feed(&self.buf[..n], head) {
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
                                let msg = "bytes after the response";
                                self.fail_conn(c, ErrorKind::Protocol, Some(msg), now)
                            } else {
                                self.finish(s, status, keep_alive, arrived)
                            };
                        }
                        Err(e) => {
                            let msg = e.to_string();
                            return self.fail_conn(c, ErrorKind::Protocol, Some(&msg), now);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    let (kind, msg) = match stream::tls_error(&e) {
                        Some(t) => (ErrorKind::Tls, meshbench_net::tls::describe_error(t)),
                        None => (ErrorKind::of_io(&e), e.to_string()),
                    };
                    return self.fail_conn(c, kind, Some(&msg), now);
                }
            }
        }
    }

    /// Polls an HTTP/2 connection and its streams after an event.
    pub(super) fn drive_h2(&mut self, c: u32, now: u64) {
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
                self.opened(c);
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
    pub(super) fn poll_streams(&mut self, c: u32, now: u64) -> usize {
        let arrived = self.last_arrival(c, now);
        let mut ended = 0;
        for s in self.slots.slots_of(c) {
            let wire = &mut self.wire[s as usize];
            let Some(stream) = wire.h2.as_mut() else {
                continue;
            };
            match stream.poll() {
                StreamPoll::Pending => continue,
                StreamPoll::Done(status) => {
                    wire.h2 = None;
                    self.finish(s, status, true, arrived);
                }
                StreamPoll::Failed(kind, msg) => {
                    wire.h2 = None;
                    self.fail_slot(s, kind, Some(&msg), now);
                }
            }
            ended += 1;
        }
        ended
    }

    /// Drives an HTTP/3 connection after an event or when QUIC's timer is due: reads what
    /// arrived, polls h3 and the requests, sends what QUIC has ready.
    pub(super) fn drive_h3(&mut self, c: u32, now: u64) {
        let conn = &mut self.conns[c as usize];
        let Some(h3) = conn.h3.as_mut() else {
            return;
        };
        if let Err(e) = h3.receive(&mut self.buf, now) {
            // Before the connection is up, any socket error is a failure to connect.
            let kind = if conn.state == State::Ready {
                ErrorKind::of_io(&e)
            } else {
                ErrorKind::Connect
            };
            let msg = if e.kind() == io::ErrorKind::ConnectionRefused {
                "nothing listens on that UDP port (ICMP port unreachable)".to_string()
            } else {
                format!("UDP: {e}")
            };
            return self.fail_conn(c, kind, Some(&msg), now);
        }
        if let Some(accepted_0rtt) = h3.take_handshake() {
            self.quic_handshake_done(c, now, accepted_0rtt);
        }
        let conn = &mut self.conns[c as usize];
        let Some(h3) = conn.h3.as_mut() else {
            return;
        };
        let polled = h3.poll();
        let opened = h3.is_open() && conn.state == State::Handshaking;
        if let Poll::Ready(Err((kind, msg))) = polled {
            h3.transmit(now);
            return self.fail_conn(c, kind, Some(&msg), now);
        }
        if opened {
            self.opened(c);
        }
        self.send_waiting(c, now);
        self.poll_h3_streams(c, now);
        if let Some(h3) = self.conns[c as usize].h3.as_mut() {
            h3.transmit(now);
        }
    }

    /// Polls the requests in flight on HTTP/3 conn `c`.
    fn poll_h3_streams(&mut self, c: u32, now: u64) {
        let arrived = self.last_arrival(c, now);
        for s in self.slots.slots_of(c) {
            let Some(stream) = self.wire[s as usize].h3.as_mut() else {
                continue;
            };
            match stream.poll() {
                Poll::Pending => continue,
                Poll::Ready(Ok(status)) => {
                    self.wire[s as usize].h3 = None;
                    self.finish(s, status, true, arrived);
                    self.maybe_rebind(c);
                }
                Poll::Ready(Err((kind, msg))) => {
                    self.wire[s as usize].h3 = None;
                    self.fail_slot(s, kind, Some(&msg), now);
                }
            }
            // The connection may have closed (drained) with this request.
            if self.conns[c as usize].h3.is_none() {
                return;
            }
        }
    }

    /// After a response on HTTP/3 conn `c`: moves it to a new local port every
    /// `--h3-rebind-every` responses (the server must follow the migration).
    fn maybe_rebind(&mut self, c: u32) {
        let rebind_every = self.plan.conn.quic.as_ref().and_then(|q| q.rebind_every);
        let conn = &mut self.conns[c as usize];
        let Some(h3) = conn.h3.as_mut() else {
            return;
        };
        if !h3.answered(rebind_every) {
            return;
        }
        let addr = self.targets.hosts[conn.host as usize].addr;
        let Ok(fd) = socket::udp_connect(&addr, None) else {
            return; // no new port now: the connection stays where it is
        };
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        if self.poller.add(raw, c as u64, Interest::READ).is_err() {
            return;
        }
        let _ = socket::enable_rx_timestamps(raw);
        // Dropping the old socket closes it, which also takes it out of epoll.
        drop(h3.rebind(fd));
        conn.fd = raw;
        if self.measuring {
            self.rec.conns.migrations += 1;
        }
    }

    /// When the latest bytes on conn `c` arrived, on the run clock.
    fn last_arrival(&self, c: u32, now: u64) -> u64 {
        let stamp = self.conns[c as usize]
            .io
            .as_ref()
            .and_then(|io| io.stamp.get());
        arrival(stamp, self.realtime_offset, now)
    }

    /// A complete response that arrived at `arrived` (no earlier than its request was sent).
    pub(super) fn finish(
        &mut self,
        s: u32,
        status: impl Into<Status>,
        keep_alive: bool,
        arrived: u64,
    ) {
        let status = status.into();
        let c = self.slots.conn_of(s);
        let answered = self.slots.request_mut(s).answer(arrived);
        let measured = answered.due.measured;
        let mark = self
            .traces
            .as_deref_mut()
            .and_then(|t| t.marks[s as usize].take());
        if let Some(mark) = mark {
            if measured && self.rec.traces.len() < MAX_TRACES {
                self.rec.traces.push(Sent {
                    id: mark.id,
                    sent_unix_ns: mark.sent_unix_ns,
                    lag_ns: mark.lag_ns,
                    service_ns: answered.service_ns,
                    status: match status {
                        Status::Http(code) => code,
                        Status::Grpc(_) => 200,
                    },
                });
            }
        }
        if measured {
            self.rec
                .response(status, answered.latency_ns, answered.service_ns);
            let host = self.targets.requests[answered.due.target as usize].host;
            self.rec.host(host, status.failed());
            self.interval.counts.response(status);
            self.interval
                .latency
                .saturating_record(answered.latency_ns / 1000);
        }
        self.wire[s as usize].reader.reset();
        self.set_streaming(s, false);
        let conn = &mut self.conns[c as usize];
        conn.answered_one();
        // It carried a request through: its next failure starts a fresh back-off.
        conn.backoff_ns = 0;
        let asked_to_close = conn.is_drained()
            && self.targets.requests[answered.due.target as usize]
                .closing
                .is_some();
        if !keep_alive || asked_to_close {
            // The server closes (it said so, or was asked to): let it go first.
            self.await_close(c, arrived);
        } else {
            self.close_if_drained(c);
        }
        self.slots.release(s, &self.conns);
    }

    /// Closes conn `c` from this side if it drains (`--requests-per-connection` without a
    /// closing request, or too many failures in a row) and its last request just ended,
    /// answered or failed.
    fn close_if_drained(&mut self, c: u32) {
        if self.conns[c as usize].is_drained() {
            self.count_close(false);
            self.close(c);
        }
    }

    /// Fails one request (an HTTP/2 stream, or a request whose connection is gone); whether it
    /// was measured (and so counted).
    pub(super) fn fail_slot(
        &mut self,
        s: u32,
        kind: ErrorKind,
        msg: Option<&str>,
        now: u64,
    ) -> bool {
        let c = self.slots.conn_of(s);
        let failed = self.slots.request_mut(s).fail(now);
        if failed.measured {
            let host = self.targets.requests[failed.target as usize].host;
            self.rec.host(host, true);
            self.count_error(kind, msg);
        }
        self.release_failed(s, c);
        failed.measured
    }

    /// A gRPC call whose deadline passed: counted as DEADLINE_EXCEEDED (no latency: it has no
    /// response), its stream reset.
    pub(super) fn deadline_passed(&mut self, s: u32, now: u64) {
        let c = self.slots.conn_of(s);
        let failed = self.slots.request_mut(s).fail(now);
        if failed.measured {
            let host = self.targets.requests[failed.target as usize].host;
            self.rec.host(host, true);
            let status = Status::Grpc(meshbench_net::grpc::Code::DEADLINE_EXCEEDED);
            self.rec.counts.response(status);
            self.interval.counts.response(status);
        }
        self.release_failed(s, c);
    }

    /// Frees slot `s` of conn `c` after its request failed.
    fn release_failed(&mut self, s: u32, c: u32) {
        self.conns[c as usize].failed_one();
        let wire = &mut self.wire[s as usize];
        wire.h2 = None;
        wire.h3 = None;
        wire.reader.reset();
        self.set_streaming(s, false);
        // A draining connection whose last request failed closes too, or its slots would never
        // be taken again.
        self.close_if_drained(c);
        self.slots.release(s, &self.conns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_http1_request_carries_the_id_after_its_request_line_and_nothing_else_changes() {
        let request = b"GET /x HTTP/1.1\r\nhost: a\r\n\r\nbody";
        let mut into = Vec::new();
        tag(&mut into, request, 0x2a);
        assert_eq!(
            into,
            b"GET /x HTTP/1.1\r\nx-meshbench-id: mb000000000000002a\r\nhost: a\r\n\r\nbody"
                .to_vec()
        );
        // The buffer is reused: a second tag replaces the first.
        tag(&mut into, request, 0x2b);
        let header_line = attribution::ID_HEADER.len() + ": ".len() + 18 + "\r\n".len();
        assert_eq!(into.len(), request.len() + header_line);
        assert!(into.windows(18).any(|w| w == b"mb000000000000002b"));
    }

    #[test]
    fn a_tagged_h2_request_is_a_copy_with_the_id_header() {
        let request = HttpRequest {
            method: http::Method::GET,
            uri: "http://a/".parse().unwrap(),
            headers: http::HeaderMap::new(),
            body: bytes::Bytes::new(),
            grpc: false,
        };
        let tagged = with_id(&request, 7);
        assert_eq!(tagged.headers["x-meshbench-id"], "mb0000000000000007");
        assert!(request.headers.is_empty());
    }
}
