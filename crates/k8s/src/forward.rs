//! A pod's port reached from synchronous code as a plain local TCP address, as `kubectl
//! port-forward` gives it: for what listens only inside the pod (Envoy's admin port 15000 in
//! an Istio sidecar binds the pod's 127.0.0.1), read by code that speaks TCP and knows nothing
//! of Kubernetes.
//!
//! [`BlockingClient::port_forward`](crate::BlockingClient::port_forward) makes a [`Forward`]:
//! a listener on `127.0.0.1:0` served by a thread of its own with its own current-thread tokio
//! runtime and its own kube client (a kube client serves its requests from a task on the
//! runtime it was made in, so the [`BlockingClient`](crate::BlockingClient)'s, driven only
//! during its calls, cannot be shared). Each accepted connection opens its own port-forward
//! stream through the API server (the pod's `portforward` subresource over a WebSocket) and
//! bytes are copied both ways until either side closes; a local half-close ends the
//! connection, as kube's forwarder closes the stream then.
//!
//! The contract: a stream that cannot be opened (within [`OPEN_WITHIN`]), or that the pod's
//! side refuses (nothing listens there), closes that one local connection and is kept as
//! [`Forward::last_error`]; it never ends the listener. Dropping the [`Forward`] closes the
//! listener and every connection, and returns once the thread has ended: the address refuses
//! connections from then on.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use thiserror::Error;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::blocking::error::ApiError;
use crate::cluster::ConfigError;

/// Opening one stream: the API server's upgrade to a WebSocket, through to the kubelet.
pub const OPEN_WITHIN: Duration = Duration::from_secs(30);
/// How long a stream that closed may still bring the pod's side's error message.
const LAST_WORD_WITHIN: Duration = Duration::from_secs(5);
/// After a failed `accept` (out of file descriptors), before the next.
const ACCEPT_RETRY_AFTER: Duration = Duration::from_millis(100);

/// Why one forwarded connection was closed without reaching the pod's port.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum StreamError {
    /// The API server did not open a port-forward stream.
    #[error("opening a port-forward stream to {pod} port {port}: {reason}")]
    Open {
        pod: String,
        port: u16,
        reason: String,
    },
    /// The stream opened, and the pod's side reported an error on it (nothing listening, say).
    #[error("port-forward to {pod} port {port}: the pod's side says: {message}")]
    Pod {
        pod: String,
        port: u16,
        message: String,
    },
}

/// A pod's port, reached at a local address for as long as this lives.
pub struct Forward {
    /// Where to connect: `127.0.0.1` and a port the system chose.
    addr: SocketAddr,
    /// Tells the thread to close the listener and its connections; taken on drop.
    stop: Option<oneshot::Sender<()>>,
    /// The forwarder's thread, joined on drop.
    thread: Option<JoinHandle<()>>,
    /// The latest stream that failed, if any.
    last_error: Arc<Mutex<Option<StreamError>>>,
}

impl Forward {
    /// The local address; each connection to it is one stream to the pod's port.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Why the latest connection that failed was closed, if one was.
    pub fn last_error(&self) -> Option<StreamError> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Binds `127.0.0.1:0` and starts the forwarder's thread with a kube client made from
    /// `config` on its own runtime; returns once that client is made.
    pub(crate) fn start(
        config: kube::Config,
        namespace: &str,
        pod: &str,
        port: u16,
    ) -> Result<Forward, ApiError> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(ApiError::Listen)?;
        let addr = listener.local_addr().map_err(ApiError::Listen)?;
        listener.set_nonblocking(true).map_err(ApiError::Listen)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ApiError::Runtime)?;
        let target = Target {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            port,
        };
        let last_error = Arc::new(Mutex::new(None));
        let errors = Arc::clone(&last_error);
        let (stop, stopped) = oneshot::channel();
        let (ready, started) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("port-forward {}/{}:{}", namespace, pod, port))
            .spawn(move || {
                runtime.block_on(async move {
                    let client = match Client::try_from(config) {
                        Ok(client) => client,
                        Err(e) => {
                            let _ = ready.send(Err(ApiError::Config(ConfigError::Client(e))));
                            return;
                        }
                    };
                    let listener = match TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            let _ = ready.send(Err(ApiError::Listen(e)));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    serve(listener, client, target, errors, stopped).await;
                });
            })
            .map_err(ApiError::Runtime)?;
        match started.recv() {
            Ok(Ok(())) => Ok(Forward {
                addr,
                stop: Some(stop),
                thread: Some(thread),
                last_error,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(ApiError::Runtime(std::io::Error::other(
                    "the port-forward thread ended before it started",
                )))
            }
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The pod's port every stream goes to.
#[derive(Clone)]
struct Target {
    namespace: String,
    pod: String,
    port: u16,
}

/// Accepts until told to stop; each connection forwarded on a task of its own. Returning
/// drops the listener and aborts every connection's task.
async fn serve(
    listener: TcpListener,
    client: Client,
    target: Target,
    last_error: Arc<Mutex<Option<StreamError>>>,
    mut stop: oneshot::Receiver<()>,
) {
    let pods: Api<Pod> = Api::namespaced(client, &target.namespace);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((local, _)) => {
                    let (pods, target) = (pods.clone(), target.clone());
                    let errors = Arc::clone(&last_error);
                    connections.spawn(async move {
                        forward_one(&pods, &target, local, &errors).await;
                    });
                }
                Err(_) => tokio::time::sleep(ACCEPT_RETRY_AFTER).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// One local connection through its own stream to the pod's port, until either side closes;
/// why it failed, if it did, is kept before the local connection is closed.
async fn forward_one(
    pods: &Api<Pod>,
    target: &Target,
    mut local: TcpStream,
    last_error: &Mutex<Option<StreamError>>,
) {
    if let Err(e) = stream_through(pods, target, &mut local).await {
        *last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
    }
    let _ = local.shutdown().await;
}

/// Opens a stream to the pod's port and copies `local` through it both ways until either side
/// closes or the pod's side reports an error (which may come just after its side closed).
async fn stream_through(
    pods: &Api<Pod>,
    target: &Target,
    local: &mut TcpStream,
) -> Result<(), StreamError> {
    let pod = || format!("{}/{}", target.namespace, target.pod);
    let open_failed = |reason: String| StreamError::Open {
        pod: pod(),
        port: target.port,
        reason,
    };
    let ports = [target.port];
    let opening = pods.portforward(&target.pod, &ports);
    let mut forwarder = tokio::time::timeout(OPEN_WITHIN, opening)
        .await
        .map_err(|_| open_failed(format!("no answer within {} s", OPEN_WITHIN.as_secs())))?
        .map_err(|e| open_failed(e.to_string()))?;
    let (Some(remote), Some(refused)) = (
        forwarder.take_stream(target.port),
        forwarder.take_error(target.port),
    ) else {
        forwarder.abort();
        return Err(open_failed("kube gave no stream for the port".into()));
    };
    // Resolves with the pod's message, or with None once kube's stream has ended.
    let mut refused = std::pin::pin!(refused);
    let mut stream_ended = false;
    let message = {
        let (mut local_read, mut local_write) = local.split();
        let (mut remote_read, mut remote_write) = tokio::io::split(remote);
        let mut up = std::pin::pin!(tokio::io::copy(&mut local_read, &mut remote_write));
        let mut down = std::pin::pin!(tokio::io::copy(&mut remote_read, &mut local_write));
        loop {
            tokio::select! {
                _ = &mut up => break None,
                _ = &mut down => break None,
                said = &mut refused, if !stream_ended => match said {
                    Some(message) => break Some(message),
                    // What the pod sent may still be on its way through the copy.
                    None => stream_ended = true,
                },
            }
        }
        // The stream's local ends are dropped here: kube then closes the stream.
    };
    let message = match message {
        Some(message) => Some(message),
        None if stream_ended => None,
        None => tokio::time::timeout(LAST_WORD_WITHIN, refused)
            .await
            .ok()
            .flatten(),
    };
    forwarder.abort();
    match message {
        Some(message) => Err(StreamError::Pod {
            pod: pod(),
            port: target.port,
            message,
        }),
        None => Ok(()),
    }
}
