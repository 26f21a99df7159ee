//! Requests the typed calls cannot make: an object read as the API server holds it (every
//! field, whatever this crate's Kubernetes types know), and a JSON patch (RFC 6902), which
//! changes exactly the paths it names. Both are what a workload the run does not own needs
//! ([`crate::borrowed`]): its container's `resources` read whole before a change, and set
//! back whole after it, with no merge that would leave a field the run added. And a page
//! through the API server's proxies ([`BlockingClient::get_through`]): a kubelet's
//! `/metrics/cadvisor` by the node proxy, a Prometheus Service's API by the service proxy,
//! whatever their answer's status and type.

use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;

use super::error::{already_gone, bounded};
use super::{ApiError, BlockingClient};

impl BlockingClient {
    /// The object at `path` (`/apis/apps/v1/namespaces/NS/deployments/NAME`), as JSON; None
    /// when there is none.
    pub fn get_raw(&self, path: &str, what: &str) -> Result<Option<Value>, ApiError> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .expect("a path makes a request");
        let client = self.shared.client.clone();
        match self
            .runtime
            .block_on(bounded(what, client.request::<Value>(request)))
        {
            Ok(v) => Ok(Some(v)),
            Err(ApiError::Refused { code: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Applies the JSON patch `operations` (an array) to the object at `path`.
    pub fn json_patch(&self, path: &str, what: &str, operations: &Value) -> Result<(), ApiError> {
        let request = http::Request::patch(path)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(operations.to_string().into_bytes())
            .expect("a path and a body make a request");
        let client = self.shared.client.clone();
        self.runtime
            .block_on(bounded(what, client.request_text(request)))
            .map(|_| ())
    }

    /// Deletes the object at `path`; one already gone is not an error (tests' cleanup).
    pub fn delete_raw(&self, path: &str, what: &str) -> Result<(), ApiError> {
        let request = http::Request::delete(path)
            .body(Vec::new())
            .expect("a path makes a request");
        let client = self.shared.client.clone();
        already_gone(
            self.runtime
                .block_on(bounded(what, client.request_text(request))),
        )
    }
}

/// What a proxied page answered: its HTTP status and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxied {
    pub status: u16,
    pub text: String,
}

impl BlockingClient {
    /// `GET path` through the API server (`/api/v1/nodes/NODE/proxy/metrics/cadvisor`), its
    /// status and text as they are, within `within` and at most `max_bytes` read: for pages
    /// that are not the API's own objects. An answer with no HTTP status at all (the API
    /// server out of reach) is the error.
    pub fn get_through(
        &self,
        path: &str,
        what: &str,
        within: Duration,
        max_bytes: usize,
    ) -> Result<Proxied, ApiError> {
        let request = http::Request::get(path)
            .body(kube::client::Body::from(Vec::new()))
            .expect("a path makes a request");
        let client = self.shared.client.clone();
        let asked = async move {
            let response = client.send(request).await?;
            let status = response.status().as_u16();
            let mut body = response.into_body();
            let mut bytes = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| kube::Error::Service(e.into()))?;
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                    if bytes.len() > max_bytes {
                        break;
                    }
                }
            }
            bytes.truncate(max_bytes);
            Ok::<_, kube::Error>(Proxied {
                status,
                text: String::from_utf8_lossy(&bytes).into_owned(),
            })
        };
        // The timer is made inside the runtime, which it needs.
        let bounded = async move { tokio::time::timeout(within, asked).await };
        match self.runtime.block_on(bounded) {
            Ok(answer) => answer.map_err(|e| ApiError::from_kube(what, e)),
            Err(_) => Err(ApiError::TimedOut {
                what: what.to_string(),
                within,
            }),
        }
    }
}
