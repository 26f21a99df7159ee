//! The backend over HTTP/3: quinn's QUIC endpoint on the TLS port's number over UDP, h3 on
//! top, answering exactly as the TCP servers do (size, delay, status, echo; per request by
//! query or `x-meshbench-*` header). It exists so that the generator's HTTP/3 client (h3 over
//! quinn-proto, driven by the engine's own loop) is tested against a server stack it shares no
//! driving code with, and so that a lab can put a real HTTP/3 hop in front of it.
//!
//! 0-RTT early data is accepted (a resumed client's first requests are answered before the
//! handshake ends) and clients may migrate to a new address (QUIC validates the path).

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use h3::server::RequestStream;
use http::Response;
use rustls::ServerConfig;
use thiserror::Error;

use crate::answer::{Answer, Shared};

/// Largest request body echoed back (as over TCP).
const MAX_ECHO: usize = 1 << 20;

/// Serves HTTP/3 on `udp` with the TLS settings of the TCP port (ALPN h3 here), on the current
/// tokio runtime, until the runtime ends. A socket or TLS setting QUIC cannot use is reported
/// on stderr and HTTP/3 is not served (the TCP side goes on).
pub(crate) fn spawn(udp: std::net::UdpSocket, tls: &ServerConfig, shared: Arc<Shared>) {
    let endpoint = match endpoint(udp, tls) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("backend: HTTP/3 not served: {e}");
            return;
        }
    };
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let Ok(connecting) = incoming.accept() else {
                    return;
                };
                // A resumed client's early data is served at once; otherwise wait for the
                // handshake.
                let conn = match connecting.into_0rtt() {
                    Ok((conn, _accepted)) => conn,
                    Err(connecting) => match connecting.await {
                        Ok(conn) => conn,
                        Err(_) => return,
                    },
                };
                serve_connection(conn, shared).await;
            });
        }
    });
}

/// Why HTTP/3 is not served (the TCP side goes on).
#[derive(Debug, Error)]
enum EndpointError {
    #[error("TLS settings unusable for QUIC: {0}")]
    Tls(#[source] quinn::crypto::rustls::NoInitialCipherSuite),
    #[error("no async runtime for QUIC")]
    NoRuntime,
    #[error("UDP socket: {0}")]
    Socket(#[source] std::io::Error),
}

fn endpoint(
    udp: std::net::UdpSocket,
    tls: &ServerConfig,
) -> Result<quinn::Endpoint, EndpointError> {
    let mut tls = tls.clone();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = u32::MAX;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls))
        .map_err(EndpointError::Tls)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(1024u32.into())
        .stream_receive_window((4u32 << 20).into())
        .receive_window((16u32 << 20).into())
        .send_window(16 << 20);
    config.transport_config(Arc::new(transport));
    let runtime = quinn::default_runtime().ok_or(EndpointError::NoRuntime)?;
    quinn::Endpoint::new(quinn::EndpointConfig::default(), Some(config), udp, runtime)
        .map_err(EndpointError::Socket)
}

async fn serve_connection(conn: quinn::Connection, shared: Arc<Shared>) {
    let Ok(mut h3) = h3::server::builder()
        .build::<_, Bytes>(h3_quinn::Connection::new(conn))
        .await
    else {
        return;
    };
    // Ends with the connection (closed by the client, or lost).
    while let Ok(Some(resolver)) = h3.accept().await {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            if let Ok((req, stream)) = resolver.resolve_request().await {
                // A stream the client gave up on just ends.
                let _ = answer(&shared, req, stream).await;
            }
        });
    }
}

async fn answer<S>(
    shared: &Shared,
    req: http::Request<()>,
    mut stream: RequestStream<S, Bytes>,
) -> Result<(), h3::error::StreamError>
where
    S: h3::quic::BidiStream<Bytes>,
{
    let Answer {
        opts,
        status,
        delay_ns,
    } = shared.decide(req.uri(), req.headers());
    // Read the request body: echoed, or dropped so that flow control keeps moving.
    let mut echoed = BytesMut::new();
    while let Some(mut chunk) = stream.recv_data().await? {
        if opts.echo && echoed.len() + chunk.remaining() <= MAX_ECHO {
            echoed.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
        } else {
            chunk.advance(chunk.remaining());
        }
    }
    let body = if opts.echo {
        echoed.freeze()
    } else {
        shared.body_of(&opts)
    };
    if delay_ns > 0 {
        tokio::time::sleep(std::time::Duration::from_nanos(delay_ns)).await;
    }
    let head = Response::builder()
        .status(status)
        .header("content-type", "application/octet-stream")
        .header("content-length", body.len())
        .body(())
        .expect("a valid response");
    stream.send_response(head).await?;
    if !body.is_empty() {
        stream.send_data(body).await?;
    }
    stream.finish().await
}
