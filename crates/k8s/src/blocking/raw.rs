//! Requests the typed calls cannot make: an object read as the API server holds it (every
//! field, whatever this crate's Kubernetes types know), and a JSON patch (RFC 6902), which
//! changes exactly the paths it names. Both are what a workload the run does not own needs
//! ([`crate::borrowed`]): its container's `resources` read whole before a change, and set
//! back whole after it, with no merge that would leave a field the run added.

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
