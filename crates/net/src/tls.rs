//! TLS client settings, built once per run and shared by every connection of a worker: trust
//! (system roots, `--cacert`, or none with `--insecure`), a client certificate for mutual TLS,
//! ALPN, and session resumption on or off.
//!
//! rustls does the protocol; [`crate::stream::Stream`] feeds it from non-blocking sockets.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use thiserror::Error;

/// Where system trust anchors live on Debian and most other distributions.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A TLS setting that cannot be used.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key")]
    NoKey { path: PathBuf },
    #[error("{path}: {message}")]
    BadPem { path: PathBuf, message: String },
    #[error(
        "no trusted certificates: {SYSTEM_CA_BUNDLE} is missing; give --cacert FILE or --insecure"
    )]
    NoTrustAnchors,
    #[error("TLS settings rejected: {0}")]
    Rustls(#[from] rustls::Error),
}

/// What the user asked of TLS.
#[derive(Debug, Clone, Default)]
pub struct ClientTlsOptions {
    /// Accept any server certificate (the handshake signatures are still checked).
    pub insecure: bool,
    /// Trust these CAs instead of the system's.
    pub ca: Option<Roots>,
    /// Client certificate chain and key, for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// ALPN protocols to offer, most preferred first.
    pub alpn: Vec<Vec<u8>>,
    /// Reuse sessions (tickets or IDs) across connections to the same name.
    pub resume: bool,
}

/// CA certificates to trust (PEM): a file, or a file's contents carried elsewhere (an agent
/// drives a step whose CA file is on the coordinator's machine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    File(PathBuf),
    /// `name`: the file it was read from, for messages.
    Pem {
        name: PathBuf,
        pem: Vec<u8>,
    },
}

/// The crypto provider every config uses (ring: pure Rust build, AES-NI where present).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// Builds the client config for a run.
pub fn client_config(opts: &ClientTlsOptions) -> Result<Arc<ClientConfig>, TlsError> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider())))
    } else {
        let roots = match &opts.ca {
            Some(Roots::File(path)) => load_roots(path)?,
            Some(Roots::Pem { name, pem }) => roots_from(name, pem)?,
            None => {
                let path = Path::new(SYSTEM_CA_BUNDLE);
                if !path.exists() {
                    return Err(TlsError::NoTrustAnchors);
                }
                load_roots(path)?
            }
        };
        builder.with_root_certificates(roots)
    };
    let mut config = match &opts.client_cert {
        Some((cert, key)) => builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = opts.alpn.clone();
    config.resumption = if opts.resume {
        Resumption::in_memory_sessions(1024)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(config))
}

/// Turns a host name or IP literal into the name rustls sends as SNI and checks against.
pub fn server_name(host: &str) -> Option<ServerName<'static>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads every PEM certificate in `path`.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    certs_from(path, &read(path)?)
}

/// The certificates in `data` (PEM), read from `path`.
fn certs_from(path: &Path, data: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// Reads the first PEM private key (PKCS#8, PKCS#1 or SEC1) in `path`.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let data = read(path)?;
    PrivateKeyDer::from_pem_slice(&data).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_path_buf(),
        },
        e => TlsError::BadPem {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
    })
}

/// A root store holding every certificate in `path`.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    roots_from(path, &read(path)?)
}

/// The CA certificates in `data` (PEM), read from `path`.
fn roots_from(path: &Path, data: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from(path, data)? {
        roots.add(cert).map_err(|e| TlsError::BadPem {
            path: path.to_path_buf(),
            message: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// `--insecure`: any certificate is accepted, but the server must still prove it holds the key
/// of the certificate it sent.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A short, stable description of a TLS failure for the error counts ("certificate expired",
/// "unknown CA", "name mismatch", ...): one entry per kind of failure, never per connection.
pub fn describe_error(e: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(c) => match c {
            C::Expired | C::ExpiredContext { .. } => "certificate expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => "certificate not yet valid".into(),
            C::UnknownIssuer => "certificate signed by an unknown CA".into(),
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "certificate does not match the host name".into()
            }
            C::BadSignature => "certificate has a bad signature".into(),
            C::Revoked => "certificate revoked".into(),
            other => format!("invalid certificate: {other:?}"),
        },
        E::AlertReceived(A::CertificateRequired) => {
            "the server requires a client certificate (give --cert and --key)".into()
        }
        E::AlertReceived(A::UnknownCA) | E::AlertReceived(A::BadCertificate) => {
            "the server rejected the client certificate".into()
        }
        E::AlertReceived(A::NoApplicationProtocol) => {
            "the server refused the offered ALPN protocol (with --http2: it does not speak h2)"
                .into()
        }
        E::AlertReceived(a) => format!("alert from the server: {a:?}"),
        other => other.to_string(),
    }
}
