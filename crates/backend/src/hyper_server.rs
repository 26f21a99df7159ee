//! The backend over TLS, HTTP/2 (ALPN h2 or prior-knowledge h2c) and mutual TLS, served by
//! hyper on a small tokio runtime. It answers exactly as the plain HTTP/1.1 server does (size,
//! delay, status, echo; per request by query or `x-meshbench-*` header). The plain server stays
//! the fast path for HTTP/1.1 without TLS; this one exists because a TLS and HTTP/2 stack is
//! not something to write twice.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_net::rng::SplitMix64;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::sync::oneshot;

use crate::options::{BackendConfig, RequestOptions};

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
    /// h2c, each connection's protocol detected from its first bytes.
    pub fn start(
        addr: SocketAddr,
        cfg: BackendConfig,
        tls: Option<Arc<ServerConfig>>,
    ) -> io::Result<HyperBackend> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads.max(1))
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("backend-hyper".into())
            .spawn(move || runtime.block_on(serve(listener, cfg, tls, rx)))?;
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
    cfg: BackendConfig,
    tls: Option<Arc<ServerConfig>>,
    mut stop: oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let shared = Arc::new(Shared {
        body: Bytes::from(vec![b'x'; cfg.size]),
        rng: Mutex::new(SplitMix64(cfg.seed)),
        cfg,
    });
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

struct Shared {
    cfg: BackendConfig,
    /// The default body, shared by every response of the default size.
    body: Bytes,
    rng: Mutex<SplitMix64>,
}

async fn answer(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut opts = RequestOptions::default();
    if let Some(q) = req.uri().query() {
        opts.from_target(format!("?{q}").as_bytes());
    }
    for (name, value) in req.headers() {
        if let Some(option) = name.as_str().strip_prefix("x-meshbench-") {
            opts.set(option.as_bytes(), value.as_bytes());
        }
    }
    crate::options::burn(shared.cfg.work);
    let (status, delay_ns) = {
        let mut rng = shared.rng.lock().unwrap_or_else(|p| p.into_inner());
        let status = opts
            .status
            .unwrap_or_else(|| shared.cfg.status.pick(&mut rng));
        let delay = opts.delay.unwrap_or(shared.cfg.delay).sample_ns(&mut rng);
        (status, delay)
    };
    let body = if opts.echo {
        match Limited::new(req.into_body(), MAX_ECHO).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return Ok(Response::builder()
                    .status(413)
                    .body(Full::new(Bytes::new()))
                    .unwrap_or_default())
            }
        }
    } else {
        // Read (and drop) the request body so flow control keeps moving.
        let _ = req.into_body().collect().await;
        match opts.size {
            Some(n) if n as usize != shared.body.len() => Bytes::from(vec![b'x'; n as usize]),
            _ => shared.body.clone(),
        }
    };
    if delay_ns > 0 {
        tokio::time::sleep(std::time::Duration::from_nanos(delay_ns)).await;
    }
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/octet-stream")
        .body(Full::new(body))
        .unwrap_or_default())
}
