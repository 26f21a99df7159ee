//! Why a call of the [`BlockingClient`](super::BlockingClient) failed, and the bound every
//! request is made under: an [`ApiError`] names what was asked (`Kind name (apiVersion,
//! namespace ns)`) and the API server's answer, or that there was none in time.

use std::future::Future;
use std::time::Duration;

use thiserror::Error;

use crate::cluster::ConfigError;

/// One request, answer included (a CRD of Istio's is a few hundred KiB).
pub const REQUEST_WITHIN: Duration = Duration::from_secs(60);

/// Why the API server did not do what was asked.
#[derive(Debug, Error)]
pub enum ApiError {
    #[error("kubeconfig: {0}")]
    Config(ConfigError),
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
    pub(super) fn from_kube(what: &str, e: kube::Error) -> ApiError {
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
    pub(super) fn is_not_found(&self) -> bool {
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

/// A deletion whose object was already gone is done.
pub(super) fn already_gone<T>(deleted: Result<T, ApiError>) -> Result<(), ApiError> {
    match deleted {
        Ok(_) | Err(ApiError::Refused { code: 404, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// One request, bounded by [`REQUEST_WITHIN`].
pub(super) async fn bounded<T>(
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
