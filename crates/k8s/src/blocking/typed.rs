//! The [`BlockingClient`]'s calls on typed objects of kinds it knows at compile time: one
//! object or a list of them, read; a namespace or pods, deleted (what is already gone is not an
//! error); a ServiceAccount's token; a container's log, read through the API server.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::core::Resource;
use serde::de::DeserializeOwned;

use super::error::{already_gone, bounded};
use super::{ApiError, BlockingClient};

impl BlockingClient {
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

    /// The log of `container` in pod `namespace/pod` over the last `since` (whole seconds,
    /// at least one), as the kubelet keeps it, read through the API server.
    pub fn container_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        since: Duration,
    ) -> Result<String, ApiError> {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), namespace);
        let what = format!("the log of {namespace}/{pod}/{container}");
        let params = LogParams {
            container: Some(container.to_string()),
            since_seconds: Some(since.as_secs().max(1) as i64),
            ..LogParams::default()
        };
        self.runtime
            .block_on(bounded(&what, api.logs(pod, &params)))
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

    /// Deletes a namespace (and so everything in it); one already gone, or already being
    /// deleted (the API server answers a second deletion with 409 until it is empty), is not
    /// an error.
    pub fn delete_namespace(&self, name: &str) -> Result<(), ApiError> {
        let api: Api<Namespace> = Api::all(self.shared.client.clone());
        let what = format!("deleting namespace {name}");
        match self.runtime.block_on(bounded(
            &what,
            api.delete(name, &DeleteParams::background()),
        )) {
            Err(ApiError::Refused { code: 409, .. }) => Ok(()),
            deleted => already_gone(deleted),
        }
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
}
