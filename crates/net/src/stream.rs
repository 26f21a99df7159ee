//! One client connection's byte stream over a non-blocking socket: plain TCP, or TLS through a
//! rustls client session fed from the same socket.
//!
//! Reads and writes never block: they return `WouldBlock` and the loop waits on epoll. Every read
//! from the socket goes through `recvmsg` so the kernel's receive timestamp of the latest bytes
//! is kept (see [`Stream::stamp`]). The same type also implements tokio's `AsyncRead` and
//! `AsyncWrite`, so the h2 crate can drive it from our own loop with a no-op waker: `WouldBlock`
//! becomes `Pending`, and the loop polls again when epoll reports the socket ready.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use rustls::ClientConnection;

use crate::socket;

/// A plain or TLS byte stream.
pub struct Stream {
    fd: OwnedFd,
    tls: Option<Box<ClientConnection>>,
    io: Rc<IoState>,
}

/// What the loop needs to know about a stream that it may not own (h2 owns its transport):
/// shared through an `Rc` handed out by [`Stream::state`].
#[derive(Debug, Default)]
pub struct IoState {
    /// Kernel receive time (CLOCK_REALTIME ns) of the latest bytes read, if the kernel stamps.
    pub stamp: Cell<Option<u64>>,
    /// The last write or flush stopped on a full socket: watch for writability.
    pub write_blocked: Cell<bool>,
    /// The socket may have bytes to read: set by the loop when epoll says so, cleared when a
    /// read finds nothing. Polls in between (h2 polls often) then cost no syscall.
    pub read_ready: Cell<bool>,
    /// Bytes received from and sent to the socket (TCP payload: TLS records included).
    pub bytes_in: Cell<u64>,
    pub bytes_out: Cell<u64>,
}

/// How far a TLS handshake got.
#[derive(Debug, PartialEq, Eq)]
pub enum Handshake {
    Done,
    /// Waiting for the peer; `true` if bytes are queued for the socket.
    Pending {
        want_write: bool,
    },
}

impl Stream {
    pub fn plain(fd: OwnedFd) -> Self {
        Stream {
            fd,
            tls: None,
            io: Rc::default(),
        }
    }

    /// Starts TLS on a connected plain stream.
    pub fn into_tls(self, session: ClientConnection) -> Self {
        Stream {
            tls: Some(Box::new(session)),
            ..self
        }
    }

    pub fn session(&self) -> Option<&ClientConnection> {
        self.tls.as_deref()
    }

    /// The stamp and write state, shared so that they stay visible once h2 owns the stream.
    pub fn state(&self) -> Rc<IoState> {
        self.io.clone()
    }

    /// Kernel receive timestamp of the most recent read, CLOCK_REALTIME nanoseconds.
    pub fn stamp(&self) -> Option<u64> {
        self.io.stamp.get()
    }

    /// The socket may have something to read (epoll said so, or a close is expected): the next
    /// [`Stream::read_some`] asks the kernel instead of answering `WouldBlock` at once.
    pub fn mark_readable(&self) {
        self.io.read_ready.set(true);
    }

    /// Whether output is waiting for the socket to drain.
    pub fn write_blocked(&self) -> bool {
        self.io.write_blocked.get()
    }

    /// Advances the TLS handshake as far as the socket allows (plain streams are done at once).
    /// Errors carry the rustls error inside an `InvalidData` I/O error.
    pub fn handshake(&mut self) -> io::Result<Handshake> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return Ok(Handshake::Done);
        };
        let fd = self.fd.as_raw_fd();
        loop {
            flush_tls(fd, tls, &self.io)?;
            if !tls.is_handshaking() {
                return Ok(Handshake::Done);
            }
            if !tls.wants_read() {
                return Ok(Handshake::Pending {
                    want_write: self.io.write_blocked.get(),
                });
            }
            let mut reader = SocketReader { fd, io: &self.io };
            match tls.read_tls(&mut reader) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => process(fd, tls, &self.io)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(Handshake::Pending {
                        want_write: self.io.write_blocked.get(),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes as much of `data` as possible. TLS takes all of it into its buffer and sends what
    /// the socket accepts; the rest goes out with [`Stream::flush_pending`].
    pub fn write_some(&mut self, data: &[u8]) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        match self.tls.as_deref_mut() {
            None => match socket::send(fd, data) {
                Ok(n) => {
                    self.io.bytes_out.set(self.io.bytes_out.get() + n as u64);
                    self.io.write_blocked.set(n < data.len());
                    Ok(n)
                }
                Err(e) => {
                    self.io
                        .write_blocked
                        .set(e.kind() == io::ErrorKind::WouldBlock);
                    Err(e)
                }
            },
            Some(tls) => {
                let n = tls.writer().write(data)?;
                flush_tls(fd, tls, &self.io)?;
                Ok(n)
            }
        }
    }

    /// Sends TLS records still queued.
    pub fn flush_pending(&mut self) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        match self.tls.as_deref_mut() {
            None => Ok(()),
            Some(tls) => flush_tls(fd, tls, &self.io),
        }
    }

    /// Whether TLS holds bytes not yet on the socket.
    pub fn has_pending_output(&self) -> bool {
        self.tls.as_deref().is_some_and(|t| t.wants_write())
    }

    /// Reads plaintext. `Ok(0)` is the end of the stream; `WouldBlock` means nothing yet.
    pub fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        let Some(tls) = self.tls.as_deref_mut() else {
            if !self.io.read_ready.get() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let (n, stamp) = recv_into(fd, &self.io, buf)?;
            self.io.stamp.set(stamp);
            return Ok(n);
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: still the end of the stream.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if !self.io.read_ready.get() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut reader = SocketReader { fd, io: &self.io };
            let n = tls.read_tls(&mut reader)?;
            process(fd, tls, &self.io)?;
            if tls.wants_write() {
                flush_tls(fd, tls, &self.io)?;
            }
            if n == 0 {
                return match tls.reader().read(buf) {
                    Ok(n) => Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                    Err(e) => Err(e),
                };
            }
        }
    }
}

/// Processes received TLS records; on failure sends the alert rustls prepared (best effort).
fn process(fd: RawFd, tls: &mut ClientConnection, io: &IoState) -> io::Result<()> {
    if let Err(e) = tls.process_new_packets() {
        let _ = flush_tls(fd, tls, io);
        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
    }
    Ok(())
}

fn flush_tls(fd: RawFd, tls: &mut ClientConnection, io: &IoState) -> io::Result<()> {
    io.write_blocked.set(false);
    while tls.wants_write() {
        match tls.write_tls(&mut SocketWriter(fd, io)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                io.write_blocked.set(true);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The rustls error inside an I/O error from [`Stream`], if it is one.
pub fn tls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// One `recvmsg`; a short read or `WouldBlock` clears `read_ready` until epoll reports the
/// socket again.
fn recv_into(fd: RawFd, io: &IoState, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let r = socket::recv_timestamped(fd, buf);
    match &r {
        Ok((n, _)) => {
            io.bytes_in.set(io.bytes_in.get() + *n as u64);
            // A short read emptied the socket: the next read would only say EAGAIN. Epoll is
            // level-triggered, so whatever arrives later is reported again.
            if *n < buf.len() {
                io.read_ready.set(false);
            }
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => io.read_ready.set(false),
        Err(_) => {}
    }
    r
}

struct SocketReader<'a> {
    fd: RawFd,
    io: &'a IoState,
}

impl Read for SocketReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, stamp) = recv_into(self.fd, self.io, buf)?;
        self.io.stamp.set(stamp);
        Ok(n)
    }
}

struct SocketWriter<'a>(RawFd, &'a IoState);

impl SocketWriter<'_> {
    fn count(&self, r: io::Result<usize>) -> io::Result<usize> {
        if let Ok(n) = r {
            self.1.bytes_out.set(self.1.bytes_out.get() + n as u64);
        }
        r
    }
}

impl Write for SocketWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.count(socket::send(self.0, buf))
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.count(match bufs {
            [] => Ok(0),
            [a] => socket::send(self.0, a),
            [a, b, ..] => socket::send2(self.0, a, b),
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn pending_on_block<T>(r: io::Result<T>) -> Poll<io::Result<T>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        r => Poll::Ready(r),
    }
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match pending_on_block(this.read_some(buf.initialize_unfilled())) {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // TLS buffers without limit: keep its backlog bounded by refusing more while blocked.
        if this.tls.is_some() && this.write_blocked() && this.has_pending_output() {
            if let Err(e) = this.flush_pending() {
                return Poll::Ready(Err(e));
            }
            if this.write_blocked() {
                return Poll::Pending;
            }
        }
        pending_on_block(this.write_some(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.flush_pending() {
            Ok(()) if this.write_blocked() => Poll::Pending,
            r => Poll::Ready(r),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}
