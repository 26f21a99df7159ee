//! QUIC for the h3 crate, driven by the request loop: quinn-proto's connection (sans I/O: the
//! loop owns the UDP socket and the clock) behind h3's `quic` traits.
//!
//! h3 does HTTP/3 (frames, QPACK, settings, GOAWAY); quinn-proto does QUIC (handshake,
//! streams, loss recovery, flow control). Between them nothing runs in the background: like
//! HTTP/2 ([`crate::h2conn`]), every future is polled with a no-op waker after each event on
//! its connection, so a trait method here answers from the connection's state at once, or
//! `Pending` when it has to wait for the peer (the loop polls again after the next datagram).
//! The connection is shared (`Rc<RefCell>`) by the loop and the streams of its one thread;
//! every borrow is short and none is held across a poll.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes};
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use quinn_proto::{Dir, FinishError, ReadError, ReadableError, VarInt, WriteError};

/// The QUIC connection as the loop and the streams share it.
pub struct Shared {
    pub conn: quinn_proto::Connection,
    /// Why the connection ended, once it has.
    pub lost: Option<ConnectionErrorIncoming>,
}

pub type SharedConn = Rc<RefCell<Shared>>;

/// The connection as h3 sees it; also its stream opener.
#[derive(Clone)]
pub struct QuicConn(pub SharedConn);

/// H3_REQUEST_CANCELLED: a stream dropped before its end (a request past its timeout) is reset
/// and stopped with it, so that the server frees it at once.
const CANCELLED: u32 = 0x10c;

/// The sending half of a stream; keeps what QUIC's flow control has not taken yet.
pub struct SendHalf {
    shared: SharedConn,
    id: quinn_proto::StreamId,
    pending: Option<WriteBuf<Bytes>>,
    /// Finished or reset: nothing to cancel when dropped.
    done: bool,
}

/// The receiving half of a stream.
pub struct RecvHalf {
    shared: SharedConn,
    id: quinn_proto::StreamId,
    /// Read to its end, or failed: nothing to stop when dropped.
    done: bool,
}

impl Drop for SendHalf {
    fn drop(&mut self) {
        if !self.done {
            let mut shared = self.shared.borrow_mut();
            if shared.lost.is_none() {
                let _ = shared
                    .conn
                    .send_stream(self.id)
                    .reset(VarInt::from_u32(CANCELLED));
            }
        }
    }
}

impl Drop for RecvHalf {
    fn drop(&mut self) {
        if !self.done {
            let mut shared = self.shared.borrow_mut();
            if shared.lost.is_none() {
                let _ = shared
                    .conn
                    .recv_stream(self.id)
                    .stop(VarInt::from_u32(CANCELLED));
            }
        }
    }
}

/// A request stream, both halves.
pub struct Bidi {
    send: SendHalf,
    recv: RecvHalf,
}

/// The same stream id in h3's type (both are QUIC's 62-bit stream numbers).
fn h3_id(id: quinn_proto::StreamId) -> StreamId {
    StreamId::try_from(VarInt::from(id).into_inner()).expect("a QUIC stream id is a varint")
}

fn code(value: u64) -> VarInt {
    VarInt::from_u64(value).unwrap_or(VarInt::MAX)
}

fn conn_error(lost: &ConnectionErrorIncoming) -> StreamErrorIncoming {
    StreamErrorIncoming::ConnectionErrorIncoming {
        connection_error: lost.clone(),
    }
}

/// Why quinn-proto ended a connection, in h3's terms.
pub fn lost_reason(reason: &quinn_proto::ConnectionError) -> ConnectionErrorIncoming {
    match reason {
        quinn_proto::ConnectionError::ApplicationClosed(close) => {
            ConnectionErrorIncoming::ApplicationClose {
                error_code: close.error_code.into_inner(),
            }
        }
        quinn_proto::ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        other => ConnectionErrorIncoming::Undefined(Arc::new(other.clone())),
    }
}

impl QuicConn {
    fn accept(&mut self, dir: Dir) -> Poll<Result<quinn_proto::StreamId, ConnectionErrorIncoming>> {
        let mut shared = self.0.borrow_mut();
        if let Some(lost) = &shared.lost {
            return Poll::Ready(Err(lost.clone()));
        }
        match shared.conn.streams().accept(dir) {
            Some(id) => Poll::Ready(Ok(id)),
            None => Poll::Pending,
        }
    }

    fn open(&mut self, dir: Dir) -> Poll<Result<quinn_proto::StreamId, StreamErrorIncoming>> {
        let mut shared = self.0.borrow_mut();
        if let Some(lost) = &shared.lost {
            return Poll::Ready(Err(conn_error(lost)));
        }
        match shared.conn.streams().open(dir) {
            Some(id) => Poll::Ready(Ok(id)),
            // The peer's stream limit: wait for it to grant more.
            None => Poll::Pending,
        }
    }
}

impl quic::Connection<Bytes> for QuicConn {
    type RecvStream = RecvHalf;
    type OpenStreams = QuicConn;

    fn poll_accept_recv(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<RecvHalf, ConnectionErrorIncoming>> {
        self.accept(Dir::Uni).map_ok(|id| RecvHalf {
            shared: Rc::clone(&self.0),
            id,
            done: false,
        })
    }

    fn poll_accept_bidi(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<Bidi, ConnectionErrorIncoming>> {
        self.accept(Dir::Bi)
            .map_ok(|id| Bidi::new(Rc::clone(&self.0), id))
    }

    fn opener(&self) -> QuicConn {
        self.clone()
    }
}

impl quic::OpenStreams<Bytes> for QuicConn {
    type BidiStream = Bidi;
    type SendStream = SendHalf;

    fn poll_open_bidi(&mut self, _cx: &mut Context<'_>) -> Poll<Result<Bidi, StreamErrorIncoming>> {
        self.open(Dir::Bi)
            .map_ok(|id| Bidi::new(Rc::clone(&self.0), id))
    }

    fn poll_open_send(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<SendHalf, StreamErrorIncoming>> {
        self.open(Dir::Uni)
            .map_ok(|id| SendHalf::new(Rc::clone(&self.0), id))
    }

    fn close(&mut self, error: h3::error::Code, reason: &[u8]) {
        let mut shared = self.0.borrow_mut();
        shared.conn.close(
            Instant::now(),
            code(u64::from(error)),
            Bytes::copy_from_slice(reason),
        );
    }
}

impl Bidi {
    fn new(shared: SharedConn, id: quinn_proto::StreamId) -> Bidi {
        Bidi {
            send: SendHalf::new(Rc::clone(&shared), id),
            recv: RecvHalf {
                shared,
                id,
                done: false,
            },
        }
    }
}

impl SendHalf {
    fn new(shared: SharedConn, id: quinn_proto::StreamId) -> SendHalf {
        SendHalf {
            shared,
            id,
            pending: None,
            done: false,
        }
    }

    /// Writes what is pending as far as flow control allows.
    fn write_pending(&mut self) -> Poll<Result<(), StreamErrorIncoming>> {
        let Some(buf) = self.pending.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let mut shared = self.shared.borrow_mut();
        if let Some(lost) = &shared.lost {
            return Poll::Ready(Err(conn_error(lost)));
        }
        while buf.has_remaining() {
            match shared.conn.send_stream(self.id).write(buf.chunk()) {
                Ok(n) => buf.advance(n),
                Err(WriteError::Blocked) => return Poll::Pending,
                Err(WriteError::Stopped(code)) => {
                    return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                        error_code: code.into_inner(),
                    }))
                }
                Err(WriteError::ClosedStream) => {
                    return Poll::Ready(Err(StreamErrorIncoming::Unknown(Box::new(
                        WriteError::ClosedStream,
                    ))))
                }
            }
        }
        self.pending = None;
        Poll::Ready(Ok(()))
    }
}

impl quic::SendStream<Bytes> for SendHalf {
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.write_pending()
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.pending.is_some() {
            return Err(StreamErrorIncoming::Unknown(
                "send_data before the previous data was written".into(),
            ));
        }
        self.pending = Some(data.into());
        match self.write_pending() {
            Poll::Ready(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    fn poll_finish(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if self.write_pending()?.is_pending() {
            return Poll::Pending;
        }
        let mut shared = self.shared.borrow_mut();
        self.done = true;
        match shared.conn.send_stream(self.id).finish() {
            Ok(()) | Err(FinishError::ClosedStream) => Poll::Ready(Ok(())),
            Err(FinishError::Stopped(code)) => {
                Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                    error_code: code.into_inner(),
                }))
            }
        }
    }

    fn reset(&mut self, reset_code: u64) {
        self.pending = None;
        self.done = true;
        let mut shared = self.shared.borrow_mut();
        let _ = shared.conn.send_stream(self.id).reset(code(reset_code));
    }

    fn send_id(&self) -> StreamId {
        h3_id(self.id)
    }
}

impl quic::RecvStream for RecvHalf {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let mut shared = self.shared.borrow_mut();
        if let Some(lost) = &shared.lost {
            return Poll::Ready(Err(conn_error(lost)));
        }
        let mut stream = shared.conn.recv_stream(self.id);
        let mut chunks = match stream.read(true) {
            Ok(chunks) => chunks,
            // Read to its end (or stopped) already.
            Err(ReadableError::ClosedStream) => {
                self.done = true;
                return Poll::Ready(Ok(None));
            }
            Err(e) => return Poll::Ready(Err(StreamErrorIncoming::Unknown(Box::new(e)))),
        };
        let next = chunks.next(usize::MAX);
        // Whether to send flow-control credit now: the loop transmits after every poll anyway.
        let _ = chunks.finalize();
        self.done = !matches!(next, Ok(Some(_)) | Err(ReadError::Blocked));
        match next {
            Ok(Some(chunk)) => Poll::Ready(Ok(Some(chunk.bytes))),
            Ok(None) => Poll::Ready(Ok(None)),
            Err(ReadError::Blocked) => Poll::Pending,
            Err(ReadError::Reset(code)) => {
                Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                    error_code: code.into_inner(),
                }))
            }
        }
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.done = true;
        let mut shared = self.shared.borrow_mut();
        let _ = shared.conn.recv_stream(self.id).stop(code(error_code));
    }

    fn recv_id(&self) -> StreamId {
        h3_id(self.id)
    }
}

impl quic::SendStream<Bytes> for Bidi {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code)
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}

impl quic::RecvStream for Bidi {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl quic::BidiStream<Bytes> for Bidi {
    type SendStream = SendHalf;
    type RecvStream = RecvHalf;

    fn split(self) -> (SendHalf, RecvHalf) {
        (self.send, self.recv)
    }
}
