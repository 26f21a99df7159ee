//! A connection's life as the worker drives it: open a socket to the connection's host,
//! shake hands (TLS, then HTTP/2; for HTTP/3, QUIC on a UDP socket), count bytes, close, and
//! fail with back-off.
//!
//! Split from the loop so that [`super`] reads as scheduling and [`super::exchange`] as
//! requests on the wire. Contract: these are the only places that create or drop sockets and
//! open or close a [`Conn`](crate::conn::Conn); a failure is data (the requests on the
//! connection fail by kind, [`Worker::fail_conn`]), never an error that ends the run.

use std::io;
use std::os::fd::AsRawFd;

use meshbench_net::poller::Interest;
use meshbench_net::socket::{self, Connect};
use meshbench_net::stream::{self, Handshake, Stream};

use super::{Worker, SECOND};
use crate::conn::{Linger, State, LINGER_TOKEN};
use crate::h2conn::H2Conn;
use crate::h3conn::H3Conn;
use crate::recorder::ErrorKind;
use meshbench_results::Protocol;

impl Worker<'_> {
    /// Starts a TCP connection for conn `c` to its host; leaves it Connecting, or further if
    /// the connect completed at once. On failure the connection stays Closed.
    pub(super) fn open(&mut self, c: u32, now: u64) -> Result<(), io::Error> {
        let addr = self.targets.hosts[self.conns[c as usize].host as usize].addr;
        if self.measuring {
            self.rec.conns.opened += 1;
            self.interval.opened += 1;
        }
        let source = match self.plan.conn.source_addrs.as_slice() {
            [] => None,
            all => {
                let ip = all[self.next_source % all.len()];
                self.next_source = self.next_source.wrapping_add(1);
                Some(ip)
            }
        };
        if self.plan.conn.protocol == Protocol::Http3 {
            return self.open_quic(c, addr, source, now);
        }
        let (fd, done) = match socket::connect(&addr, source)? {
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
        // Until TLS or h2 takes it over, the plain stream owns the socket.
        self.conns[c as usize].attach(raw, Stream::plain(fd), done, now);
        self.opening += 1;
        if done {
            self.tcp_connected(c, now);
        }
        Ok(())
    }

    /// Starts QUIC for conn `c` on a new UDP socket: Handshaking until h3 is set up.
    fn open_quic(
        &mut self,
        c: u32,
        addr: std::net::SocketAddr,
        source: Option<std::net::IpAddr>,
        now: u64,
    ) -> Result<(), io::Error> {
        let fd = socket::udp_connect(&addr, source)?;
        let raw = fd.as_raw_fd();
        self.poller.add(raw, c as u64, Interest::READ)?;
        if socket::enable_rx_timestamps(raw).is_err() {
            self.timestamps = false;
        }
        let host = &self.targets.hosts[self.conns[c as usize].host as usize];
        let name = match &host.server_name {
            Some(rustls::pki_types::ServerName::DnsName(n)) => n.as_ref().to_string(),
            _ => host.addr.ip().to_string(),
        };
        let quic = self
            .plan
            .conn
            .quic
            .as_ref()
            .expect("an HTTP/3 run has QUIC settings");
        match H3Conn::connect(fd, addr, &name, quic, now) {
            Ok(h3) => {
                self.conns[c as usize].attach_quic(raw, h3, now);
                self.opening += 1;
                Ok(())
            }
            Err((kind, msg)) => {
                self.fail_conn(c, kind, Some(&msg), now);
                Ok(())
            }
        }
    }

    /// QUIC's handshake completed on conn `c` (counted once): its time from the first packet,
    /// and whether the server took the 0-RTT requests.
    pub(super) fn quic_handshake_done(&mut self, c: u32, now: u64, accepted_0rtt: bool) {
        if self.measuring {
            let conns = &mut self.rec.conns;
            let opened = self.conns[c as usize].opened_at;
            conns.handshakes += 1;
            conns.resumed += accepted_0rtt as u64;
            conns.zero_rtt += accepted_0rtt as u64;
            conns.handshake.saturating_record((now - opened) / 1000);
        }
    }

    /// TCP is up: record the connect time and start TLS, HTTP/2, or go.
    pub(super) fn tcp_connected(&mut self, c: u32, now: u64) {
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
    pub(super) fn drive_tls(&mut self, c: u32, now: u64) {
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
                if self.plan.conn.protocol.is_http2() && alpn.as_deref() != Some(b"h2") {
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
    pub(super) fn transport_ready(&mut self, c: u32, now: u64) {
        let conn = &mut self.conns[c as usize];
        match self.plan.conn.protocol {
            Protocol::Http1 => {
                self.opened(c);
                self.set_write_interest(c, false);
                self.send_waiting(c, now);
            }
            // QUIC connections are opened by `open_quic` and never carry a byte stream.
            Protocol::Http3 => {}
            Protocol::Http2 | Protocol::Grpc => {
                let stream = conn.stream.take().expect("an open connection has a stream");
                conn.h2 = Some(H2Conn::start(stream));
                conn.state = State::Handshaking;
                self.drive_h2(c, now);
            }
        }
    }

    /// Watches conn `c`'s socket for writability too, or no longer.
    pub(super) fn set_write_interest(&mut self, c: u32, on: bool) {
        let conn = &mut self.conns[c as usize];
        if conn.want_write != on && conn.fd >= 0 {
            conn.want_write = on;
            let interest = if on { Interest::BOTH } else { Interest::READ };
            let _ = self.poller.modify(conn.fd, c as u64, interest);
        }
    }

    /// Adds the bytes conn `c` moved since the last look to the recorder (measured window only).
    pub(super) fn account(&mut self, c: u32) {
        let (received, sent) = self.conns[c as usize].bytes_moved();
        if self.measuring {
            self.rec.bytes_received += received;
            self.rec.bytes_sent += sent;
        }
    }

    /// Conn `c` finished opening (TCP, TLS, HTTP/2 or QUIC handshakes): it is Ready.
    pub(super) fn opened(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if matches!(conn.state, State::Connecting | State::Handshaking) {
            self.opening -= 1;
        }
        conn.state = State::Ready;
    }

    /// Closes conn `c` (whatever state), leaving its requests to the caller.
    pub(super) fn close(&mut self, c: u32) {
        if matches!(
            self.conns[c as usize].state,
            State::Connecting | State::Handshaking
        ) {
            self.opening -= 1;
        }
        if let Some(h3) = self.conns[c as usize].h3.as_mut() {
            // CONNECTION_CLOSE, so that the server frees the connection now, not at its idle
            // timeout.
            h3.close(self.ctl.clock.now());
        }
        self.account(c);
        self.conns[c as usize].detach();
        for s in self.slots.slots_of(c) {
            let wire = &mut self.wire[s as usize];
            wire.reader.reset();
            wire.h2 = None;
            wire.h3 = None;
            wire.written = 0;
            self.set_streaming(s, false);
        }
    }

    /// Conn `c` carried its last response and the server is to close it (the response said so,
    /// or the client asked with `Connection: close`). Whoever closes first keeps the TIME_WAIT
    /// (and so a local port, towards a real network, for 60 s), so the client waits for the
    /// server's close, at most min(timeout, 1 s), and closes its end after it. The connection
    /// is Closed at once (its slot may open a new one); the old socket waits in
    /// [`Conn::linger`] under its own epoll token. The server's FIN has often arrived with the
    /// response: one read finds it and closes without waiting.
    pub(super) fn await_close(&mut self, c: u32, now: u64) {
        self.account(c);
        let Some(stream) = self.conns[c as usize].stream.take() else {
            return self.close(c);
        };
        let fd = self.conns[c as usize].fd;
        self.close(c);
        stream.mark_readable();
        let mut linger = Linger {
            stream,
            until: now + self.plan.timeout_ns.min(SECOND),
        };
        if !self.read_linger(&mut linger) {
            return;
        }
        if self
            .poller
            .modify(fd, u64::from(LINGER_TOKEN | c), Interest::READ)
            .is_err()
        {
            return self.count_close(false);
        }
        match self.conns[c as usize].linger.replace(linger) {
            // The previous socket's server still has not closed: the client does.
            Some(_) => self.count_close(false),
            None => self.lingering.push(c),
        }
    }

    /// Epoll reported conn `c`'s lingering socket.
    pub(super) fn on_linger(&mut self, c: u32) {
        let Some(mut linger) = self.conns[c as usize].linger.take() else {
            return;
        };
        linger.stream.mark_readable();
        if self.read_linger(&mut linger) {
            self.conns[c as usize].linger = Some(linger);
        }
    }

    /// Reads a lingering socket; false when it is done with (the socket is then closed by the
    /// caller dropping it): the server closed (or reset) it, or sent bytes nobody asked for.
    fn read_linger(&mut self, linger: &mut Linger) -> bool {
        match linger.stream.read_some(&mut self.buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            Ok(0) | Err(_) => {
                self.count_close(true);
                false
            }
            Ok(_) => {
                self.count_close(false);
                false
            }
        }
    }

    /// Closes the lingering sockets whose server has not closed them in time (the client then
    /// closes first after all) and forgets the connections that no longer linger.
    pub(super) fn end_lingers(&mut self, now: u64) {
        let mut i = 0;
        while i < self.lingering.len() {
            let c = self.lingering[i] as usize;
            match &self.conns[c].linger {
                Some(l) if l.until > now => i += 1,
                Some(_) => {
                    self.conns[c].linger = None;
                    self.count_close(false);
                    self.lingering.swap_remove(i);
                }
                None => {
                    self.lingering.swap_remove(i);
                }
            }
        }
    }

    /// Counts who closed a connection first (measured window only).
    pub(super) fn count_close(&mut self, by_server: bool) {
        if self.measuring {
            let conns = &mut self.rec.conns;
            if by_server {
                conns.closed_by_server += 1;
            } else {
                conns.closed_by_client += 1;
            }
        }
    }

    /// Fails every request on conn `c` and closes it; a failure to connect or shake hands puts
    /// the connection into back-off.
    pub(super) fn fail_conn(&mut self, c: u32, kind: ErrorKind, msg: Option<&str>, now: u64) {
        // A connection that failed before it could carry a request (or, over HTTP/2, before its
        // first answer: a server that does not speak h2) backs off before the next attempt.
        let conn = &self.conns[c as usize];
        let establishing = conn.state != State::Ready
            || kind == ErrorKind::Tls
            || (conn.is_multiplexed() && conn.answered == 0);
        let waiting = std::mem::take(&mut self.conns[c as usize].waiting);
        let busy: Vec<u32> = self
            .slots
            .slots_of(c)
            .filter(|&s| self.slots.request(s).is_busy())
            .collect();
        self.close(c);
        if establishing {
            self.conns[c as usize].back_off(now);
            self.backing_off.push(c);
        }
        drop(waiting);
        let mut measured = false;
        for s in busy {
            measured |= self.fail_slot(s, kind, msg, now);
        }
        if measured {
            self.interval.failed_connections += 1;
        }
    }

    /// Forgets the connections whose back-off is over (they reopen when a request takes them).
    pub(super) fn end_backoffs(&mut self, now: u64) {
        self.backing_off
            .retain(|&c| self.conns[c as usize].retry_at > now);
    }
}
