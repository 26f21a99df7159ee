//! The control connection's byte stream: plain TCP, or TLS with a certificate on both sides
//! (mutual TLS: the side that accepted is the TLS server, whichever role it plays).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use meshbench_net::tls as nettls;
use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection, StreamOwned};

use super::AgentError;

/// Certificate, key and the CA that signed the peer's certificate, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// Mutual TLS, both ways: this side's certificate, the peer's CA.
#[derive(Clone)]
pub struct Tls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

fn file_err(path: &Path) -> impl FnOnce(String) -> AgentError + '_ {
    move |why| AgentError::TlsFile {
        path: path.to_path_buf(),
        why,
    }
}

impl Tls {
    pub fn load(files: &TlsFiles) -> Result<Tls, AgentError> {
        let certs =
            nettls::load_certs(&files.cert).map_err(|e| file_err(&files.cert)(e.to_string()))?;
        let key = nettls::load_key(&files.key).map_err(|e| file_err(&files.key)(e.to_string()))?;
        let roots = Arc::new(
            nettls::load_roots(&files.ca).map_err(|e| file_err(&files.ca)(e.to_string()))?,
        );
        let provider = nettls::provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| file_err(&files.ca)(e.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| file_err(&files.cert)(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| file_err(&files.key)(e.to_string()))?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| file_err(&files.cert)(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| file_err(&files.key)(e.to_string()))?;
        Ok(Tls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

/// A control connection, plain or TLS.
pub enum Link {
    Plain(TcpStream),
    Server(Box<StreamOwned<ServerConnection, TcpStream>>),
    Client(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Link {
    /// The side that accepted the connection.
    pub fn accepted(tcp: TcpStream, tls: Option<&Tls>) -> io::Result<Link> {
        tcp.set_nodelay(true)?;
        Ok(match tls {
            None => Link::Plain(tcp),
            Some(t) => {
                let conn = ServerConnection::new(t.server.clone()).map_err(io::Error::other)?;
                Link::Server(Box::new(StreamOwned::new(conn, tcp)))
            }
        })
    }

    /// The side that dialled `host` (the name its certificate must hold).
    pub fn dialled(tcp: TcpStream, host: &str, tls: Option<&Tls>) -> io::Result<Link> {
        tcp.set_nodelay(true)?;
        Ok(match tls {
            None => Link::Plain(tcp),
            Some(t) => {
                let name = ServerName::try_from(host.to_string()).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("'{host}' is not a TLS name"),
                    )
                })?;
                let conn =
                    ClientConnection::new(t.client.clone(), name).map_err(io::Error::other)?;
                Link::Client(Box::new(StreamOwned::new(conn, tcp)))
            }
        })
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            Link::Plain(s) => s,
            Link::Server(s) => &s.sock,
            Link::Client(s) => &s.sock,
        }
    }

    /// The peer's address, for messages.
    pub fn peer(&self) -> String {
        self.tcp()
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string())
    }
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.read(buf),
            Link::Server(s) => s.read(buf),
            Link::Client(s) => s.read(buf),
        }
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.write(buf),
            Link::Server(s) => s.write(buf),
            Link::Client(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Link::Plain(s) => s.flush(),
            Link::Server(s) => s.flush(),
            Link::Client(s) => s.flush(),
        }
    }
}
