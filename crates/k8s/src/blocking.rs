//! The project's Kubernetes client for synchronous callers: kube-rs behind a blocking façade.
//! The lab's control plane for `gateway.type: istio` (an API server on loopback, Istio's CRDs,
//! generated Gateways, VirtualServices and Secrets) is synchronous code, like the rest of the
//! lab; it speaks to its API server through this, not through a second client of its own.
//!
//! A [`BlockingClient`] owns a current-thread tokio runtime and a kube [`Client`]; each call
//! runs to completion on that runtime, every request bounded in time ([`CONNECT_WITHIN`],
//! [`REQUEST_WITHIN`]). Objects the caller builds are typed (k8s-openapi); documents read from
//! files are applied as [`DynamicObject`]s whose resource (group, version, kind, plural and
//! scope) the API server itself names through discovery, asked once per kind and remembered:
//! no plural is derived from a kind here. A custom resource whose definition was applied a
//! moment ago is not served until the API server has established it, so its apply waits for
//! that, at most [`ESTABLISH_WITHIN`].
//!
//! One call leaves something running past its return: [`BlockingClient::port_forward`] gives
//! a [`Forward`], a local address served by a thread of its own (see `crate::forward`).

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, Resource, TypeMeta};
use kube::discovery::Scope;
use kube::Client;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::cluster::config_from;
use crate::forward::Forward;

/// The field manager of every apply (the same as the engine's objects').
const MANAGER: &str = "meshbench";
/// Connecting to the API server: it runs on this machine or one near it.
pub const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// One request, answer included (a CRD of Istio's is a few hundred KiB).
pub const REQUEST_WITHIN: Duration = Duration::from_secs(60);
/// How long a custom resource may be refused (not served, or 404) after its definition was
/// applied, while the API server establishes it.
pub const ESTABLISH_WITHIN: Duration = Duration::from_secs(30);
/// Applies in flight at once in [`BlockingClient::apply_all`].
pub const APPLIERS: usize = 4;
/// Between two tries of a resource not yet served.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Why the API server did not do what was asked.
#[derive(Debug, Error)]
pub enum ApiError {
    #[error("kubeconfig: {0}")]
    Config(String),
    #[error("the Kubernetes client's runtime did not start: {0}")]
    Runtime(std::io::Error),
    /// The API server answered with a failure `Status`.
    #[error("the Kubernetes API server refused {what}: {code}: {message}")]
    Refused {
        what: String,
        code: u16,
        message: String,
    },
    /// No answer that could be read (connection, TLS, an answer that is not the API's).
    #[error("the Kubernetes API server refused {what}: {source}")]
    Request {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("the Kubernetes API server did not answer {what} within {} s", within.as_secs())]
    TimedOut { what: String, within: Duration },
    /// The API server does not serve this kind (a CRD not applied, or not established).
    #[error("the Kubernetes API server does not serve {what} within {} s: {reason}", within.as_secs())]
    NotServed {
        what: String,
        within: Duration,
        reason: String,
    },
    #[error("a document to apply is not YAML: {0}")]
    NotYaml(String),
    #[error("an object to apply has no {field}: {object}")]
    Incomplete { field: &'static str, object: String },
    #[error("the Kubernetes API server gave {what} no status.token")]
    NoToken { what: String },
    /// A port-forward asked of a pod that is not there or not running.
    #[error("cannot forward to {what}: the pod is {state}")]
    PodNotRunning { what: String, state: String },
    /// No local address to forward from.
    #[error("no local address for a port-forward: {0}")]
    Listen(std::io::Error),
}

impl ApiError {
    fn from_kube(what: &str, e: kube::Error) -> ApiError {
        match e {
            kube::Error::Api(status) => ApiError::Refused {
                what: what.to_string(),
                code: status.code,
                message: status.message,
            },
            other => ApiError::Request {
                what: what.to_string(),
                source: Box::new(other),
            },
        }
    }

    /// A resource that is not (yet) there: a 404, or a kind discovery does not list.
    fn is_not_found(&self) -> bool {
        match self {
            ApiError::Refused { code, .. } => *code == 404,
            ApiError::Request { source, .. } => matches!(**source, kube::Error::Discovery(_)),
            ApiError::Config(_)
            | ApiError::Runtime(_)
            | ApiError::TimedOut { .. }
            | ApiError::NotServed { .. }
            | ApiError::NotYaml(_)
            | ApiError::Incomplete { .. }
            | ApiError::NoToken { .. }
            | ApiError::PodNotRunning { .. }
            | ApiError::Listen(_) => false,
        }
    }
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

/// A deletion whose object was already gone is done.
fn already_gone<T>(deleted: Result<T, ApiError>) -> Result<(), ApiError> {
    match deleted {
        Ok(_) | Err(ApiError::Refused { code: 404, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every document of a YAML stream (`---` separated), empty ones left out.
pub fn documents(yaml: &str) -> Result<Vec<Value>, ApiError> {
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e: serde_yaml_ng::Error| ApiError::NotYaml(e.to_string()))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// One request, bounded by [`REQUEST_WITHIN`].
async fn bounded<T>(
    what: &str,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(REQUEST_WITHIN, request).await {
        Ok(answer) => answer.map_err(|e| ApiError::from_kube(what, e)),
        Err(_) => Err(ApiError::TimedOut {
            what: what.to_string(),
            within: REQUEST_WITHIN,
        }),
    }
}

/// A document's type, name and namespace, as the API needs them.
struct Identity {
    gvk: GroupVersionKind,
    name: String,
    namespace: Option<String>,
}

impl Identity {
    fn of(object: &Value) -> Result<Identity, ApiError> {
        let field = |v: &Value, field: &'static str| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| ApiError::Incomplete {
                    field,
                    object: object.to_string(),
                })
        };
        let types = TypeMeta {
            api_version: field(&object["apiVersion"], "apiVersion")?,
            kind: field(&object["kind"], "kind")?,
        };
        let gvk = GroupVersionKind::try_from(&types).map_err(|_| ApiError::Incomplete {
            field: "valid apiVersion",
            object: object.to_string(),
        })?;
        Ok(Identity {
            gvk,
            name: field(&object["metadata"]["name"], "metadata.name")?,
            namespace: object["metadata"]["namespace"].as_str().map(str::to_string),
        })
    }

    /// How errors name it: `Kind name (apiVersion, namespace ns)`.
    fn describe(&self) -> String {
        let ns = self
            .namespace
            .as_ref()
            .map_or(String::new(), |ns| format!(", namespace {ns}"));
        format!(
            "{} {} ({}{ns})",
            self.gvk.kind,
            self.name,
            self.gvk.api_version()
        )
    }
}

impl Shared {
    /// The resource serving `gvk` and its scope, from discovery (once per kind); a kind not
    /// served yet is asked again until `deadline`.
    async fn resource(
        &self,
        gvk: &GroupVersionKind,
        what: &str,
        deadline: Instant,
    ) -> Result<(ApiResource, Scope), ApiError> {
        if let Some(known) = self.known(gvk) {
            return Ok(known);
        }
        loop {
            match bounded(what, kube::discovery::pinned_kind(&self.client, gvk)).await {
                Ok((resource, capabilities)) => {
                    let found = (resource, capabilities.scope);
                    self.resources
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(gvk.clone(), found.clone());
                    return Ok(found);
                }
                Err(e) if e.is_not_found() && Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                Err(e) if e.is_not_found() => {
                    return Err(ApiError::NotServed {
                        what: what.to_string(),
                        within: ESTABLISH_WITHIN,
                        reason: e.to_string(),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn known(&self, gvk: &GroupVersionKind) -> Option<(ApiResource, Scope)> {
        self.resources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(gvk)
            .cloned()
    }

    /// Server-side apply of one document, its resource discovered; a 404 (a resource just
    /// established) is tried again until [`ESTABLISH_WITHIN`] has passed.
    async fn apply(&self, object: &Value) -> Result<(), ApiError> {
        let id = Identity::of(object)?;
        let what = id.describe();
        let deadline = Instant::now() + ESTABLISH_WITHIN;
        let (resource, scope) = self.resource(&id.gvk, &what, deadline).await?;
        let namespace = match scope {
            Scope::Namespaced => {
                Some(
                    id.namespace
                        .as_deref()
                        .ok_or_else(|| ApiError::Incomplete {
                            field: "metadata.namespace",
                            object: object.to_string(),
                        })?,
                )
            }
            Scope::Cluster => None,
        };
        self.apply_as(&resource, namespace, &id.name, &what, object, deadline)
            .await
    }

    /// Server-side apply of `body` as `resource` (namespaced when `namespace` is given).
    async fn apply_as(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        what: &str,
        body: &(impl Serialize + std::fmt::Debug),
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        };
        let params = PatchParams::apply(MANAGER).force();
        loop {
            match bounded(what, api.patch(name, &params, &Patch::Apply(body))).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() && Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ApiError::Runtime)?;
        let (client, config) = runtime.block_on(async {
            let mut config = config_from(kubeconfig).await.map_err(ApiError::Config)?;
            config.connect_timeout = Some(CONNECT_WITHIN);
            config.read_timeout = Some(REQUEST_WITHIN);
            config.write_timeout = Some(REQUEST_WITHIN);
            // No retries hidden under a call: what is waited for, and how long, is said here.
            config.default_retry = false;
            let client =
                Client::try_from(config.clone()).map_err(|e| ApiError::Config(e.to_string()))?;
            Ok::<_, ApiError>((client, config))
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

    /// Whether the API server says it is ready (`GET /readyz` answers 200).
    pub fn ready(&self) -> Result<(), ApiError> {
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| ApiError::Config(e.to_string()))?;
        self.runtime
            .block_on(bounded("/readyz", self.shared.client.request_text(request)))
            .map(drop)
    }

    /// Server-side apply (field manager `meshbench`, forced) of one document: any kind the
    /// API server serves, named by its `apiVersion`, `kind` and `metadata`.
    pub fn apply(&self, object: &Value) -> Result<(), ApiError> {
        self.runtime.block_on(self.shared.apply(object))
    }

    /// Applies every document, [`APPLIERS`] at a time, each in the order given within its
    /// share; returns how many. The first failure is the answer.
    pub fn apply_all(&self, objects: Vec<Value>) -> Result<usize, ApiError> {
        let count = objects.len();
        let share = count.div_ceil(APPLIERS).max(1);
        let mut shares = Vec::new();
        let mut rest = objects;
        while !rest.is_empty() {
            let tail = rest.split_off(share.min(rest.len()));
            shares.push(std::mem::replace(&mut rest, tail));
        }
        self.runtime.block_on(async {
            let mut appliers = tokio::task::JoinSet::new();
            for share in shares {
                let shared = Arc::clone(&self.shared);
                appliers.spawn(async move {
                    for object in &share {
                        shared.apply(object).await?;
                    }
                    Ok::<(), ApiError>(())
                });
            }
            while let Some(done) = appliers.join_next().await {
                match done {
                    Ok(applied) => applied?,
                    Err(e) => std::panic::resume_unwind(e.into_panic()),
                }
            }
            Ok(count)
        })
    }

    /// Server-side apply of an object built here, as its k8s-openapi type names it.
    pub fn apply_typed<K>(&self, object: &K) -> Result<(), ApiError>
    where
        K: Resource<DynamicType = ()> + Serialize + std::fmt::Debug,
    {
        let resource = ApiResource::erase::<K>(&());
        let meta = object.meta();
        let name = meta.name.clone().ok_or_else(|| ApiError::Incomplete {
            field: "metadata.name",
            object: format!("{object:?}"),
        })?;
        let what = format!("{} {name}", resource.kind);
        // A typed object needs no establishing: its kind is built in.
        let deadline = Instant::now();
        self.runtime.block_on(self.shared.apply_as(
            &resource,
            meta.namespace.as_deref(),
            &name,
            &what,
            object,
            deadline,
        ))
    }

    /// Server-side apply of the `status` of a namespaced object built here (what a kubelet
    /// reports of a pod it runs, for a pod no kubelet runs).
    pub fn apply_status<K>(&self, object: &K) -> Result<(), ApiError>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Serialize
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let meta = object.meta();
        let incomplete = |field| ApiError::Incomplete {
            field,
            object: format!("{object:?}"),
        };
        let name = meta
            .name
            .clone()
            .ok_or_else(|| incomplete("metadata.name"))?;
        let namespace = meta
            .namespace
            .clone()
            .ok_or_else(|| incomplete("metadata.namespace"))?;
        let api: Api<K> = Api::namespaced(self.shared.client.clone(), &namespace);
        let what = format!("the status of {} {namespace}/{name}", K::kind(&()));
        let params = PatchParams::apply(MANAGER).force();
        self.runtime
            .block_on(bounded(
                &what,
                api.patch_status(&name, &params, &Patch::Apply(object)),
            ))
            .map(drop)
    }

    /// One namespaced object, None when there is none.
    pub fn get<K>(&self, namespace: &str, name: &str) -> Result<Option<K>, ApiError>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.shared.client.clone(), namespace);
        let what = format!("{} {namespace}/{name}", K::kind(&()));
        self.runtime.block_on(bounded(&what, api.get_opt(name)))
    }

    /// A cluster-scoped object (a Namespace, a CustomResourceDefinition), None when there is
    /// none.
    pub fn get_cluster_scoped<K>(&self, name: &str) -> Result<Option<K>, ApiError>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.shared.client.clone());
        let what = format!("{} {name}", K::kind(&()));
        self.runtime.block_on(bounded(&what, api.get_opt(name)))
    }

    /// Every cluster-scoped object of a kind.
    pub fn list_cluster_scoped<K>(&self) -> Result<Vec<K>, ApiError>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.shared.client.clone());
        let what = format!("every {}", K::kind(&()));
        self.runtime
            .block_on(bounded(&what, api.list(&ListParams::default())))
            .map(|l| l.items)
    }

    /// The namespaced objects of a kind whose labels match `selector` (`k=v,...`).
    pub fn list<K>(&self, namespace: &str, selector: &str) -> Result<Vec<K>, ApiError>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.shared.client.clone(), namespace);
        let what = format!("{} in {namespace} ({selector})", K::kind(&()));
        self.runtime
            .block_on(bounded(
                &what,
                api.list(&ListParams::default().labels(selector)),
            ))
            .map(|l| l.items)
    }

    /// Deletes a namespace (and so everything in it); one already gone is not an error.
    pub fn delete_namespace(&self, name: &str) -> Result<(), ApiError> {
        let api: Api<Namespace> = Api::all(self.shared.client.clone());
        let what = format!("deleting namespace {name}");
        already_gone(self.runtime.block_on(bounded(
            &what,
            api.delete(name, &DeleteParams::background()),
        )))
    }

    /// Deletes the pods of `namespace` that `selector` matches, given `grace` to end.
    pub fn delete_pods(
        &self,
        namespace: &str,
        selector: &str,
        grace: Duration,
    ) -> Result<(), ApiError> {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), namespace);
        let what = format!("deleting the pods in {namespace} ({selector})");
        let params = DeleteParams::default().grace_period(grace.as_secs() as u32);
        already_gone(self.runtime.block_on(bounded(
            &what,
            api.delete_collection(&params, &ListParams::default().labels(selector)),
        )))
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

    /// Waits for the agent pods ([`crate::Cluster::wait_ready`]).
    pub fn wait_agents(
        &self,
        o: &crate::Objects,
        wanted: usize,
        timeout: Duration,
        go_on: impl Fn() -> bool,
        progress: impl FnMut(usize),
    ) -> Result<Vec<crate::AgentPod>, crate::ClusterError> {
        self.runtime.block_on(
            self.as_cluster()
                .wait_ready(o, wanted, timeout, go_on, progress),
        )
    }

    /// A token for ServiceAccount `account` in `namespace`, for `audience`, valid for
    /// `lifetime`, as a pod's projected volume holds it (a TokenRequest).
    pub fn service_account_token(
        &self,
        namespace: &str,
        account: &str,
        audience: &str,
        lifetime: Duration,
    ) -> Result<String, ApiError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.shared.client.clone(), namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![audience.to_string()],
                expiration_seconds: Some(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX)),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let what = format!("a token for {namespace}/{account}");
        let answer = self.runtime.block_on(bounded(
            &what,
            api.create_token_request(account, &PostParams::default(), &request),
        ))?;
        answer
            .status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::NoToken { what })
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
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_names_its_group_version_kind_and_namespace_and_nothing_is_guessed() {
        let vs = json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "a.com", "namespace": "istio-system"}});
        let id = Identity::of(&vs).unwrap();
        assert_eq!(
            id.gvk,
            GroupVersionKind::gvk("networking.istio.io", "v1beta1", "VirtualService")
        );
        assert_eq!(
            id.describe(),
            "VirtualService a.com (networking.istio.io/v1beta1, namespace istio-system)"
        );
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
        let id = Identity::of(&ns).unwrap();
        assert_eq!(id.gvk, GroupVersionKind::gvk("", "v1", "Namespace"));
        assert_eq!(id.namespace, None);
        assert_eq!(id.describe(), "Namespace x (v1)");
        for (object, field) in [
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}}),
                "metadata.name",
            ),
            (
                json!({"apiVersion": "v1", "metadata": {"name": "s"}}),
                "kind",
            ),
            (
                json!({"kind": "Secret", "metadata": {"name": "s"}}),
                "apiVersion",
            ),
        ] {
            match Identity::of(&object) {
                Err(ApiError::Incomplete { field: f, .. }) => assert_eq!(f, field, "{object}"),
                Ok(_) => panic!("{object}: accepted"),
                Err(e) => panic!("{object}: {e}"),
            }
        }
    }

    #[test]
    fn a_yaml_stream_is_its_documents_without_the_empty_ones() {
        let docs = documents("---\na: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs, [json!({"a": 1}), json!({"b": 2})]);
        assert!(matches!(documents("a: [1\n"), Err(ApiError::NotYaml(_))));
    }

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
}
