//! The smallest Kubernetes API server istiod can run against: etcd and kube-apiserver on
//! loopback, from the binaries scripts/install-k8s.sh builds, with a serving certificate and a
//! service-account signing key cut here, one static admin token, and no node. Spoken to over
//! HTTPS with ureq: server-side apply of YAML documents, one ConfigMap read, one TokenRequest.
//!
//! Objects are applied by path from their `apiVersion`, `kind` and `metadata` (no discovery):
//! every kind the lab applies has a regular plural ([`plural`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::pki::{Ca, Usage};
use crate::process::{Placement, RoleProcess};
use crate::{write_file, LabError};

/// The field manager of every apply.
const MANAGER: &str = "meshbench";
/// The one identity the lab's kubeconfig and requests carry (group `system:masters`).
const ADMIN_TOKEN: &str = "meshbench-lab-admin";
/// How long the API server may take to answer `/readyz` (about 5 s here; more on a busy VM).
const READY_WITHIN: Duration = Duration::from_secs(90);
/// How long a custom resource may be refused (404) after its definition was applied, while the
/// API server establishes it.
const ESTABLISH_WITHIN: Duration = Duration::from_secs(30);
/// Parallel applies of one file's documents.
const APPLIERS: usize = 4;

/// A running etcd and kube-apiserver; both stop when dropped.
pub struct ApiServer {
    pub url: String,
    pub kubeconfig: PathBuf,
    agent: ureq::Agent,
    // Field order: the API server stops before its store.
    _apiserver: RoleProcess,
    _etcd: RoleProcess,
}

/// What a request asks of the API server.
enum Request<'a> {
    Get,
    /// Server-side apply of this document (JSON is YAML too).
    Apply(&'a str),
    /// POST of this JSON.
    Create(&'a str),
}

/// What was refused, as one line.
fn refused(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Io(format!("the Kubernetes API server refused {what}: {e}"))
}

impl ApiServer {
    /// Starts both in `dir` (data, certificates, logs) and waits until the API server is ready.
    pub fn start(dir: &Path, k8s_bin: &Path) -> Result<ApiServer, LabError> {
        let apiserver_bin = k8s_bin.join("kube-apiserver");
        if !apiserver_bin.is_file() {
            return Err(LabError::Missing {
                program: "kube-apiserver".into(),
                hint: format!("no {}: run scripts/install-k8s.sh", apiserver_bin.display()),
            });
        }
        let etcd_bin =
            crate::install::find("etcd", &["/usr/bin/etcd"]).ok_or(LabError::Missing {
                program: "etcd".into(),
                hint: "install Debian's etcd-server (scripts/install-k8s.sh does)".into(),
            })?;
        let free = || crate::rig::free_port();
        let (client, peer, api) = (free()?, free()?, free()?);
        let mut etcd = Command::new(etcd_bin);
        etcd.arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}"))
            .arg("--log-level=warn");
        let none = Placement::default();
        let etcd = RoleProcess::spawn("etcd", etcd, &dir.join("etcd.log"), &none)?;

        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(|e| LabError::Files {
            path: pki.clone(),
            source: e,
        })?;
        let ca = Ca::new("meshbench lab Kubernetes CA")?;
        ca.write(&pki)?;
        ca.issue(&["127.0.0.1".into(), "localhost".into()], Usage::Server)?
            .write(&pki, "apiserver")?;
        let signer = rcgen::KeyPair::generate().map_err(|e| LabError::Pki(e.to_string()))?;
        let sa_key = write_file(pki.join("sa-key.pem"), signer.serialize_pem())?;
        let sa_pub = write_file(pki.join("sa.pem"), signer.public_key_pem())?;
        let tokens = write_file(
            dir.join("tokens.csv"),
            format!("{ADMIN_TOKEN},admin,admin,system:masters\n"),
        )?;
        let mut apiserver = Command::new(&apiserver_bin);
        apiserver
            .arg(format!("--etcd-servers=http://127.0.0.1:{client}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={api}"))
            .arg(format!(
                "--tls-cert-file={}",
                pki.join("apiserver.pem").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.join("apiserver-key.pem").display()
            ))
            .arg(format!("--token-auth-file={}", tokens.display()))
            .arg("--authorization-mode=AlwaysAllow")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--disable-admission-plugins=ServiceAccount");
        let apiserver = RoleProcess::spawn(
            "kube-apiserver",
            apiserver,
            &dir.join("kube-apiserver.log"),
            &none,
        )?;
        let url = format!("https://127.0.0.1:{api}");
        let kubeconfig = write_file(
            dir.join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {url}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\ncontexts:\n- name: lab\n  context: {{cluster: lab, user: admin}}\ncurrent-context: lab\n",
                pki.join("ca.pem").display()
            ),
        )?;
        let root = ureq::tls::Certificate::from_pem(ca.cert_pem.as_bytes())
            .map_err(|e| LabError::Pki(e.to_string()))?;
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&[root]))
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_connect(Some(Duration::from_secs(2)))
            .timeout_global(Some(Duration::from_secs(60)))
            .http_status_as_error(false)
            .user_agent("meshbench")
            .build()
            .into();
        let mut server = ApiServer {
            url,
            kubeconfig,
            agent,
            _apiserver: apiserver,
            _etcd: etcd,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), LabError> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if matches!(self.request(Request::Get, "/readyz"), Ok((200, _))) {
                return Ok(());
            }
            for p in [&mut self._etcd, &mut self._apiserver] {
                if let Some(status) = p.exited() {
                    return Err(LabError::BadConfig {
                        server: p.name.clone(),
                        config: None,
                        log: format!("exited ({status}): {}", p.failure_message()),
                    });
                }
            }
            if Instant::now() > deadline {
                return Err(LabError::Io(format!(
                    "kube-apiserver was not ready within {} s: {}",
                    READY_WITHIN.as_secs(),
                    self._apiserver.log_tail(5)
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One request with the admin token; the status and the body.
    fn request(&self, request: Request, path: &str) -> Result<(u16, String), ureq::Error> {
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let mut answer = match request {
            Request::Get => self.agent.get(&url).header("Authorization", &auth).call()?,
            Request::Apply(yaml) => self
                .agent
                .patch(&url)
                .header("Authorization", &auth)
                .header("Content-Type", "application/apply-patch+yaml")
                .send(yaml)?,
            Request::Create(json) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .header("Content-Type", "application/json")
                .send(json)?,
        };
        let status = answer.status().as_u16();
        let text = answer.body_mut().read_to_string()?;
        Ok((status, text))
    }

    /// Server-side applies every document of `yaml` (a `---` stream), `APPLIERS` at a time;
    /// returns how many. A custom resource whose definition is not yet established is retried.
    pub fn apply_yaml(&self, yaml: &str) -> Result<usize, LabError> {
        let mut docs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
            let v: Value = serde::Deserialize::deserialize(doc)
                .map_err(|e| LabError::Io(format!("a document to apply is not YAML: {e}")))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
        let chunk = docs.len().div_ceil(APPLIERS).max(1);
        std::thread::scope(|s| {
            let workers: Vec<_> = docs
                .chunks(chunk)
                .map(|part| s.spawn(move || part.iter().try_for_each(|d| self.apply(d))))
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(LabError::Io("an apply thread panicked".into())))
            })
        })?;
        Ok(docs.len())
    }

    /// Applies every file, in order.
    pub fn apply_files(&self, files: &[PathBuf]) -> Result<usize, LabError> {
        let mut n = 0;
        for f in files {
            let text = std::fs::read_to_string(f).map_err(|e| LabError::Files {
                path: f.clone(),
                source: e,
            })?;
            n += self.apply_yaml(&text)?;
        }
        Ok(n)
    }

    /// Server-side apply of one object.
    pub fn apply(&self, object: &Value) -> Result<(), LabError> {
        let path = object_path(object)?;
        let what = format!(
            "{} {} ({path})",
            object["kind"].as_str().unwrap_or("?"),
            object["metadata"]["name"].as_str().unwrap_or("?")
        );
        let query = format!("{path}?fieldManager={MANAGER}&force=true");
        let body = object.to_string();
        let deadline = Instant::now() + ESTABLISH_WITHIN;
        loop {
            match self.request(Request::Apply(&body), &query) {
                Ok((200 | 201, _)) => return Ok(()),
                Ok((404, _)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Ok((code, text)) => {
                    return Err(refused(&what, format!("{code}: {}", message(&text))))
                }
                Err(e) => return Err(refused(&what, e)),
            }
        }
    }

    /// One object's JSON, by its API path.
    pub fn get(&self, path: &str) -> Result<Option<Value>, LabError> {
        match self.request(Request::Get, path) {
            Ok((200, text)) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| refused(path, e)),
            Ok((404, _)) => Ok(None),
            Ok((code, text)) => Err(refused(path, format!("{code}: {}", message(&text)))),
            Err(e) => Err(refused(path, e)),
        }
    }

    /// A token for `account` in `namespace`, for `audience`, as a pod's projected volume holds it.
    pub fn token(
        &self,
        namespace: &str,
        account: &str,
        audience: &str,
    ) -> Result<String, LabError> {
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token");
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": 86400},
        })
        .to_string();
        let what = format!("a token for {namespace}/{account}");
        match self.request(Request::Create(&body), &path) {
            Ok((200 | 201, text)) => {
                let v: Value = serde_json::from_str(&text).map_err(|e| refused(&what, e))?;
                v["status"]["token"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| refused(&what, "no status.token in the answer"))
            }
            Ok((code, text)) => Err(refused(&what, format!("{code}: {}", message(&text)))),
            Err(e) => Err(refused(&what, e)),
        }
    }
}

/// The `message` of a Kubernetes `Status`, else the text itself (cut).
fn message(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| text.chars().take(300).collect())
}

/// The lower-case plural of a kind, as the API server names its resource: a consonant and
/// `-y` become `-ies` (`serviceentries`), anything else takes `-s` (`gateways`), as for every
/// kind the lab applies.
pub fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{stem}ies"),
        _ => format!("{lower}s"),
    }
}

/// The object's path: `/api/v1` for the core group, `/apis/GROUP/VERSION` otherwise, then its
/// namespace if it has one, its resource and its name.
pub fn object_path(object: &Value) -> Result<String, LabError> {
    let field = |v: &Value, name: &str| {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| LabError::Io(format!("an object to apply has no {name}: {object}")))
    };
    let api_version = field(&object["apiVersion"], "apiVersion")?;
    let kind = field(&object["kind"], "kind")?;
    let name = field(&object["metadata"]["name"], "metadata.name")?;
    let base = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    let ns = match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("/namespaces/{ns}"),
        None => String::new(),
    };
    Ok(format!("{base}{ns}/{}/{name}", plural(&kind)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_group_namespace_and_plural() {
        let vs = json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "a.com", "namespace": "istio-system"}});
        assert_eq!(
            object_path(&vs).unwrap(),
            "/apis/networking.istio.io/v1beta1/namespaces/istio-system/virtualservices/a.com"
        );
        let se = json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "ServiceEntry",
            "metadata": {"name": "b", "namespace": "istio-system"}});
        assert!(object_path(&se).unwrap().ends_with("/serviceentries/b"));
        let gw = json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "Gateway",
            "metadata": {"name": "g", "namespace": "istio-system"}});
        assert!(object_path(&gw).unwrap().ends_with("/gateways/g"));
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
        assert_eq!(object_path(&ns).unwrap(), "/api/v1/namespaces/x");
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition", "metadata": {"name": "gateways.networking.istio.io"}});
        assert_eq!(
            object_path(&crd).unwrap(),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gateways.networking.istio.io"
        );
        let nameless = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}});
        assert!(object_path(&nameless)
            .unwrap_err()
            .to_string()
            .contains("metadata.name"));
    }
}
