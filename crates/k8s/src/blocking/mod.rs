//! The project's Kubernetes client for synchronous callers: kube-rs behind a blocking façade.
//! The lab's control plane for `gateway.type: istio` (an API server on loopback, Istio's CRDs,
//! generated Gateways, VirtualServices and Secrets) is synchronous code, like the rest of the
//! lab; it speaks to its API server through this, not through a second client of its own.
//!
//! A [`BlockingClient`] owns a current-thread tokio runtime and a kube [`Client`]; each call
//! runs to completion on that runtime, every request bounded in time ([`CONNECT_WITHIN`],
//! [`REQUEST_WITHIN`]). The façade is here (connecting, readiness, the engine's agents, a
//! port-forward); its families are beside it: `apply` (server-side apply of documents and of
//! typed objects), `typed` (get, list, delete, a ServiceAccount's token) and `error` (why a
//! call failed, [`ApiError`]).
//!
//! Objects the caller builds are typed (k8s-openapi's, or [`crate::objects`]' custom
//! resources); documents read from files are applied as [`DynamicObject`](kube::api::DynamicObject)s
//! whose resource (group, version, kind, plural and scope) the API server itself names through
//! discovery, asked once per kind and remembered: no plural is derived from a kind here. A
//! custom resource whose definition was applied a moment ago is not served until the API
//! server has established it, so its apply waits for that, at most [`ESTABLISH_WITHIN`].
//!
//! One call leaves something running past its return: [`BlockingClient::port_forward`] gives
//! a [`Forward`], a local address served by a thread of its own (see `crate::forward`).

mod apply;
pub(crate) mod error;
mod raw;
mod typed;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use kube::Client;
use meshbench_results::Stop;

pub use apply::documents;
use error::bounded;
pub use error::{ApiError, REQUEST_WITHIN};
pub use raw::Proxied;

use crate::cluster::{config_from, ConfigError};
use crate::forward::Forward;

/// Connecting to the API server: it runs on this machine or one near it.
pub const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// How long a custom resource may be refused (not served, or 404) after its definition was
/// applied, while the API server establishes it.
pub const ESTABLISH_WITHIN: Duration = Duration::from_secs(30);
/// Applies in flight at once in [`BlockingClient::apply_all`].
pub const APPLIERS: usize = 4;
/// Between two tries of a resource not yet served.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// The current-thread runtime each client drives its calls on.
fn new_runtime() -> Result<tokio::runtime::Runtime, ApiError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ApiError::Runtime)
}

/// A Kubernetes API server, spoken to from synchronous code.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    /// What the client was made from: a port-forward makes its own client on its own runtime.
    config: kube::Config,
}

/// What the applies in flight share.
struct Shared {
    client: Client,
    /// Each kind's resource and scope as discovery named them.
    resources: Mutex<HashMap<GroupVersionKind, (ApiResource, Scope)>>,
}

impl BlockingClient {
    /// A client for the API server `kubeconfig` names, as it says to authenticate (a token
    /// or a client certificate, and the CA to trust). Nothing is asked of the server yet.
    pub fn from_kubeconfig(kubeconfig: &Path) -> Result<BlockingClient, ApiError> {
        BlockingClient::connect(Some(kubeconfig))
    }

    /// A client as `kubeconfig` says, else as `$KUBECONFIG`, `~/.kube/config` or the pod's
    /// service account say.
    pub fn connect(kubeconfig: Option<&Path>) -> Result<BlockingClient, ApiError> {
        let runtime = new_runtime()?;
        let config = runtime.block_on(async {
            let mut config = config_from(kubeconfig).await.map_err(ApiError::Config)?;
            config.connect_timeout = Some(CONNECT_WITHIN);
            config.read_timeout = Some(REQUEST_WITHIN);
            config.write_timeout = Some(REQUEST_WITHIN);
            // No retries hidden under a call: what is waited for, and how long, is said here.
            config.default_retry = false;
            Ok::<_, ApiError>(config)
        })?;
        BlockingClient::on(runtime, config)
    }

    /// Another client of the same API server, as this one was made, with a runtime of its
    /// own: for a thread that asks while this one's owner asks too (a step's kubelet reader).
    pub fn another(&self) -> Result<BlockingClient, ApiError> {
        BlockingClient::on(new_runtime()?, self.config.clone())
    }

    /// A client made from `config` on `runtime` (kube's client is made inside it).
    fn on(
        runtime: tokio::runtime::Runtime,
        config: kube::Config,
    ) -> Result<BlockingClient, ApiError> {
        let made = config.clone();
        let client = runtime.block_on(async {
            Client::try_from(made).map_err(|e| ApiError::Config(ConfigError::Client(e)))
        })?;
        Ok(BlockingClient {
            runtime,
            shared: Arc::new(Shared {
                client,
                resources: Mutex::new(HashMap::new()),
            }),
            config,
        })
    }

    /// The API server's version, as `kubectl version` says it (`v1.36.1`).
    pub fn server_version(&self) -> Result<String, ApiError> {
        self.runtime
            .block_on(bounded("/version", self.shared.client.apiserver_version()))
            .map(|info| info.git_version)
    }

    /// Whether the API server says it is ready (`GET /readyz` answers 200).
    pub fn ready(&self) -> Result<(), ApiError> {
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("GET /readyz is a request");
        self.runtime
            .block_on(bounded("/readyz", self.shared.client.request_text(request)))
            .map(drop)
    }

    /// The engine's client on the same connection ([`crate::Cluster`]).
    fn as_cluster(&self) -> crate::Cluster {
        crate::Cluster {
            client: self.shared.client.clone(),
        }
    }

    /// The agents' objects applied ([`crate::Cluster::apply`]).
    pub fn apply_agents(&self, o: &crate::Objects) -> Result<(), crate::ClusterError> {
        self.runtime.block_on(self.as_cluster().apply(o))
    }

    /// The agents' objects deleted, their pods with them ([`crate::Cluster::delete`]).
    pub fn delete_agents(&self, o: &crate::Objects) -> Result<(), crate::ClusterError> {
        self.runtime.block_on(self.as_cluster().delete(o))
    }

    /// Waits for the agent pods, until a `stop` ([`crate::Cluster::wait_ready`]).
    pub fn wait_agents(
        &self,
        o: &crate::Objects,
        wanted: usize,
        timeout: Duration,
        stop: &Stop,
        progress: impl FnMut(usize),
    ) -> Result<Vec<crate::AgentPod>, crate::ClusterError> {
        self.runtime.block_on(
            self.as_cluster()
                .wait_ready(o, wanted, timeout, stop, progress),
        )
    }

    /// Port `port` of pod `namespace/pod` (its own loopback included) at a local address, for
    /// as long as the [`Forward`] lives; the pod must be running. Each local connection is a
    /// stream of its own through the API server (see [`crate::forward`]).
    pub fn port_forward(&self, namespace: &str, pod: &str, port: u16) -> Result<Forward, ApiError> {
        let what = format!("Pod {namespace}/{pod}");
        let phase = self
            .get::<Pod>(namespace, pod)?
            .map(|p| p.status.and_then(|s| s.phase).unwrap_or_default());
        match phase.as_deref() {
            Some("Running") => {}
            Some(other) => {
                return Err(ApiError::PodNotRunning {
                    what,
                    state: format!("in phase {other:?}"),
                })
            }
            None => {
                return Err(ApiError::PodNotRunning {
                    what,
                    state: "not there".into(),
                })
            }
        }
        let mut config = self.config.clone();
        // A stream lives as long as its local connection, idle or not: only its opening is
        // bounded (forward::OPEN_WITHIN).
        config.read_timeout = None;
        config.write_timeout = None;
        Forward::start(config, namespace, pod, port)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};

    use super::*;

    /// What the fake API server was asked: method, path and query, authorization, body.
    #[derive(Debug, Clone)]
    struct Asked {
        line: String,
        authorization: String,
        content_type: String,
        body: String,
    }

    /// An API server on loopback (plain HTTP, keep-alive) that answers each request with what
    /// `answer` says for its request line, and records what it was asked.
    fn fake_api_server(
        answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static,
    ) -> (String, Arc<Mutex<Vec<Asked>>>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (log, answer) = (Arc::clone(&asked), Arc::new(answer));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, answer) = (Arc::clone(&log), Arc::clone(&answer));
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut writer = stream;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let (mut length, mut authorization, mut content_type) =
                            (0, String::new(), String::new());
                        loop {
                            let mut header = String::new();
                            reader.read_line(&mut header).unwrap();
                            let header = header.trim_end();
                            if header.is_empty() {
                                break;
                            }
                            let (name, value) = header.split_once(": ").unwrap();
                            match name.to_ascii_lowercase().as_str() {
                                "content-length" => length = value.parse().unwrap(),
                                "authorization" => authorization = value.to_string(),
                                "content-type" => content_type = value.to_string(),
                                _ => {}
                            }
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        let line = line.trim_end().to_string();
                        let (code, text) = answer(&line);
                        log.lock().unwrap().push(Asked {
                            line,
                            authorization,
                            content_type,
                            body: String::from_utf8(body).unwrap(),
                        });
                        write!(
                            writer,
                            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                            text.len()
                        )
                        .unwrap();
                    }
                });
            }
        });
        (url, asked)
    }

    fn not_found() -> (u16, String) {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "the server could not find the requested resource", "reason": "NotFound",
            "code": 404});
        (404, status.to_string())
    }

    fn client_of(url: &str, dir: &str) -> BlockingClient {
        let dir = std::env::temp_dir().join(format!("meshbench-k8s-{dir}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: {url}\n\
                 users:\n- name: u\n  user:\n    token: secret-token\ncontexts:\n- name: t\n  \
                 context: {{cluster: t, user: u}}\ncurrent-context: t\n"
            ),
        )
        .unwrap();
        BlockingClient::from_kubeconfig(&kubeconfig).unwrap()
    }

    #[test]
    fn documents_go_where_discovery_says_once_their_kind_is_served_with_the_token() {
        let istio = "/apis/networking.istio.io/v1beta1";
        let established = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let asks = Arc::clone(&established);
        let (url, asked) = fake_api_server(move |line| {
            let path = line.split(' ').nth(1).unwrap_or_default();
            let list = |group_version: &str, resources: Value| {
                let list = json!({"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": group_version, "resources": resources});
                (200, list.to_string())
            };
            match path {
                "/readyz" => (200, "ok".into()),
                // Istio's group is not served on the first ask (its CRD not yet established).
                p if p == istio => {
                    if asks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                        not_found()
                    } else {
                        list(
                            "networking.istio.io/v1beta1",
                            json!([{"name": "gateways", "singularName": "gateway",
                                "namespaced": true, "kind": "Gateway", "verbs": ["get", "patch"]},
                                {"name": "gateways/status", "singularName": "",
                                "namespaced": true, "kind": "Gateway", "verbs": ["get"]}]),
                        )
                    }
                }
                "/api/v1" => list(
                    "v1",
                    json!([{"name": "namespaces", "singularName": "namespace",
                        "namespaced": false, "kind": "Namespace", "verbs": ["get", "patch"]}]),
                ),
                p if p.starts_with("/api/v1/namespaces/istio-system/configmaps/") => not_found(),
                p if p.starts_with("/api/v1/namespaces/istio-system/serviceaccounts/gw/token") => {
                    let answer = json!({"apiVersion": "authentication.k8s.io/v1",
                        "kind": "TokenRequest", "spec": {"audiences": ["istio-ca"]},
                        "status": {"token": "a-token",
                            "expirationTimestamp": "2026-11-28T00:00:00Z"}});
                    (201, answer.to_string())
                }
                _ if line.starts_with("PATCH ") => (200, json!({"metadata": {}}).to_string()),
                _ => not_found(),
            }
        });
        let client = client_of(&url, "apply");
        client.ready().unwrap();
        let applied = client
            .apply_all(
                documents(
                    "apiVersion: networking.istio.io/v1beta1\nkind: Gateway\n\
                 metadata: {name: g, namespace: istio-system}\nspec: {}\n---\n\
                 apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
                )
                .unwrap(),
            )
            .unwrap();
        assert_eq!(applied, 2);
        // Known now: no second discovery of the kind.
        client
            .apply(
                &json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "Gateway",
                "metadata": {"name": "h", "namespace": "istio-system"}}),
            )
            .unwrap();
        let none = client
            .get::<k8s_openapi::api::core::v1::ConfigMap>("istio-system", "istio-ca-root-cert")
            .unwrap();
        assert!(none.is_none());
        let token = client
            .service_account_token("istio-system", "gw", "istio-ca", Duration::from_secs(86400))
            .unwrap();
        assert_eq!(token, "a-token");

        let asked = asked.lock().unwrap().clone();
        assert!(
            asked
                .iter()
                .all(|a| a.authorization == "Bearer secret-token"),
            "{asked:?}"
        );
        let lines: Vec<&str> = asked.iter().map(|a| a.line.as_str()).collect();
        let mut patches: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("PATCH "))
            .collect();
        patches.sort_unstable();
        // The plural and scope from the lists above; server-side apply, forced, as meshbench.
        assert_eq!(
            patches,
            [
                "PATCH /api/v1/namespaces/x?&force=true&fieldManager=meshbench HTTP/1.1",
                "PATCH /apis/networking.istio.io/v1beta1/namespaces/istio-system/gateways/g?&force=true&fieldManager=meshbench HTTP/1.1",
                "PATCH /apis/networking.istio.io/v1beta1/namespaces/istio-system/gateways/h?&force=true&fieldManager=meshbench HTTP/1.1",
            ],
            "{lines:?}"
        );
        let applies = asked.iter().filter(|a| a.line.starts_with("PATCH "));
        for a in applies {
            assert_eq!(a.content_type, "application/apply-patch+yaml", "{a:?}");
        }
        assert_eq!(
            established.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "refused once, then listed once: {lines:?}"
        );
        let token_asked = asked.iter().find(|a| a.line.starts_with("POST ")).unwrap();
        let body: Value = serde_json::from_str(&token_asked.body).unwrap();
        assert_eq!(body["spec"]["audiences"], json!(["istio-ca"]));
        assert_eq!(body["spec"]["expirationSeconds"], 86400);
    }

    #[test]
    fn a_kind_never_served_is_named_and_a_refusal_carries_the_servers_message() {
        let (url, _) = fake_api_server(|line| {
            if line.starts_with("PATCH ") {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "Secret \"s\" is invalid", "reason": "Invalid", "code": 422});
                (422, status.to_string())
            } else if line.starts_with("GET /api/v1 ") {
                let list = json!({"kind": "APIResourceList", "groupVersion": "v1",
                    "resources": [{"name": "secrets", "singularName": "secret",
                    "namespaced": true, "kind": "Secret", "verbs": ["patch"]}]});
                (200, list.to_string())
            } else {
                not_found()
            }
        });
        let client = client_of(&url, "refused");
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "n"}});
        match client.apply(&secret) {
            Err(ApiError::Refused {
                what,
                code,
                message,
            }) => {
                assert_eq!(what, "Secret s (v1, namespace n)");
                assert_eq!((code, message.as_str()), (422, "Secret \"s\" is invalid"));
            }
            other => panic!("{other:?}"),
        }
        let unscoped = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert!(matches!(
            client.apply(&unscoped),
            Err(ApiError::Incomplete {
                field: "metadata.namespace",
                ..
            })
        ));
    }

    /// A stop asked `after` from now, and when it was asked.
    fn stop_after(after: Duration, hurry: bool) -> (Stop, std::thread::JoinHandle<Instant>) {
        let stop = Stop::new();
        let asker = stop.clone();
        let asked = std::thread::spawn(move || {
            std::thread::sleep(after);
            match hurry {
                true => asker.hurry(),
                false => asker.request(),
            }
            Instant::now()
        });
        (stop, asked)
    }

    /// How long after the stop a wait that began now ended.
    fn ended_after(asked: std::thread::JoinHandle<Instant>) -> Duration {
        let ended = Instant::now();
        ended.saturating_duration_since(asked.join().unwrap())
    }

    fn pending_pod(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "load",
                "labels": {"app": "backend"}, "creationTimestamp": "2026-11-27T10:00:00Z"},
            "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "message": "0/0 nodes are available"}]}})
    }

    /// Issue 47: pods that stay Pending (no node takes them) and a rollout that never ends
    /// keep no one waiting after a stop: each wait ends within a tenth of a second of it, and
    /// says it was stopped (not a success, not a timeout).
    #[test]
    fn the_waits_for_pods_and_rollouts_end_on_a_stop() {
        use k8s_openapi::api::apps::v1::Deployment;
        let (url, _) = fake_api_server(|line| {
            let path = line.split(' ').nth(1).unwrap_or_default();
            let list = |items: Vec<Value>| {
                let l = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                    "items": items});
                (200, l.to_string())
            };
            if path.starts_with("/api/v1/namespaces/load/pods") {
                list(vec![pending_pod("agents-0"), pending_pod("backend-1")])
            } else if path.starts_with("/apis/apps/v1/namespaces/load/deployments/backend") {
                let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "backend", "namespace": "load", "generation": 1},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "backend"}},
                        "template": {}},
                    "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}});
                (200, d.to_string())
            } else {
                not_found()
            }
        });
        let client = client_of(&url, "waits");
        let objects = crate::DistributedRun {
            name: "agents".into(),
            namespace: "load".into(),
            agents: 1,
            image: "meshbench:test".into(),
            reach: crate::AgentsReach::Coordinator("127.0.0.1:7700".into()),
            token: "0123456789abcdef0123".into(),
            experiment_file_name: "experiment.yaml".into(),
            experiment: "name: x\n".into(),
            cpu: None,
            memory: None,
            sysctls: Vec::new(),
            anti_affinity: crate::AntiAffinity::None,
            pod: crate::render::PodExtras::default(),
        }
        .render();

        let (stop, asked) = stop_after(Duration::from_millis(700), false);
        let waited = client.wait_agents(&objects, 1, Duration::from_secs(300), &stop, |_| {});
        let after = ended_after(asked);
        assert!(
            matches!(
                waited,
                Err(crate::ClusterError::Stopped {
                    ready: 0,
                    wanted: 1
                })
            ),
            "{waited:?}"
        );
        assert!(
            after < Duration::from_millis(100),
            "{after:?} after the stop"
        );

        let (stop, asked) = stop_after(Duration::from_millis(700), false);
        let rolled = client.wait_rollout("load", "backend", Duration::from_secs(300), &stop);
        let after = ended_after(asked);
        assert!(
            matches!(&rolled, Err(crate::rollout::RolloutError::Stopped(d)) if d == "load/backend"),
            "{rolled:?}"
        );
        assert!(
            after < Duration::from_millis(100),
            "{after:?} after the stop"
        );
        let _: Option<Deployment> = client.get("load", "backend").unwrap();
    }

    /// The restore after a stop: its deletions are asked whatever the stop says (a second
    /// deletion of a namespace already going, which the API server answers 409, is no error),
    /// the wait for the namespace to go is bounded, and a hurried stop ends that wait at once.
    #[test]
    fn a_restore_deletes_after_a_stop_and_only_a_hurry_ends_its_wait() {
        use crate::undo::{restore, Undo, UndoError};
        let (url, asked) = fake_api_server(|line| {
            let path = line.split(' ').nth(1).unwrap_or_default();
            match line.split(' ').next().unwrap_or_default() {
                "GET" if path.starts_with("/api/v1/namespaces/going") => {
                    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "going", "deletionTimestamp": "2026-11-27T10:00:00Z"},
                        "status": {"phase": "Terminating"}});
                    (200, ns.to_string())
                }
                "DELETE" if path.starts_with("/api/v1/namespaces/going/pods") => {
                    let l = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                        "items": []});
                    (200, l.to_string())
                }
                "DELETE" if path.starts_with("/api/v1/namespaces/going") => {
                    let status = json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "reason": "Conflict", "code": 409,
                        "message": "The system is ensuring all content is removed"});
                    (409, status.to_string())
                }
                _ => not_found(),
            }
        });
        let client = client_of(&url, "restore");
        let undos = [Undo::DeleteNamespace {
            name: "going".into(),
        }];
        // Stopped before it began: the deletions are asked all the same; the wait is bounded.
        let stop = Stop::new();
        stop.request();
        let began = Instant::now();
        let restored = restore(&client, &undos, Duration::from_millis(600), &stop, |_| {});
        assert!(
            matches!(&restored, Err(UndoError::NotGone { name, .. }) if name == "going"),
            "{restored:?}"
        );
        assert!(began.elapsed() >= Duration::from_millis(600));
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
        let deletes = |asked: &Arc<Mutex<Vec<Asked>>>| {
            asked
                .lock()
                .unwrap()
                .iter()
                .filter(|a| a.line.starts_with("DELETE "))
                .count()
        };
        assert_eq!(deletes(&asked), 2, "the namespace, then its pods");
        // Hurried while it waits: it ends at once, the deletions asked.
        let (stop, hurried) = stop_after(Duration::from_millis(500), true);
        let restored = restore(&client, &undos, Duration::from_secs(300), &stop, |_| {});
        let after = ended_after(hurried);
        assert!(
            matches!(&restored, Err(UndoError::NotWaited { name }) if name == "going"),
            "{restored:?}"
        );
        assert!(
            after < Duration::from_millis(100),
            "{after:?} after the hurry"
        );
        assert_eq!(deletes(&asked), 4);
    }

    /// A run's scratch directory is removed with what is in it, asking the API server nothing;
    /// one already gone is no error.
    #[test]
    fn a_restore_removes_the_runs_scratch_directory() {
        use crate::undo::{restore, Undo};
        let (url, asked) = fake_api_server(|_| not_found());
        let client = client_of(&url, "scratch");
        let path = std::env::temp_dir().join(format!("meshbench-cluster-t{}", std::process::id()));
        std::fs::create_dir_all(path.join("gateway")).unwrap();
        std::fs::write(path.join("gateway/targets.txt"), "GET /\n").unwrap();
        let undos = [Undo::RemoveDir { path: path.clone() }];
        let mut said = Vec::new();
        restore(&client, &undos, Duration::from_secs(1), &Stop::new(), |s| {
            said.push(s.to_string())
        })
        .unwrap();
        assert!(!path.exists());
        assert_eq!(said, [format!("removed {}", path.display())]);
        restore(
            &client,
            &undos,
            Duration::from_secs(1),
            &Stop::new(),
            |_| {},
        )
        .unwrap();
        assert!(asked.lock().unwrap().is_empty());
    }

    /// A borrowed container's resources are put back whole by a JSON patch (the container's
    /// name tested at its index, then `resources` replaced), then its rollout is waited for;
    /// one whose Deployment is gone is nothing to put back.
    #[test]
    fn a_restore_puts_a_borrowed_containers_resources_back_by_json_patch() {
        use crate::borrowed::WorkloadKind;
        use crate::undo::{restore, Undo};
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "envoy", "namespace": "projectcontour", "generation": 3},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "envoy"}},
                "template": {"spec": {"containers": [
                    {"name": "shutdown-manager", "resources": {}},
                    {"name": "envoy", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}]}}},
            "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 1,
                "availableReplicas": 1, "readyReplicas": 1}});
        let pods = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
            {"metadata": {"name": "envoy-1", "namespace": "projectcontour"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}]});
        let (url, asked) = fake_api_server(move |line| {
            let path = line.split(' ').nth(1).unwrap_or_default();
            match line.split(' ').next().unwrap_or_default() {
                "GET" | "PATCH"
                    if path.starts_with(
                        "/apis/apps/v1/namespaces/projectcontour/deployments/envoy",
                    ) =>
                {
                    (200, deployment.to_string())
                }
                "GET" if path.starts_with("/api/v1/namespaces/projectcontour/pods") => {
                    (200, pods.to_string())
                }
                _ => not_found(),
            }
        });
        let client = client_of(&url, "borrowed");
        let before = json!({"requests": {"memory": "64Mi"}});
        let undo = |name: &str| Undo::RestoreResources {
            namespace: "projectcontour".into(),
            kind: WorkloadKind::Deployment,
            name: name.into(),
            container: "envoy".into(),
            before: before.clone(),
        };
        let mut said = Vec::new();
        restore(
            &client,
            &[undo("gone"), undo("envoy")],
            Duration::from_secs(5),
            &Stop::new(),
            |s| said.push(s.to_string()),
        )
        .unwrap();
        let asked = asked.lock().unwrap();
        let patches: Vec<&Asked> = asked
            .iter()
            .filter(|a| a.line.starts_with("PATCH "))
            .collect();
        assert_eq!(patches.len(), 1, "only the Deployment that is there");
        assert_eq!(patches[0].content_type, "application/json-patch+json");
        let body: serde_json::Value = serde_json::from_str(&patches[0].body).unwrap();
        assert_eq!(
            body,
            json!([
                {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "envoy"},
                {"op": "add", "path": "/spec/template/spec/containers/1/resources", "value": before},
            ])
        );
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("put back the resources of Deployment projectcontour/envoy (container envoy) as they were"),
            "{said:?}"
        );
    }
}
