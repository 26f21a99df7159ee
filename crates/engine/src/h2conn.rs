//! HTTP/2 through the same request loop: the h2 crate does framing, HPACK, flow control and
//! stream states; the loop polls it with a no-op waker whenever epoll reports the connection's
//! socket ready. Nothing runs in the background, so every future here is polled again after
//! each event on its connection: the connection first (it reads and writes frames), then the
//! streams waiting for their responses. A gRPC call is an HTTP/2 stream whose outcome is the
//! `grpc-status` of its trailers (or of its headers, in a trailers-only answer).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use h2::client::{Connection, ResponseFuture, SendRequest};
use h2::RecvStream;
use meshbench_net::grpc::Code;
use meshbench_net::stream::Stream;

use crate::recorder::{ErrorKind, Status};
use crate::spec::HttpRequest;

type Handshake = Pin<
    Box<dyn Future<Output = Result<(SendRequest<Bytes>, Connection<Stream, Bytes>), h2::Error>>>,
>;

/// An HTTP/2 client connection owned by the loop.
pub enum H2Conn {
    Handshaking(Handshake),
    Open {
        send: SendRequest<Bytes>,
        conn: Box<Connection<Stream, Bytes>>,
    },
}

/// A stream in flight.
pub enum H2Stream {
    Head {
        response: ResponseFuture,
        grpc: bool,
    },
    Body {
        status: u16,
        body: RecvStream,
        grpc: bool,
    },
}

/// What polling a stream gave.
pub enum StreamPoll {
    Pending,
    /// The whole response has arrived.
    Done(Status),
    Failed(ErrorKind, String),
}

/// A gRPC call's code from its `grpc-status`, or, when there is none, from the HTTP status.
fn grpc_code(headers: Option<&http::HeaderMap>, status: u16) -> Code {
    match headers.and_then(|h| h.get("grpc-status")) {
        Some(v) => Code::parse(v.as_bytes()),
        None => Code::from_http(status),
    }
}

fn cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// Window sizes large enough that flow control never throttles a benchmark's responses.
const WINDOW: u32 = 4 << 20;

impl H2Conn {
    pub fn start(stream: Stream) -> Self {
        let mut builder = h2::client::Builder::new();
        builder
            .initial_window_size(WINDOW)
            .initial_connection_window_size(4 * WINDOW)
            .max_concurrent_reset_streams(1024);
        H2Conn::Handshaking(Box::pin(builder.handshake(stream)))
    }

    /// Drives the connection: finishes the handshake, reads and writes frames. `Ready(Ok)` means
    /// the connection ended cleanly (after a GOAWAY); `Ready(Err)` that it failed.
    pub fn poll(&mut self) -> Poll<Result<(), (ErrorKind, String)>> {
        let mut cx = cx();
        if let H2Conn::Handshaking(hs) = self {
            match hs.as_mut().poll(&mut cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(classify(&e))),
                Poll::Ready(Ok((send, conn))) => {
                    *self = H2Conn::Open {
                        send,
                        conn: Box::new(conn),
                    }
                }
            }
        }
        let H2Conn::Open { conn, .. } = self else {
            return Poll::Pending;
        };
        match Pin::new(&mut **conn).poll(&mut cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(classify(&e))),
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self, H2Conn::Open { .. })
    }

    /// Opens a stream for `req`; `Ok(None)` when the peer's stream limit is reached for now.
    pub fn send(&mut self, req: &HttpRequest) -> Result<Option<H2Stream>, (ErrorKind, String)> {
        let H2Conn::Open { send, .. } = self else {
            return Ok(None);
        };
        match send.poll_ready(&mut cx()) {
            Poll::Pending => return Ok(None),
            Poll::Ready(Err(e)) => return Err(classify(&e)),
            Poll::Ready(Ok(())) => {}
        }
        let mut head = http::Request::new(());
        *head.method_mut() = req.method.clone();
        *head.uri_mut() = req.uri.clone();
        if !req.headers.is_empty() {
            *head.headers_mut() = req.headers.clone();
        }
        let no_body = req.body.is_empty();
        let (response, mut body) = send.send_request(head, no_body).map_err(|e| classify(&e))?;
        if !no_body {
            body.send_data(req.body.clone(), true)
                .map_err(|e| classify(&e))?;
        }
        Ok(Some(H2Stream::Head {
            response,
            grpc: req.grpc,
        }))
    }
}

impl H2Stream {
    pub fn poll(&mut self) -> StreamPoll {
        let mut cx = cx();
        loop {
            match self {
                H2Stream::Head { response, grpc } => {
                    match Pin::new(&mut *response).poll(&mut cx) {
                        Poll::Pending => return StreamPoll::Pending,
                        Poll::Ready(Err(e)) => {
                            let (kind, msg) = classify(&e);
                            return StreamPoll::Failed(kind, msg);
                        }
                        Poll::Ready(Ok(resp)) => {
                            let status = resp.status().as_u16();
                            let grpc = *grpc;
                            if grpc && resp.headers().contains_key("grpc-status") {
                                // Trailers-only: the call ended in its headers.
                                let code = grpc_code(Some(resp.headers()), status);
                                return StreamPoll::Done(Status::Grpc(code));
                            }
                            let body = resp.into_body();
                            if body.is_end_stream() {
                                return StreamPoll::Done(if grpc {
                                    Status::Grpc(Code::from_http(status))
                                } else {
                                    Status::Http(status)
                                });
                            }
                            *self = H2Stream::Body { status, body, grpc };
                        }
                    }
                }
                H2Stream::Body { status, body, grpc } => match body.poll_data(&mut cx) {
                    Poll::Pending => return StreamPoll::Pending,
                    Poll::Ready(None) if !*grpc => return StreamPoll::Done(Status::Http(*status)),
                    Poll::Ready(None) => {
                        return match body.poll_trailers(&mut cx) {
                            Poll::Pending => StreamPoll::Pending,
                            Poll::Ready(Ok(trailers)) => StreamPoll::Done(Status::Grpc(grpc_code(
                                trailers.as_ref(),
                                *status,
                            ))),
                            Poll::Ready(Err(e)) => {
                                let (kind, msg) = classify(&e);
                                StreamPoll::Failed(kind, msg)
                            }
                        }
                    }
                    Poll::Ready(Some(Ok(data))) => {
                        let _ = body.flow_control().release_capacity(data.len());
                    }
                    Poll::Ready(Some(Err(e))) => {
                        let (kind, msg) = classify(&e);
                        return StreamPoll::Failed(kind, msg);
                    }
                },
            }
        }
    }
}

/// Sorts an h2 error into the error kinds, with a message that says which.
fn classify(e: &h2::Error) -> (ErrorKind, String) {
    if let Some(io) = e.get_io() {
        if let Some(tls) = meshbench_net::stream::tls_error(io) {
            return (ErrorKind::Tls, meshbench_net::tls::describe_error(tls));
        }
        return (ErrorKind::of_io(io), io.to_string());
    }
    let reason = e
        .reason()
        .map_or_else(|| "unknown".to_string(), |r| format!("{r:?}"));
    if e.is_go_away() && !e.is_remote() {
        (
            ErrorKind::Protocol,
            format!("HTTP/2 protocol error ({reason}): is the server speaking HTTP/2?"),
        )
    } else if e.is_go_away() {
        (ErrorKind::GoAway, format!("GOAWAY ({reason})"))
    } else if e.is_reset() {
        (ErrorKind::StreamReset, format!("RST_STREAM ({reason})"))
    } else {
        (ErrorKind::Protocol, format!("HTTP/2: {e}"))
    }
}
