//! Server-side apply (field manager [`MANAGER`], forced) through the
//! [`BlockingClient`]: of documents (JSON values, from a YAML file or [`to_value`]), whose
//! resource discovery names, a custom resource's retried while the API server establishes it;
//! of typed objects, whose type names its resource; and of a pod's status. A document is
//! deleted the same way ([`BlockingClient::delete`]): what a change applied, taken back.
//!
//! [`to_value`]: crate::objects::to_value

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind, Resource, TypeMeta};
use kube::discovery::Scope;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::error::{already_gone, bounded};
use super::{ApiError, BlockingClient, Shared, APPLIERS, ESTABLISH_WITHIN, RETRY_EVERY};
use crate::names::MANAGER;
use crate::objects::CustomResource;

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

    /// Deletes the object one document names, its resource discovered; one already gone is
    /// no error.
    async fn delete(&self, object: &Value) -> Result<(), ApiError> {
        let id = Identity::of(object)?;
        let what = id.describe();
        let (resource, scope) = self.resource(&id.gvk, &what, Instant::now()).await?;
        let api: Api<DynamicObject> = match (scope, id.namespace.as_deref()) {
            (Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(self.client.clone(), ns, &resource)
            }
            (Scope::Namespaced, None) => {
                return Err(ApiError::Incomplete {
                    field: "metadata.namespace",
                    object: object.to_string(),
                })
            }
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), &resource),
        };
        already_gone(bounded(&what, api.delete(&id.name, &DeleteParams::default())).await)
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
    /// Server-side apply (field manager `meshbench`, forced) of one document: any kind the
    /// API server serves, named by its `apiVersion`, `kind` and `metadata`.
    pub fn apply(&self, object: &Value) -> Result<(), ApiError> {
        self.runtime.block_on(self.shared.apply(object))
    }

    /// Deletes the object one document names (any kind the API server serves); one already
    /// gone is no error.
    pub fn delete(&self, object: &Value) -> Result<(), ApiError> {
        self.runtime.block_on(self.shared.delete(object))
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
        // A typed object needs no establishing: its kind is built in.
        self.apply_known(object, Instant::now())
    }

    /// Server-side apply of a custom resource built here ([`crate::objects`]), as its type
    /// names it; while the API server does not serve its kind yet (its definition applied a
    /// moment ago), tried again, at most [`ESTABLISH_WITHIN`].
    pub fn apply_custom<K>(&self, object: &K) -> Result<(), ApiError>
    where
        K: CustomResource + Resource<DynamicType = ()> + std::fmt::Debug,
    {
        self.apply_known(object, Instant::now() + ESTABLISH_WITHIN)
    }

    /// Server-side apply of `object` as its type names it, a 404 tried again until `deadline`.
    fn apply_known<K>(&self, object: &K, deadline: Instant) -> Result<(), ApiError>
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
}
