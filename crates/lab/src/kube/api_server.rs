//! The smallest Kubernetes API server istiod can run against: etcd and kube-apiserver on
//! loopback, from the binaries scripts/install-k8s.sh builds, with a serving certificate and a
//! service-account signing key cut here, one static admin token, and no node.
//!
//! It is spoken to with the project's one Kubernetes client, `meshbench_k8s::BlockingClient`
//! (kube-rs, blocking), authenticated as the kubeconfig written here says (the admin token,
//! and the CA cut here), the same file istiod reads: server-side apply of YAML documents (each
//! kind's resource named by the API server's discovery), typed objects, one ConfigMap read,
//! one TokenRequest.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use meshbench_k8s::BlockingClient;
use meshbench_results::Stop;
use serde_json::Value;

use crate::pki::{Ca, Usage};
use crate::process::{Placement, RoleProcess};
use crate::{write_file, LabError};

/// The one identity the lab's kubeconfig and requests carry (group `system:masters`).
const ADMIN_TOKEN: &str = "meshbench-lab-admin";
/// How long the API server may take to answer `/readyz` (about 5 s here; more on a busy VM).
const READY_WITHIN: Duration = Duration::from_secs(90);
/// How long a token asked for the gateway is valid (a day, as a projected volume's may be).
const TOKEN_LIFETIME: Duration = Duration::from_secs(86400);

/// A running etcd and kube-apiserver; both stop when dropped.
pub struct ApiServer {
    pub url: String,
    pub kubeconfig: PathBuf,
    /// The API server, as the kubeconfig reaches it.
    pub client: BlockingClient,
    // Field order: the API server stops before its store.
    _apiserver: RoleProcess,
    _etcd: RoleProcess,
}

impl ApiServer {
    /// Starts both in `dir` (data, certificates, logs) and waits until the API server is ready;
    /// a `stop` ends the wait within 200 ms (and stops both).
    pub fn start(dir: &Path, k8s_bin: &Path, stop: &Stop) -> Result<ApiServer, LabError> {
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
        let free = || crate::port::free_port();
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
        let client = BlockingClient::from_kubeconfig(&kubeconfig)?;
        let mut server = ApiServer {
            url,
            kubeconfig,
            client,
            _apiserver: apiserver,
            _etcd: etcd,
        };
        server.wait_ready(stop)?;
        Ok(server)
    }

    /// Starts both in `dir` (made first), from the binaries scripts/install-k8s.sh built
    /// ([`super::k8s_bin`]), and applies the CRDs of `crds` (a control plane's own).
    pub fn start_with_crds(dir: &Path, crds: &Path, stop: &Stop) -> Result<ApiServer, LabError> {
        std::fs::create_dir_all(dir).map_err(|e| LabError::Files {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let api = ApiServer::start(dir, &super::k8s_bin(), stop)?;
        api.apply_files(&[crds.to_path_buf()])?;
        Ok(api)
    }

    fn wait_ready(&mut self, stop: &Stop) -> Result<(), LabError> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if self.client.ready().is_ok() {
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
                return Err(LabError::NotReady {
                    server: "kube-apiserver",
                    awaiting: "",
                    within: READY_WITHIN,
                    log: self._apiserver.log_tail(5),
                });
            }
            if !stop.sleep(Duration::from_millis(200)) {
                return Err(LabError::Stopped);
            }
        }
    }

    /// Asks etcd and the API server to end, without waiting ([`RoleProcess::terminate`]).
    pub fn terminate(&self) {
        self._apiserver.terminate();
        self._etcd.terminate();
    }

    /// Server-side applies every document of `yaml` (a `---` stream), several at a time;
    /// returns how many. A custom resource whose definition is not yet established waits
    /// for it.
    pub fn apply_yaml(&self, yaml: &str) -> Result<usize, LabError> {
        let documents = meshbench_k8s::blocking::documents(yaml)?;
        Ok(self.client.apply_all(documents)?)
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

    /// Server-side apply of one document.
    pub fn apply(&self, object: &Value) -> Result<(), LabError> {
        Ok(self.client.apply(object)?)
    }

    /// A token for `account` in `namespace`, for `audience`, as a pod's projected volume holds it.
    pub fn token(
        &self,
        namespace: &str,
        account: &str,
        audience: &str,
    ) -> Result<String, LabError> {
        Ok(self
            .client
            .service_account_token(namespace, account, audience, TOKEN_LIFETIME)?)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // Both asked at once; the fields' drops then wait for each, overlapping.
        self.terminate();
    }
}
