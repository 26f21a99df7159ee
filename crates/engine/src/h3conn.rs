//! HTTP/3 through the same request loop: one UDP socket per connection (connected to the
//! host, so it counts and closes like a TCP connection), quinn-proto for QUIC, h3 for HTTP/3
//! through [`crate::quic`]. Nothing runs in the background: when epoll reports the socket, the
//! loop reads every datagram waiting ([`H3Conn::receive`]), polls the connection and its
//! streams, then writes what QUIC has to send ([`H3Conn::transmit`]); QUIC's own timers (loss
//! detection, acknowledgements, idle) are one more wake-up time of the loop ([`H3Conn::timer`]).
//!
//! A response's arrival is the kernel's receive stamp of the datagram that completed it, as for
//! TCP. With `zero_rtt`, a connection that resumes a session sends its first requests in 0-RTT
//! early data, before the handshake completes; `rebind` moves the connection to a new local
//! port (a NAT rebinding, a phone changing networks), which the server must follow.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use h3::error::{ConnectionError, StreamError};
use meshbench_net::socket;
use meshbench_net::stream::IoState;
use quinn_proto::{ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event, VarInt};
use thiserror::Error;

use crate::quic::{lost_reason, QuicConn, Shared, SharedConn};
use crate::recorder::ErrorKind;
use crate::spec::HttpRequest;

type Driver = h3::client::Connection<QuicConn, Bytes>;
type Sender = h3::client::SendRequest<QuicConn, Bytes>;
type Setup = Pin<Box<dyn Future<Output = Result<(Driver, Sender), ConnectionError>>>>;

/// H3_NO_ERROR: how the client closes a connection it is done with.
const H3_NO_ERROR: u32 = 0x100;
/// Largest UDP payload read at once (QUIC datagrams are at most 64 KiB).
const MAX_DATAGRAM: usize = 65_535;

/// QUIC settings of a run: the TLS client (ALPN h3) and what the transport allows.
#[derive(Clone)]
pub struct QuicSpec {
    pub client: quinn_proto::ClientConfig,
    /// Requests on a resumed connection go out as 0-RTT early data.
    pub zero_rtt: bool,
    /// Move each connection to a new local port after this many responses on it.
    pub rebind_every: Option<u64>,
}

impl std::fmt::Debug for QuicSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicSpec")
            .field("zero_rtt", &self.zero_rtt)
            .field("rebind_every", &self.rebind_every)
            .finish_non_exhaustive()
    }
}

/// The run's TLS client cannot carry QUIC: it has no TLS 1.3 suite QUIC starts with.
#[derive(Debug, Error)]
#[error("TLS settings unusable for QUIC: {0}")]
pub struct QuicTlsError(#[source] quinn_proto::crypto::rustls::NoInitialCipherSuite);

impl QuicSpec {
    /// QUIC settings from the run's TLS client (its trust, client certificate and session
    /// cache; ALPN is set to h3 here) and `streams` requests at once per connection. Fails with
    /// one line when the TLS settings cannot carry QUIC (no TLS 1.3 suite QUIC starts with).
    pub fn new(
        tls: &rustls::ClientConfig,
        streams: usize,
        zero_rtt: bool,
        rebind_every: Option<u64>,
    ) -> Result<QuicSpec, QuicTlsError> {
        let mut tls = tls.clone();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        tls.enable_early_data = zero_rtt;
        let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls))
            .map_err(QuicTlsError)?;
        let mut client = quinn_proto::ClientConfig::new(Arc::new(crypto));
        client.transport_config(Arc::new(transport(streams)));
        Ok(QuicSpec {
            client,
            zero_rtt,
            rebind_every,
        })
    }
}

/// The client's QUIC transport: streams and windows large enough that flow control never
/// throttles a benchmark, keep-alive well inside the idle timeout.
fn transport(streams: usize) -> quinn_proto::TransportConfig {
    let mut t = quinn_proto::TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(streams.max(1) as u32))
        .max_concurrent_uni_streams(VarInt::from_u32(16))
        .stream_receive_window(VarInt::from_u32(4 << 20))
        .receive_window(VarInt::from_u32(16 << 20))
        .send_window(16 << 20)
        .max_idle_timeout(Some(VarInt::from_u32(30_000).into()))
        .keep_alive_interval(Some(Duration::from_secs(10)));
    t
}

enum Phase {
    /// h3 opens its control stream and sends its settings (waits for QUIC to allow streams).
    Setup(Setup),
    Open {
        driver: Box<Driver>,
        send: Sender,
    },
}

/// An HTTP/3 client connection owned by the loop.
pub struct H3Conn {
    socket: OwnedFd,
    endpoint: Endpoint,
    handle: ConnectionHandle,
    shared: SharedConn,
    phase: Phase,
    io: Rc<IoState>,
    /// The run clock's time at `epoch` (quinn-proto counts in `Instant`s).
    epoch: Instant,
    epoch_run: u64,
    out: Vec<u8>,
    /// QUIC's handshake completed, and whether the server took 0-RTT: until the loop takes it.
    handshake: Option<bool>,
    /// Responses since the last rebinding.
    since_rebind: u64,
}

/// A request in flight: sends the request, reads the whole response, gives its status.
pub struct H3Stream(Pin<Box<dyn Future<Output = Result<u16, StreamError>>>>);

fn cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

impl H3Conn {
    /// Starts QUIC towards `peer` on `socket` (connected to it); `now` is the run clock.
    pub fn connect(
        socket: OwnedFd,
        peer: SocketAddr,
        server_name: &str,
        spec: &QuicSpec,
        now: u64,
    ) -> Result<H3Conn, (ErrorKind, String)> {
        let epoch = Instant::now();
        let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let (handle, conn) = endpoint
            .connect(epoch, spec.client.clone(), peer, server_name)
            .map_err(|e| (ErrorKind::Tls, format!("QUIC connect: {e}")))?;
        let shared = Rc::new(RefCell::new(Shared { conn, lost: None }));
        let quic = QuicConn(Rc::clone(&shared));
        let setup: Setup =
            Box::pin(async move { h3::client::builder().send_grease(false).build(quic).await });
        let io = Rc::new(IoState::default());
        io.read_ready.set(true);
        let mut h3 = H3Conn {
            socket,
            endpoint,
            handle,
            shared,
            phase: Phase::Setup(setup),
            io,
            epoch,
            epoch_run: now,
            out: Vec::with_capacity(MAX_DATAGRAM),
            handshake: None,
            since_rebind: 0,
        };
        h3.transmit(now);
        Ok(h3)
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Byte counts and receive stamp of the socket (UDP payloads: QUIC packets).
    pub fn io(&self) -> Rc<IoState> {
        Rc::clone(&self.io)
    }

    fn instant(&self, run: u64) -> Instant {
        self.epoch + Duration::from_nanos(run.saturating_sub(self.epoch_run))
    }

    /// Reads every datagram waiting and hands it to QUIC; fires QUIC's timer if it is due.
    /// An error is the socket's (an ICMP port unreachable shows as `ECONNREFUSED`).
    pub fn receive(&mut self, buf: &mut [u8], now: u64) -> io::Result<()> {
        let at = self.instant(now);
        let peer = self.shared.borrow().conn.remote_address();
        let mut reply = Vec::new();
        loop {
            let (n, stamp) = match socket::recv_timestamped(self.fd(), &mut buf[..MAX_DATAGRAM]) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.io.bytes_in.set(self.io.bytes_in.get() + n as u64);
            if stamp.is_some() {
                self.io.stamp.set(stamp);
            }
            let data = BytesMut::from(&buf[..n]);
            match self.endpoint.handle(at, peer, None, None, data, &mut reply) {
                Some(DatagramEvent::ConnectionEvent(_, event)) => {
                    self.shared.borrow_mut().conn.handle_event(event)
                }
                Some(DatagramEvent::Response(t)) => {
                    self.send_datagram(&reply[..t.size]);
                    reply.clear();
                }
                // A client accepts no connection; anything else is not for it.
                Some(DatagramEvent::NewConnection(_)) | None => {}
            }
        }
        if self.timer().is_some_and(|t| t <= now) {
            self.shared.borrow_mut().conn.handle_timeout(at);
        }
        self.events();
        Ok(())
    }

    /// QUIC's events: the handshake's end, the connection's loss, and what the endpoint must
    /// hear of (connection ids).
    fn events(&mut self) {
        let mut shared = self.shared.borrow_mut();
        while let Some(event) = shared.conn.poll() {
            match event {
                Event::Connected => self.handshake = Some(shared.conn.accepted_0rtt()),
                Event::ConnectionLost { reason } => {
                    shared.lost = Some(lost_reason(&reason));
                }
                _ => {}
            }
        }
        while let Some(event) = shared.conn.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(self.handle, event) {
                shared.conn.handle_event(back);
            }
        }
    }

    /// Once, after QUIC's handshake completed: whether the server accepted 0-RTT.
    pub fn take_handshake(&mut self) -> Option<bool> {
        self.handshake.take()
    }

    /// Drives h3: its set-up, then the connection (control stream, GOAWAY). `Ready(Err)` when
    /// the connection has ended, with why.
    pub fn poll(&mut self) -> Poll<Result<(), (ErrorKind, String)>> {
        let mut cx = cx();
        if let Phase::Setup(setup) = &mut self.phase {
            match setup.as_mut().poll(&mut cx) {
                Poll::Pending => return self.lost(),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(classify_conn(&e))),
                Poll::Ready(Ok((driver, send))) => {
                    self.phase = Phase::Open {
                        driver: Box::new(driver),
                        send,
                    }
                }
            }
        }
        let Phase::Open { driver, .. } = &mut self.phase else {
            return Poll::Pending;
        };
        match driver.poll_close(&mut cx) {
            Poll::Pending => self.lost(),
            Poll::Ready(e) if e.is_h3_no_error() => {
                Poll::Ready(Err((ErrorKind::GoAway, "GOAWAY (H3_NO_ERROR)".into())))
            }
            Poll::Ready(e) => Poll::Ready(Err(classify_conn(&e))),
        }
    }

    fn lost(&self) -> Poll<Result<(), (ErrorKind, String)>> {
        match &self.shared.borrow().lost {
            None => Poll::Pending,
            Some(lost) => Poll::Ready(Err(classify_conn(&ConnectionError::Remote(lost.clone())))),
        }
    }

    /// Requests can be started (h3 is set up; with 0-RTT, possibly before the handshake ends).
    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open { .. })
    }

    /// Starts `req` on a new stream (it waits inside if the peer's stream limit is reached).
    pub fn send(&mut self, req: &HttpRequest) -> Option<H3Stream> {
        let Phase::Open { send, .. } = &mut self.phase else {
            return None;
        };
        let mut send = send.clone();
        let req = req.clone();
        Some(H3Stream(Box::pin(async move {
            let mut head = http::Request::new(());
            *head.method_mut() = req.method;
            *head.uri_mut() = req.uri;
            *head.headers_mut() = req.headers;
            let mut stream = send.send_request(head).await?;
            if !req.body.is_empty() {
                stream.send_data(req.body).await?;
            }
            stream.finish().await?;
            let response = stream.recv_response().await?;
            while let Some(mut chunk) = stream.recv_data().await? {
                chunk.advance(chunk.remaining());
            }
            Ok(response.status().as_u16())
        })))
    }

    /// Writes every datagram QUIC has ready. A full socket buffer drops the rest of this round:
    /// QUIC's loss recovery sends it again, as it would for a drop on the path.
    pub fn transmit(&mut self, now: u64) {
        let at = self.instant(now);
        loop {
            self.out.clear();
            let sent = self
                .shared
                .borrow_mut()
                .conn
                .poll_transmit(at, 1, &mut self.out);
            let Some(t) = sent else { break };
            let datagram = std::mem::take(&mut self.out);
            let ok = self.send_datagram(&datagram[..t.size]);
            self.out = datagram;
            if !ok {
                break;
            }
        }
        self.events();
    }

    fn send_datagram(&self, datagram: &[u8]) -> bool {
        match socket::send(self.fd(), datagram) {
            Ok(n) => {
                self.io.bytes_out.set(self.io.bytes_out.get() + n as u64);
                true
            }
            Err(_) => false,
        }
    }

    /// When QUIC next needs the loop (run clock), if ever.
    pub fn timer(&self) -> Option<u64> {
        let at = self.shared.borrow_mut().conn.poll_timeout()?;
        let since = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        Some(self.epoch_run + since)
    }

    /// One more response on this connection; `true` when it should move to a new local port.
    pub fn answered(&mut self, rebind_every: Option<u64>) -> bool {
        self.since_rebind += 1;
        match rebind_every {
            Some(n) if self.since_rebind >= n => {
                self.since_rebind = 0;
                true
            }
            _ => false,
        }
    }

    /// Moves the connection to `socket` (a new local port, connected to the same peer): QUIC
    /// carries on from there, the server validating the new path.
    pub fn rebind(&mut self, socket: OwnedFd) -> OwnedFd {
        self.shared.borrow_mut().conn.local_address_changed();
        std::mem::replace(&mut self.socket, socket)
    }

    /// Closes the connection as a client does when done (CONNECTION_CLOSE, H3_NO_ERROR), once,
    /// without waiting for the peer.
    pub fn close(&mut self, now: u64) {
        let at = self.instant(now);
        {
            let mut shared = self.shared.borrow_mut();
            if shared.lost.is_some() || shared.conn.is_closed() {
                return;
            }
            shared
                .conn
                .close(at, VarInt::from_u32(H3_NO_ERROR), Bytes::new());
        }
        self.transmit(now);
    }
}

impl H3Stream {
    /// Polls the request; `Ready(Ok(status))` once the whole response has arrived.
    pub fn poll(&mut self) -> Poll<Result<u16, (ErrorKind, String)>> {
        match self.0.as_mut().poll(&mut cx()) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(status)) => Poll::Ready(Ok(status)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(classify_stream(&e))),
        }
    }
}

/// A QUIC error code in TLS's range (0x100 + the TLS alert): the handshake failed.
fn is_crypto(code: quinn_proto::TransportErrorCode) -> bool {
    u64::from(code) & !0xff == 0x100
}

fn classify_conn(e: &ConnectionError) -> (ErrorKind, String) {
    use h3::quic::ConnectionErrorIncoming as Incoming;
    use quinn_proto::ConnectionError as Quic;
    if let ConnectionError::Remote(Incoming::Undefined(inner)) = e {
        if let Some(quic) = inner.downcast_ref::<Quic>() {
            let kind = match quic {
                Quic::TransportError(t) if is_crypto(t.code) => ErrorKind::Tls,
                Quic::ConnectionClosed(c) if is_crypto(c.error_code) => ErrorKind::Tls,
                Quic::TransportError(_) => ErrorKind::Protocol,
                Quic::ConnectionClosed(_) | Quic::Reset => ErrorKind::Reset,
                Quic::TimedOut => ErrorKind::Timeout,
                _ => ErrorKind::Other,
            };
            return (kind, format!("QUIC: {quic}"));
        }
    }
    let kind = match e {
        ConnectionError::Timeout | ConnectionError::Remote(Incoming::Timeout) => ErrorKind::Timeout,
        _ => ErrorKind::Reset,
    };
    (kind, format!("HTTP/3: {e}"))
}

fn classify_stream(e: &StreamError) -> (ErrorKind, String) {
    let kind = match e {
        StreamError::RemoteTerminate { .. } => ErrorKind::StreamReset,
        StreamError::RemoteClosing => ErrorKind::GoAway,
        StreamError::ConnectionError(c) => return classify_conn(c),
        StreamError::HeaderTooBig { .. } | StreamError::StreamError { .. } => ErrorKind::Protocol,
        _ => ErrorKind::Other,
    };
    (kind, format!("HTTP/3 stream: {e}"))
}
