//! Certificates for the lab: a throw-away CA, server certificates for any set of names (one
//! per gateway domain, or one wildcard), client certificates for mutual TLS, and deliberately
//! broken ones (expired, wrong name) for the tests of what the load generator reports.
//!
//! ECDSA P-256 keys: quick to generate (a thousand domains in well under a second) and what
//! modern gateways serve.

use std::path::Path;

use rcgen::{
    string::Ia5String, BasicConstraints, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use meshbench_k8s::names::DEFAULT_NAMESPACE;

use crate::LabError;

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    /// The certificate as a peer presents it in a handshake (DER).
    pub cert_der: Vec<u8>,
}

impl Issued {
    /// Writes `NAME.pem` and `NAME-key.pem` into `dir`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<(), LabError> {
        write(&dir.join(format!("{name}.pem")), &self.cert_pem)?;
        write(&dir.join(format!("{name}-key.pem")), &self.key_pem)
    }
}

/// A certificate authority that signs everything else.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub cert_pem: String,
}

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
    /// A server certificate whose validity ended yesterday (for tests).
    ExpiredServer,
}

fn pki_err(e: rcgen::Error) -> LabError {
    LabError::Pki(e.to_string())
}

fn write(path: &Path, text: &str) -> Result<(), LabError> {
    std::fs::write(path, text).map_err(|source| LabError::File {
        doing: "write",
        path: path.to_path_buf(),
        source,
    })
}

impl Ca {
    /// A new CA named `common_name`, valid for ten years.
    pub fn new(common_name: &str) -> Result<Ca, LabError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_err)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        dn.push(DnType::OrganizationName, "meshbench lab");
        params.distinguished_name = dn;
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2045, 1, 1);
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert = params.self_signed(&key).map_err(pki_err)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A certificate for `names` (DNS names, wildcards such as `*.example.com`, or IP addresses).
    pub fn issue(&self, names: &[String], usage: Usage) -> Result<Issued, LabError> {
        self.issue_workload(names, None, usage)
    }

    /// A certificate for `names` that also carries a workload identity as a URI SAN (a SPIFFE
    /// id, `spiffe://cluster.local/ns/default/sa/backend`), as Istio's workload certificates do.
    pub fn issue_workload(
        &self,
        names: &[String],
        spiffe: Option<&str>,
        usage: Usage,
    ) -> Result<Issued, LabError> {
        let mut params = CertificateParams::new(names.to_vec()).map_err(pki_err)?;
        if let Some(id) = spiffe {
            let uri = Ia5String::try_from(id.to_string()).map_err(pki_err)?;
            params.subject_alt_names.push(SanType::URI(uri));
        }
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().map_or("meshbench", String::as_str),
        );
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![match usage {
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
            _ => ExtendedKeyUsagePurpose::ServerAuth,
        }];
        if usage == Usage::ExpiredServer {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        } else {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2045, 1, 1);
        }
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(pki_err)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
        })
    }

    /// Writes the CA certificate as `ca.pem` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), LabError> {
        write(&dir.join("ca.pem"), &self.cert_pem)
    }
}

/// The mesh's trust domain in workload identities (whose namespace is the lab's workloads',
/// [`DEFAULT_NAMESPACE`]).
pub const TRUST_DOMAIN: &str = "cluster.local";
/// The service accounts of the lab's two workloads: the server side (the backend, and every
/// hop that listens for the mesh) and the client side (every hop that connects into it).
pub const SERVER_ACCOUNT: &str = "backend";
pub const CLIENT_ACCOUNT: &str = "client";

/// A workload's SPIFFE id, as Istio names it: `spiffe://<trust domain>/ns/<ns>/sa/<account>`.
pub fn spiffe_id(account: &str) -> String {
    format!("spiffe://{TRUST_DOMAIN}/ns/{DEFAULT_NAMESPACE}/sa/{account}")
}

/// A CA, a server certificate for `names` and a client certificate, written into `dir` as
/// `ca.pem`, `server.pem`/`server-key.pem` and `client.pem`/`client-key.pem`: what
/// `meshbench backend --tls` serves and what a client needs for mutual TLS. Both also carry
/// their workload's SPIFFE id ([`SERVER_ACCOUNT`], [`CLIENT_ACCOUNT`]), which Envoy checks as
/// an Istio sidecar does; the other programs check the DNS name.
pub fn write_lab_set(dir: &Path, names: &[String]) -> Result<(Ca, Issued), LabError> {
    std::fs::create_dir_all(dir).map_err(|source| LabError::File {
        doing: "create",
        path: dir.to_path_buf(),
        source,
    })?;
    let ca = Ca::new("meshbench lab CA")?;
    ca.write(dir)?;
    let server = ca.issue_workload(names, Some(&spiffe_id(SERVER_ACCOUNT)), Usage::Server)?;
    server.write(dir, "server")?;
    ca.issue_workload(
        &["meshbench-client".to_string()],
        Some(&spiffe_id(CLIENT_ACCOUNT)),
        Usage::Client,
    )?
    .write(dir, "client")?;
    Ok((ca, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_certificates_rustls_accepts() {
        let ca = Ca::new("test CA").unwrap();
        let server = ca
            .issue(
                &["localhost".to_string(), "127.0.0.1".to_string()],
                Usage::Server,
            )
            .unwrap();
        assert!(server.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(server.key_pem.contains("PRIVATE KEY"));
        let started = std::time::Instant::now();
        for i in 0..200 {
            ca.issue(&[format!("d-{i}.example.com")], Usage::Server)
                .unwrap();
        }
        assert!(
            started.elapsed().as_secs() < 20,
            "certificates are slow to make"
        );
    }
}
