//! The backend turned hostile (`meshbench backend --hostile NAME`): a server that breaks HTTP
//! in one chosen way on every connection. It exists so that what a load generator (or a proxy)
//! does with a broken upstream can be checked against a real process: meshbench's own
//! black-box tests start it (crates/meshbench/tests/it/hostile.rs), and a user can put it behind
//! their proxy to see what the proxy makes of a slowloris or a lying `Content-Length`.
//!
//! Contract: one behaviour per server, named by [`Hostile`]; plain TCP on loopback or any
//! address; HTTP/1.1 behaviours answer every request on a connection the same way, HTTP/2 ones
//! speak prior-knowledge h2c with frames written by hand (a real HTTP/2 stack would refuse to
//! lie), and `tls-stall` speaks nothing at all. It is deliberately simple, one thread per
//! connection with blocking sockets, at most [`MAX_CONNECTIONS`] at a time: it is a test
//! fixture, not a fast server (that is [`crate::server`]). Connection threads see the stop flag
//! within [`POLL`] even when blocked on a silent peer.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use meshbench_net::http1::{head_info, BodyReader, MAX_HEAD_BYTES};
use thiserror::Error;

/// Connections served at once; more are closed as soon as they are accepted.
pub const MAX_CONNECTIONS: usize = 512;
/// How often blocked reads and writes look at the stop flag.
const POLL: Duration = Duration::from_millis(200);
/// Stack of a connection thread: it holds a few small buffers only.
const STACK_BYTES: usize = 128 * 1024;

/// One way of breaking HTTP. The names are the CLI's (`--hostile NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hostile {
    /// A valid response, one byte every `--drip` (default 100 ms).
    Slowloris,
    /// A status line, then header lines as fast as the peer reads them, never the blank line.
    EndlessHeader,
    /// `100 Continue` and `103 Early Hints` before a valid `200` (a correct server: nothing is
    /// an error).
    Informational,
    /// `100 Continue` heads forever, never a final response.
    InformationalFlood,
    /// A chunk whose size line says less than the data that follows.
    ChunkedLie,
    /// A chunk whose size line says more than the data that follows, then silence.
    ChunkedLieStall,
    /// `Content-Length: 1000`, ten bytes of body, then a close.
    ShortBody,
    /// `Content-Length: 1000`, ten bytes of body, then silence.
    ShortBodyStall,
    /// Reads the request and closes before sending a byte.
    EarlyClose,
    /// Sends half a response, then resets the connection (`SO_LINGER` 0).
    Rst,
    /// HTTP/2 (h2c): every stream is answered with RST_STREAM (INTERNAL_ERROR).
    H2RstFlood,
    /// HTTP/2 (h2c): GOAWAY (last stream 0) right after SETTINGS, many times, and again for
    /// every request; the connection is never closed by the server.
    H2GoawayFlood,
    /// HTTP/2 (h2c): SETTINGS_INITIAL_WINDOW_SIZE 0 and never a WINDOW_UPDATE, so no request
    /// body can be sent; requests without a body are answered `200`.
    H2ZeroWindow,
    /// Accepts TCP, reads the TLS ClientHello, never answers.
    TlsStall,
}

/// What a client must speak to meet a behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaks {
    Http1,
    /// HTTP/2 with prior knowledge over plain TCP.
    H2c,
    /// TLS (any application protocol: the handshake never ends).
    Tls,
}

impl Hostile {
    pub const ALL: [Hostile; 14] = [
        Hostile::Slowloris,
        Hostile::EndlessHeader,
        Hostile::Informational,
        Hostile::InformationalFlood,
        Hostile::ChunkedLie,
        Hostile::ChunkedLieStall,
        Hostile::ShortBody,
        Hostile::ShortBodyStall,
        Hostile::EarlyClose,
        Hostile::Rst,
        Hostile::H2RstFlood,
        Hostile::H2GoawayFlood,
        Hostile::H2ZeroWindow,
        Hostile::TlsStall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Hostile::Slowloris => "slowloris",
            Hostile::EndlessHeader => "endless-header",
            Hostile::Informational => "informational",
            Hostile::InformationalFlood => "informational-flood",
            Hostile::ChunkedLie => "chunked-lie",
            Hostile::ChunkedLieStall => "chunked-lie-stall",
            Hostile::ShortBody => "short-body",
            Hostile::ShortBodyStall => "short-body-stall",
            Hostile::EarlyClose => "early-close",
            Hostile::Rst => "rst",
            Hostile::H2RstFlood => "h2-rst-flood",
            Hostile::H2GoawayFlood => "h2-goaway-flood",
            Hostile::H2ZeroWindow => "h2-zero-window",
            Hostile::TlsStall => "tls-stall",
        }
    }

    pub fn speaks(self) -> Speaks {
        match self {
            Hostile::H2RstFlood | Hostile::H2GoawayFlood | Hostile::H2ZeroWindow => Speaks::H2c,
            Hostile::TlsStall => Speaks::Tls,
            _ => Speaks::Http1,
        }
    }
}

/// A behaviour name that is not one of [`Hostile::ALL`].
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown behaviour '{0}'; one of: {names}", names = names())]
pub struct UnknownHostile(pub String);

fn names() -> String {
    Hostile::ALL.map(Hostile::name).join(", ")
}

impl FromStr for Hostile {
    type Err = UnknownHostile;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Hostile::ALL
            .into_iter()
            .find(|h| h.name() == s)
            .ok_or_else(|| UnknownHostile(s.to_string()))
    }
}

/// A running hostile server; stops when dropped.
pub struct HostileServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl HostileServer {
    /// Binds `addr` (port 0 picks a free one) and misbehaves as `how` on every connection;
    /// `drip` paces [`Hostile::Slowloris`].
    pub fn start(addr: SocketAddr, how: Hostile, drip: Duration) -> io::Result<HostileServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accept = std::thread::Builder::new()
            .name("hostile-accept".into())
            .spawn(move || accept_loop(&listener, how, drip, &flag))?;
        Ok(HostileServer {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; connection threads end within [`POLL`] (dropping does the same).
    pub fn stop(self) {}
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, how: Hostile, drip: Duration, stop: &Arc<AtomicBool>) {
    let live = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(_) => {
                // Out of descriptors, or a connection reset before it was accepted.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if live.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            continue; // dropped: closed at once
        }
        live.fetch_add(1, Ordering::Relaxed);
        let (live2, stop2) = (live.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("hostile-conn".into())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                let _ = serve(
                    Peer {
                        stream,
                        stop: stop2,
                    },
                    how,
                    drip,
                );
                live2.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A connection whose blocking reads and writes give up when the server stops.
struct Peer {
    stream: TcpStream,
    stop: Arc<AtomicBool>,
}

/// Why a connection's thread ends early.
fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "server stopping")
}

impl Peer {
    fn setup(&self) -> io::Result<()> {
        self.stream.set_nonblocking(false)?;
        self.stream.set_nodelay(true)?;
        self.stream.set_read_timeout(Some(POLL))?;
        self.stream.set_write_timeout(Some(POLL))
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.stream.read(buf) {
                Err(e) if is_poll_timeout(&e) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(stopped());
                    }
                }
                other => return other,
            }
        }
    }

    fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match self.stream.write(data) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(e) if is_poll_timeout(&e) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(stopped());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads and forgets everything until the peer closes: a server that went silent.
    fn stall(&mut self) -> io::Result<()> {
        let mut buf = [0u8; 4096];
        while self.read(&mut buf)? > 0 {}
        Ok(())
    }

    fn sleep(&self, d: Duration) -> io::Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        std::thread::sleep(d);
        Ok(())
    }
}

fn is_poll_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn serve(mut peer: Peer, how: Hostile, drip: Duration) -> io::Result<()> {
    peer.setup()?;
    match how.speaks() {
        Speaks::Tls => peer.stall(),
        Speaks::H2c => serve_h2(&mut peer, how),
        Speaks::Http1 => {
            let mut requests = RequestReader::default();
            while requests.next(&mut peer)? {
                if !answer_h1(&mut peer, how, drip)? {
                    return Ok(());
                }
            }
            Ok(())
        }
    }
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// Misbehaves on one HTTP/1.1 request; false when the connection is to be closed.
fn answer_h1(peer: &mut Peer, how: Hostile, drip: Duration) -> io::Result<bool> {
    match how {
        Hostile::Slowloris => {
            for b in OK {
                peer.write_all(std::slice::from_ref(b))?;
                peer.sleep(drip)?;
            }
        }
        Hostile::EndlessHeader => {
            peer.write_all(b"HTTP/1.1 200 OK\r\n")?;
            let mut line = b"X-Endless: ".to_vec();
            line.resize(1022, b'a');
            line.extend_from_slice(b"\r\n");
            // 16 KiB of header lines per write, so that the server is not the slow side.
            let lines = line.repeat(16);
            loop {
                peer.write_all(&lines)?;
            }
        }
        Hostile::Informational => {
            peer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            peer.write_all(
                b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n",
            )?;
            peer.write_all(OK)?;
        }
        Hostile::InformationalFlood => {
            let heads = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(64);
            loop {
                peer.write_all(&heads)?;
            }
        }
        Hostile::ChunkedLie => peer.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nmore than four\r\n0\r\n\r\n",
        )?,
        Hostile::ChunkedLieStall => {
            peer.write_all(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n400\r\nless than 1024\r\n0\r\n\r\n",
            )?;
            peer.stall()?;
            return Ok(false);
        }
        Hostile::ShortBody | Hostile::ShortBodyStall => {
            peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")?;
            if how == Hostile::ShortBodyStall {
                peer.stall()?;
            }
            return Ok(false);
        }
        Hostile::EarlyClose => return Ok(false),
        Hostile::Rst => {
            peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")?;
            peer.write_all(&[b'x'; 500])?;
            meshbench_net::socket::set_linger_zero(peer.stream.as_raw_fd())?;
            return Ok(false);
        }
        Hostile::H2RstFlood | Hostile::H2GoawayFlood | Hostile::H2ZeroWindow => {}
        Hostile::TlsStall => {}
    }
    Ok(true)
}

/// Reads HTTP/1.1 requests one at a time, skipping their bodies; bounded like the engine's
/// reader (a head over [`MAX_HEAD_BYTES`] ends the connection).
#[derive(Default)]
struct RequestReader {
    buf: Vec<u8>,
}

impl RequestReader {
    /// Waits for the next whole request; false when the peer closed or sent garbage.
    fn next(&mut self, peer: &mut Peer) -> io::Result<bool> {
        let mut chunk = [0u8; 8192];
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 100];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&self.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let Ok(info) = head_info(req.version.unwrap_or(1), req.headers, false, true)
                    else {
                        return Ok(false);
                    };
                    self.buf.drain(..len);
                    return self.skip_body(peer, BodyReader::new(info.framing));
                }
                Ok(httparse::Status::Partial) if self.buf.len() <= MAX_HEAD_BYTES => {}
                _ => return Ok(false),
            }
            let n = peer.read(&mut chunk)?;
            if n == 0 {
                return Ok(false);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn skip_body(&mut self, peer: &mut Peer, mut body: BodyReader) -> io::Result<bool> {
        let mut chunk = [0u8; 8192];
        loop {
            let Ok((used, done)) = body.feed(&self.buf) else {
                return Ok(false);
            };
            self.buf.drain(..used);
            if done {
                return Ok(true);
            }
            let n = peer.read(&mut chunk)?;
            if n == 0 {
                return Ok(false);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// HTTP/2 frame types and flags this server reads or writes (RFC 9113, section 6).
mod frame {
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const CONTINUATION: u8 = 0x9;
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const NO_ERROR: u32 = 0x0;
    pub const INTERNAL_ERROR: u32 = 0x2;
    /// Largest frame accepted from the client (its default SETTINGS_MAX_FRAME_SIZE).
    pub const MAX_LEN: usize = 16_384;
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Appends one frame to `out`.
fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

fn goaway(out: &mut Vec<u8>, last_stream: u32, code: u32) {
    let mut p = [0u8; 8];
    p[..4].copy_from_slice(&last_stream.to_be_bytes());
    p[4..].copy_from_slice(&code.to_be_bytes());
    put_frame(out, frame::GOAWAY, 0, 0, &p);
}

/// GOAWAY frames sent at once when a connection opens ([`Hostile::H2GoawayFlood`]).
const GOAWAY_BURST: usize = 32;

/// Serves prior-knowledge h2c with hand-written frames: enough of the protocol to open the
/// connection, then the chosen lie.
fn serve_h2(peer: &mut Peer, how: Hostile) -> io::Result<()> {
    let mut preface = [0u8; PREFACE.len()];
    read_exact(peer, &mut preface)?;
    if preface != PREFACE {
        return Ok(());
    }
    let mut out = Vec::new();
    let mut settings = Vec::new();
    let mut setting = |id: u16, value: u32| {
        settings.extend_from_slice(&id.to_be_bytes());
        settings.extend_from_slice(&value.to_be_bytes());
    };
    setting(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 100);
    if how == Hostile::H2ZeroWindow {
        setting(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0);
    }
    put_frame(&mut out, frame::SETTINGS, 0, 0, &settings);
    if how == Hostile::H2GoawayFlood {
        for _ in 0..GOAWAY_BURST {
            goaway(&mut out, 0, frame::NO_ERROR);
        }
    }
    peer.write_all(&out)?;
    let mut payload = vec![0u8; frame::MAX_LEN];
    loop {
        let mut head = [0u8; 9];
        if !read_exact(peer, &mut head)? {
            return Ok(());
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if len > frame::MAX_LEN {
            return Ok(()); // a frame larger than allowed: give up on this client
        }
        if !read_exact(peer, &mut payload[..len])? {
            return Ok(());
        }
        out.clear();
        match kind {
            frame::SETTINGS if flags & frame::ACK == 0 => {
                put_frame(&mut out, frame::SETTINGS, frame::ACK, 0, &[]);
            }
            frame::PING if flags & frame::ACK == 0 => {
                put_frame(&mut out, frame::PING, frame::ACK, 0, &payload[..len]);
            }
            frame::HEADERS | frame::CONTINUATION => match how {
                Hostile::H2RstFlood if kind == frame::HEADERS => {
                    put_frame(
                        &mut out,
                        frame::RST_STREAM,
                        0,
                        stream,
                        &frame::INTERNAL_ERROR.to_be_bytes(),
                    );
                }
                Hostile::H2GoawayFlood => goaway(&mut out, 0, frame::NO_ERROR),
                Hostile::H2ZeroWindow if flags & frame::END_STREAM != 0 => {
                    // A request without a body needs no window: answer it (:status 200 is
                    // entry 8 of HPACK's static table).
                    put_frame(
                        &mut out,
                        frame::HEADERS,
                        frame::END_HEADERS | frame::END_STREAM,
                        stream,
                        &[0x88],
                    );
                }
                _ => {}
            },
            _ => {} // DATA, WINDOW_UPDATE, RST_STREAM, GOAWAY, PRIORITY: ignored
        }
        if !out.is_empty() {
            peer.write_all(&out)?;
        }
    }
}

/// Fills `buf`; false when the peer closed first.
fn read_exact(peer: &mut Peer, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let n = peer.read(&mut buf[got..])?;
        if n == 0 {
            return Ok(false);
        }
        got += n;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for h in Hostile::ALL {
            assert_eq!(h.name().parse::<Hostile>(), Ok(h));
        }
        let err = "nope".parse::<Hostile>().unwrap_err().to_string();
        assert!(
            err.contains("slowloris") && err.contains("tls-stall"),
            "{err}"
        );
    }

    fn start(how: Hostile) -> HostileServer {
        HostileServer::start(
            "127.0.0.1:0".parse().unwrap(),
            how,
            Duration::from_millis(1),
        )
        .unwrap()
    }

    /// Sends one GET and returns what came back before the server closed (or until `enough`).
    fn exchange(
        server: &HostileServer,
        enough: impl Fn(&[u8]) -> bool,
    ) -> (Vec<u8>, io::Result<()>) {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return (got, Ok(())),
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if enough(&got) {
                        return (got, Ok(()));
                    }
                }
                Err(e) => return (got, Err(e)),
            }
        }
    }

    #[test]
    fn http1_behaviours_send_what_they_say() {
        let (got, _) = exchange(&start(Hostile::Slowloris), |g| g.len() >= OK.len());
        assert_eq!(got, OK);
        let (got, _) = exchange(&start(Hostile::EndlessHeader), |g| g.len() >= 100_000);
        assert!(!got.windows(4).any(|w| w == b"\r\n\r\n"));
        let (got, _) = exchange(&start(Hostile::Informational), |g| g.ends_with(OK));
        assert!(got.starts_with(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103"));
        let (got, end) = exchange(&start(Hostile::EarlyClose), |_| false);
        assert!(got.is_empty() && end.is_ok());
        let (got, end) = exchange(&start(Hostile::ShortBody), |_| false);
        assert!(got.ends_with(b"\r\n\r\n0123456789") && end.is_ok());
        let (_, end) = exchange(&start(Hostile::Rst), |_| false);
        assert_eq!(
            end.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionReset)
        );
    }

    #[test]
    fn h2_goaway_flood_answers_the_preface_with_settings_then_goaways() {
        let server = start(Hostile::H2GoawayFlood);
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.write_all(PREFACE).unwrap();
        let mut head = [0u8; 9];
        s.read_exact(&mut head).unwrap();
        assert_eq!(head[3], frame::SETTINGS);
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut rest = vec![0u8; len + 17];
        s.read_exact(&mut rest).unwrap();
        assert_eq!(rest[len + 3], frame::GOAWAY);
    }
}
