//! The backend's event loop: one thread per `SO_REUSEPORT` listener, one epoll each, requests
//! parsed in place from one shared read buffer and answered with one `send` (a pre-rendered
//! response when nothing special was asked). Delays use a timer heap per thread, not a sleep,
//! so a delayed request never holds up any other connection; with `DelayMode::Spin` the thread
//! stops blocking shortly before a response is due and polls until it is, so that the delay is
//! exact rather than the timer's lateness added to it. With `record_arrivals` each thread also
//! keeps the kernel's receive time of every request's first segment ([`crate::arrivals`]),
//! handed back by [`Backend::stop_with_arrivals`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use meshbench_net::clock::Clock;
use meshbench_net::http1::{head_info, BodyReader, MAX_HEAD_BYTES};
use meshbench_net::poller::{Interest, Poller};
use meshbench_net::rng::SplitMix64;
use meshbench_net::socket;

use crate::arrivals::{ArrivalLog, MAX_ARRIVALS};
use crate::options::{BackendConfig, DelayMode, RequestOptions, SPIN_WINDOW};

const LISTENER: u64 = u64::MAX;
const PATTERN_LEN: usize = 64 * 1024;
/// Largest request body kept for an echo.
const MAX_ECHO: usize = 1 << 20;

/// A running backend; stops when dropped.
pub struct Backend {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Each thread hands back its arrivals (`None` unless `record_arrivals`).
    threads: Vec<JoinHandle<Option<ArrivalLog>>>,
}

impl Backend {
    /// Binds `addr` (port 0 picks a free one) and starts serving on `cfg.threads` threads.
    pub fn start(addr: SocketAddr, cfg: BackendConfig) -> io::Result<Backend> {
        socket::raise_nofile_limit();
        let first = socket::listen(&addr, 4096)?;
        let bound = socket::local_addr(&first)?;
        let mut listeners = vec![first];
        for _ in 1..cfg.threads.max(1) {
            listeners.push(socket::listen(&bound, 4096)?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let mut server = Server::new(listener, cfg.clone(), cfg.seed.wrapping_add(i as u64))?;
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("backend-{i}"))
                    .spawn(move || {
                        server.serve(&stop);
                        server.arrivals.take()
                    })?,
            );
        }
        Ok(Backend {
            addr: bound,
            stop,
            threads,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes every connection.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Stops as [`Backend::stop`] does and returns every thread's arrivals together (empty
    /// unless the backend was started with `record_arrivals`).
    pub fn stop_with_arrivals(mut self) -> ArrivalLog {
        self.shutdown()
    }

    fn shutdown(&mut self) -> ArrivalLog {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = ArrivalLog::default();
        for t in self.threads.drain(..) {
            if let Ok(Some(log)) = t.join() {
                all.merge(log);
            }
        }
        all
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A request whose head has been read.
#[derive(Default)]
struct Pending {
    opts: RequestOptions,
    keep_alive: bool,
    head_request: bool,
    /// The request as received, for an echo.
    echo: Vec<u8>,
}

struct Conn {
    fd: OwnedFd,
    /// Unprocessed input: a split head, or requests pipelined behind a busy response.
    inbuf: Vec<u8>,
    /// The request whose body is being read, and its body.
    reading_body: Option<(BodyReader, Pending)>,
    /// A response waiting out its delay.
    delayed: Option<(u16, Pending)>,
    out: Vec<u8>,
    out_pos: usize,
    /// Body bytes still to send from the pattern.
    body_left: u64,
    close_after: bool,
    interest: Interest,
}

impl Conn {
    fn busy(&self) -> bool {
        self.delayed.is_some() || self.out_pos < self.out.len() || self.body_left > 0
    }
}

struct Server {
    poller: Poller,
    listener: OwnedFd,
    conns: Vec<Option<Conn>>,
    generation: Vec<u32>,
    /// Indices of `conns` that are free, taken again before the table grows.
    free_conns: Vec<usize>,
    timers: BinaryHeap<Reverse<(u64, usize, u32)>>,
    cfg: BackendConfig,
    rng: SplitMix64,
    clock: Clock,
    /// The complete default response (200, `cfg.size` bytes), sent with one syscall.
    canned: Vec<u8>,
    pattern: Vec<u8>,
    buf: Box<[u8]>,
    /// The receive time of each request's first segment, when asked for (`--arrivals`).
    arrivals: Option<ArrivalLog>,
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn response_head(out: &mut Vec<u8>, status: u16, length: u64, keep_alive: bool) {
    use std::io::Write;
    let _ = write!(
        out,
        "HTTP/1.1 {status} {}\r\nServer: meshbench\r\nContent-Type: text/plain\r\nContent-Length: {length}\r\n{}\r\n",
        reason(status),
        if keep_alive { "" } else { "Connection: close\r\n" }
    );
}

impl Server {
    fn new(listener: OwnedFd, cfg: BackendConfig, seed: u64) -> io::Result<Self> {
        let poller = Poller::new(1024)?;
        poller.add(listener.as_raw_fd(), LISTENER, Interest::READ)?;
        let pattern: Vec<u8> = (0..PATTERN_LEN).map(|i| b'a' + (i % 26) as u8).collect();
        let mut canned = Vec::new();
        response_head(&mut canned, 200, cfg.size as u64, true);
        let mut left = cfg.size;
        while left > 0 {
            let n = left.min(PATTERN_LEN);
            canned.extend_from_slice(&pattern[..n]);
            left -= n;
        }
        Ok(Server {
            poller,
            listener,
            conns: Vec::new(),
            generation: Vec::new(),
            free_conns: Vec::new(),
            timers: BinaryHeap::new(),
            rng: SplitMix64(seed),
            clock: Clock::start(),
            canned,
            pattern,
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
            arrivals: cfg
                .record_arrivals
                .then(|| ArrivalLog::new(MAX_ARRIVALS / cfg.threads.max(1))),
            cfg,
        })
    }

    fn serve(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let now = self.clock.now();
            let mut wait = Duration::from_millis(100);
            if let Some(Reverse((due, _, _))) = self.timers.peek() {
                let left = Duration::from_nanos(due.saturating_sub(now));
                wait = wait.min(match self.cfg.delay_mode {
                    DelayMode::Sleep => left,
                    // Within the window: poll without blocking until the response is due.
                    DelayMode::Spin => left.saturating_sub(SPIN_WINDOW),
                });
            }
            let n = match self.poller.wait(Some(wait)) {
                Ok(n) => n,
                Err(_) => return,
            };
            for e in 0..n {
                let ev = self.poller.event(e);
                if ev.token == LISTENER {
                    self.accept();
                    continue;
                }
                let conn = ev.token as usize;
                if ev.writable {
                    self.flush(conn);
                }
                if ev.readable || ev.closed {
                    self.on_readable(conn);
                }
            }
            self.fire_timers();
        }
    }

    fn accept(&mut self) {
        for _ in 0..64 {
            let fd = match socket::accept(self.listener.as_raw_fd()) {
                Ok(fd) => fd,
                Err(_) => return,
            };
            if self.arrivals.is_some() {
                // Without the kernel's stamp an arrival is timed at the read instead.
                let _ = socket::enable_rx_timestamps(fd.as_raw_fd());
            }
            let conn = self.free_conns.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.generation.push(0);
                self.conns.len() - 1
            });
            if self
                .poller
                .add(fd.as_raw_fd(), conn as u64, Interest::READ)
                .is_err()
            {
                self.free_conns.push(conn);
                continue;
            }
            self.conns[conn] = Some(Conn {
                fd,
                inbuf: Vec::new(),
                reading_body: None,
                delayed: None,
                out: Vec::new(),
                out_pos: 0,
                body_left: 0,
                close_after: false,
                interest: Interest::READ,
            });
        }
    }

    fn close(&mut self, conn: usize) {
        if self.conns[conn].take().is_some() {
            self.generation[conn] = self.generation[conn].wrapping_add(1);
            self.free_conns.push(conn);
        }
    }

    fn set_interest(&mut self, conn: usize, interest: Interest) {
        if let Some(c) = self.conns[conn].as_mut() {
            if c.interest != interest {
                c.interest = interest;
                let _ = self.poller.modify(c.fd.as_raw_fd(), conn as u64, interest);
            }
        }
    }

    fn on_readable(&mut self, conn: usize) {
        let Some(c) = self.conns[conn].as_mut() else {
            return;
        };
        if c.busy() {
            return;
        }
        let mut buf = std::mem::take(&mut self.buf);
        let r = match self.arrivals.as_mut() {
            None => socket::recv(c.fd.as_raw_fd(), &mut buf),
            Some(log) => {
                let r = socket::recv_timestamped(c.fd.as_raw_fd(), &mut buf);
                // Only a segment that begins a request is an arrival, not the rest of a head
                // or a body.
                if let Ok((n, stamp)) = r {
                    if n > 0 && c.inbuf.is_empty() && c.reading_body.is_none() {
                        match stamp {
                            Some(ns) => log.record(ns),
                            None => log.record_now(),
                        }
                    }
                }
                r.map(|(n, _)| n)
            }
        };
        match r {
            Ok(0) => self.close(conn),
            Ok(n) => {
                if c.inbuf.is_empty() {
                    let used = self.process(conn, &buf[..n]);
                    if let Some(c) = self.conns[conn].as_mut() {
                        c.inbuf.extend_from_slice(&buf[used..n]);
                    }
                } else {
                    c.inbuf.extend_from_slice(&buf[..n]);
                    self.resume(conn);
                }
                self.check_head_limit(conn);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => self.close(conn),
        }
        self.buf = buf;
    }

    /// Processes input kept in the connection's buffer.
    fn resume(&mut self, conn: usize) {
        let Some(c) = self.conns[conn].as_mut() else {
            return;
        };
        let input = std::mem::take(&mut c.inbuf);
        let used = self.process(conn, &input);
        if let Some(c) = self.conns[conn].as_mut() {
            let mut rest = input;
            rest.drain(..used);
            rest.extend_from_slice(&c.inbuf);
            c.inbuf = rest;
        }
    }

    fn check_head_limit(&mut self, conn: usize) {
        let too_big = self.conns[conn].as_ref().is_some_and(|c| {
            c.reading_body.is_none() && !c.busy() && c.inbuf.len() > MAX_HEAD_BYTES
        });
        if too_big {
            self.reply_error(conn, 431);
        }
    }

    fn reply_error(&mut self, conn: usize, status: u16) {
        if let Some(c) = self.conns[conn].as_mut() {
            c.inbuf.clear();
            c.reading_body = None;
        }
        self.write_response(conn, status, Pending::default());
    }

    /// Handles as many requests from `data` as can be answered now; returns the bytes used.
    fn process(&mut self, conn: usize, data: &[u8]) -> usize {
        let mut pos = 0;
        loop {
            let Some(c) = self.conns[conn].as_mut() else {
                return data.len();
            };
            if c.busy() || c.close_after {
                return pos;
            }
            if let Some((body, pending)) = c.reading_body.as_mut() {
                let Ok((used, done)) = body.feed(&data[pos..]) else {
                    self.reply_error(conn, 400);
                    return data.len();
                };
                if pending.opts.echo && pending.echo.len() < MAX_ECHO {
                    let keep = used.min(MAX_ECHO - pending.echo.len());
                    pending.echo.extend_from_slice(&data[pos..pos + keep]);
                }
                pos += used;
                if !done {
                    return pos;
                }
                let (_, pending) = c.reading_body.take().expect("checked above");
                self.respond(conn, pending);
                continue;
            }
            if pos == data.len() {
                return pos;
            }
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            let len = match req.parse(&data[pos..]) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) => return pos,
                Err(_) => {
                    self.reply_error(conn, 400);
                    return data.len();
                }
            };
            let mut pending = Pending {
                head_request: req.method == Some("HEAD"),
                ..Pending::default()
            };
            pending.opts.from_target(req.path.unwrap_or("/").as_bytes());
            for h in req.headers.iter() {
                if h.name.len() > 12 && h.name[..12].eq_ignore_ascii_case("x-meshbench-") {
                    pending.opts.set(&h.name.as_bytes()[12..], h.value);
                }
            }
            let info = match head_info(req.version.unwrap_or(1), req.headers, false, true) {
                Ok(info) => info,
                Err(_) => {
                    self.reply_error(conn, 400);
                    return data.len();
                }
            };
            pending.keep_alive = info.keep_alive;
            if pending.opts.echo {
                pending.echo.extend_from_slice(&data[pos..pos + len]);
            }
            pos += len;
            let body = BodyReader::new(info.framing);
            if body == BodyReader::Done {
                self.respond(conn, pending);
            } else if let Some(c) = self.conns[conn].as_mut() {
                c.reading_body = Some((body, pending));
            }
        }
    }

    fn respond(&mut self, conn: usize, pending: Pending) {
        crate::options::burn(self.cfg.work);
        let status = pending
            .opts
            .status
            .unwrap_or_else(|| self.cfg.status.pick(&mut self.rng));
        let delay = pending
            .opts
            .delay
            .unwrap_or(self.cfg.delay)
            .sample_ns(&mut self.rng);
        if delay == 0 {
            self.write_response(conn, status, pending);
            return;
        }
        let due = self.clock.now() + delay;
        self.timers
            .push(Reverse((due, conn, self.generation[conn])));
        if let Some(c) = self.conns[conn].as_mut() {
            c.delayed = Some((status, pending));
        }
        self.set_interest(conn, Interest::NONE);
    }

    fn fire_timers(&mut self) {
        let now = self.clock.now();
        while let Some(&Reverse((due, conn, generation))) = self.timers.peek() {
            if due > now {
                break;
            }
            self.timers.pop();
            if self.generation[conn] != generation {
                continue;
            }
            if let Some((status, pending)) =
                self.conns[conn].as_mut().and_then(|c| c.delayed.take())
            {
                self.write_response(conn, status, pending);
            }
        }
    }

    fn write_response(&mut self, conn: usize, status: u16, p: Pending) {
        let size = p.opts.size.unwrap_or(self.cfg.size as u64);
        let Some(c) = self.conns[conn].as_mut() else {
            return;
        };
        c.close_after = !p.keep_alive;
        let plain = status == 200 && !p.opts.echo && !p.head_request && p.keep_alive;
        if plain && size == self.cfg.size as u64 && c.out.is_empty() {
            // The common case: one send of the pre-rendered response.
            match socket::send(c.fd.as_raw_fd(), &self.canned) {
                Ok(n) if n == self.canned.len() => {}
                Ok(n) => c.out.extend_from_slice(&self.canned[n..]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.out.extend_from_slice(&self.canned)
                }
                Err(_) => return self.close(conn),
            }
        } else {
            let length = if p.opts.echo {
                p.echo.len() as u64
            } else {
                size
            };
            response_head(&mut c.out, status, length, p.keep_alive);
            if !p.head_request {
                if p.opts.echo {
                    c.out.extend_from_slice(&p.echo);
                } else {
                    c.body_left = size;
                }
            }
        }
        self.flush(conn);
    }

    /// Writes pending output; when done, goes back to reading (or closes).
    fn flush(&mut self, conn: usize) {
        let Some(c) = self.conns[conn].as_mut() else {
            return;
        };
        let fd = c.fd.as_raw_fd();
        loop {
            let head = &c.out[c.out_pos..];
            let body = &self.pattern[..(c.body_left.min(PATTERN_LEN as u64) as usize)];
            if head.is_empty() && body.is_empty() {
                break;
            }
            let r = if body.is_empty() {
                socket::send(fd, head)
            } else {
                socket::send2(fd, head, body)
            };
            match r {
                Ok(n) => {
                    let from_head = n.min(head.len());
                    c.out_pos += from_head;
                    c.body_left -= (n - from_head) as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.set_interest(conn, Interest::WRITE);
                    return;
                }
                Err(_) => return self.close(conn),
            }
        }
        c.out.clear();
        c.out_pos = 0;
        if c.close_after {
            return self.close(conn);
        }
        self.set_interest(conn, Interest::READ);
        if self.conns[conn]
            .as_ref()
            .is_some_and(|c| !c.inbuf.is_empty())
        {
            self.resume(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Delay;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    /// The latencies of `n` requests in a row on one connection.
    fn latencies(cfg: BackendConfig, n: usize) -> Vec<Duration> {
        let backend = Backend::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
        let mut s = TcpStream::connect(backend.addr()).unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 4096];
        (0..n)
            .map(|_| {
                let t = Instant::now();
                s.write_all(b"GET /?size=1 HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                let mut got = 0;
                while !buf[..got].ends_with(b"\r\n\r\na") {
                    got += s.read(&mut buf[got..]).unwrap();
                }
                t.elapsed()
            })
            .collect()
    }

    #[test]
    fn a_spun_delay_is_never_early_and_answers_every_request() {
        let cfg = BackendConfig {
            delay: Delay::Fixed(Duration::from_millis(2)),
            delay_mode: DelayMode::Spin,
            ..BackendConfig::default()
        };
        let mut l = latencies(cfg, 50);
        l.sort();
        assert!(l[0] >= Duration::from_millis(2), "{:?}", l[0]);
        // Lateness is the machine's to decide; the median is still about the delay asked for.
        assert!(l[25] < Duration::from_millis(12), "{:?}", l[25]);
    }
}
