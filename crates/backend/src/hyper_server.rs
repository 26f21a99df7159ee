//! The backend over TLS, HTTP/2 (ALPN h2 or prior-knowledge h2c) and mutual TLS, served by
//! hyper on a small tokio runtime. It answers exactly as the plain HTTP/1.1 server does (size,
//! delay, status, echo; per request by query or `x-meshbench-*` header). The plain server stays
//! the fast path for HTTP/1.1 without TLS; this one exists because a TLS and HTTP/2 stack is
//! not something to write twice.
//!
//! A request with `content-type: application/grpc` is a gRPC call: fortio's ping
//! (`fgrpc.PingServer/Ping`: the message echoed, its `delayNanos` waited out, its deadline
//! kept) and the standard health check are answered, anything else is UNIMPLEMENTED. Injected
//! statuses (`--status 503:1%`) become the gRPC code a client would read from them.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_net::grpc::{self, Code, PingMessage};
use prost::Message;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::sync::oneshot;

use crate::answer::{Answer, Shared};
use crate::options::BackendConfig;

/// Largest request body echoed back.
const MAX_ECHO: usize = 1 << 20;

/// The server's certificate, and who may connect.
pub struct ServerTls {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// Require client certificates signed by these CAs (mutual TLS).
    pub client_roots: Option<RootCertStore>,
}

impl ServerTls {
    /// The rustls server config: ALPN h2 and http/1.1, client certificates when asked.
    pub fn config(self) -> Result<Arc<ServerConfig>, rustls::Error> {
        let provider = meshbench_net::tls::provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match self.client_roots {
            Some(roots) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| rustls::Error::General(e.to_string()))?,
            ),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(self.chain, self.key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A running hyper backend; stops when dropped.
pub struct HyperBackend {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HyperBackend {
    /// Listens on `addr` (port 0 picks one): TLS when `tls` is given, else plain HTTP/1.1 and
    /// h2c, each connection's protocol detected from its first bytes. With `http3` (and TLS),
    /// HTTP/3 too, on the same port over UDP.
    pub fn start(
        addr: SocketAddr,
        cfg: BackendConfig,
        tls: Option<Arc<ServerConfig>>,
        http3: bool,
    ) -> io::Result<HyperBackend> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads.max(1))
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let quic = match http3 && tls.is_some() {
            true => Some(std::net::UdpSocket::bind(addr)?),
            false => None,
        };
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("backend-hyper".into())
            .spawn(move || runtime.block_on(serve(listener, quic, cfg, tls, rx)))?;
        Ok(HyperBackend {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HyperBackend {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    quic: Option<std::net::UdpSocket>,
    cfg: BackendConfig,
    tls: Option<Arc<ServerConfig>>,
    mut stop: oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let shared = Arc::new(Shared::new(cfg));
    if let Some(udp) = quic {
        if let Some(tls) = &tls {
            crate::h3_server::spawn(udp, tls, Arc::clone(&shared));
        }
    }
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let Ok((tcp, _)) = accepted else { continue };
        let _ = tcp.set_nodelay(true);
        let shared = shared.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(shared.clone(), req));
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            match acceptor {
                Some(acceptor) => {
                    // A failed handshake (wrong CA, no client certificate) just ends the connection.
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                    }
                }
                None => {
                    let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                }
            }
        });
    }
}

/// A response body: its bytes, then its trailers if it has any (a gRPC call's status).
pub struct Reply {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Reply {
    fn bytes(data: Bytes) -> Reply {
        Reply {
            data: Some(data),
            trailers: None,
        }
    }

    fn empty() -> Reply {
        Reply::bytes(Bytes::new())
    }
}

impl Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(data) = this.data.take().filter(|d| !d.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.as_ref().is_none_or(Bytes::is_empty) && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

async fn answer(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Reply>, Infallible> {
    if req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(grpc::CONTENT_TYPE.as_bytes()))
    {
        return Ok(answer_grpc(&shared, req).await);
    }
    let Answer {
        opts,
        status,
        delay_ns,
    } = shared.decide(req.uri(), req.headers());
    let body = if opts.echo {
        match Limited::new(req.into_body(), MAX_ECHO).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return Ok(Response::builder()
                    .status(413)
                    .body(Reply::empty())
                    .expect("a valid response"))
            }
        }
    } else {
        // Read (and drop) the request body so flow control keeps moving.
        let _ = req.into_body().collect().await;
        shared.body_of(&opts)
    };
    if delay_ns > 0 {
        tokio::time::sleep(std::time::Duration::from_nanos(delay_ns)).await;
    }
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/octet-stream")
        .body(Reply::bytes(body))
        .expect("a valid response"))
}

/// A gRPC call: the ping, the health check, or UNIMPLEMENTED.
async fn answer_grpc(shared: &Shared, req: Request<Incoming>) -> Response<Reply> {
    let deadline = req
        .headers()
        .get("grpc-timeout")
        .and_then(|v| grpc::parse_timeout(v.as_bytes()));
    let path = req.uri().path().to_string();
    crate::options::burn(shared.cfg.work);
    let (injected, delay_ns) = shared.drawn();
    let body = match Limited::new(req.into_body(), grpc::MAX_MESSAGE + 5)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => return grpc_status(Code::RESOURCE_EXHAUSTED, "the message is over 4 MiB"),
    };
    let message = match grpc::unframe(&body) {
        Ok(m) => m,
        Err(e) => return grpc_status(Code::INTERNAL, &e.to_string()),
    };
    let reply = match path.as_str() {
        grpc::PING_PATH => match PingMessage::decode(message) {
            Ok(mut ping) => {
                let delay = Duration::from_nanos(delay_ns.max(ping.delay_nanos.max(0) as u64));
                if let Some(d) = deadline.filter(|&d| d < delay) {
                    tokio::time::sleep(d).await;
                    return grpc_status(
                        Code::DEADLINE_EXCEEDED,
                        "the ping's delay is past its deadline",
                    );
                }
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                ping.ts = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as i64);
                grpc::frame(&ping)
            }
            Err(e) => return grpc_status(Code::INTERNAL, &format!("not a PingMessage: {e}")),
        },
        grpc::HEALTH_PATH => grpc::frame(&grpc::HealthCheckResponse { status: 1 }),
        other => {
            return grpc_status(
                Code::UNIMPLEMENTED,
                &format!(
                    "{other}: this backend answers {} and {}",
                    grpc::PING_PATH,
                    grpc::HEALTH_PATH
                ),
            )
        }
    };
    if injected != 200 {
        return grpc_status(Code::from_http(injected), "injected by --status");
    }
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, grpc::CONTENT_TYPE)
        .body(Reply {
            data: Some(Bytes::from(reply)),
            trailers: Some(trailers),
        })
        .expect("a valid response")
}

/// A call that ends in its headers (gRPC's trailers-only response).
fn grpc_status(code: Code, message: &str) -> Response<Reply> {
    let mut b = Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, grpc::CONTENT_TYPE)
        .header("grpc-status", code.number().to_string());
    // grpc-message is percent-encoded; keep to what needs no encoding.
    let clean: String = message
        .chars()
        .map(|c| match c {
            '%' => '?',
            c if c.is_ascii_graphic() || c == ' ' => c,
            _ => '?',
        })
        .collect();
    if let Ok(v) = http::HeaderValue::from_str(&clean) {
        b = b.header("grpc-message", v);
    }
    b.body(Reply::empty()).expect("a valid response")
}
