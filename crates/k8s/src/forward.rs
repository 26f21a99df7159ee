//! A port inside a pod, reached at a local address, as `kubectl port-forward` does: each
//! connection accepted on `127.0.0.1:EPHEMERAL` opens its own port-forward stream through the
//! API server (the kubelet connects it to the port on the pod's own loopback, where Envoy's
//! admin listens in an Istio proxy) and bytes are copied both ways until either side closes.
//! The rest of the project reads such a port with its usual readers (the Envoy admin reader),
//! by address, unaware of the forward. The forwarder runs on a thread of its own with its own
//! runtime; dropping the [`Forward`] ends it and every connection through it.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use tokio::sync::oneshot;

use crate::blocking::{ApiError, BlockingClient};

/// A pod's port, reached at [`Forward::addr`] for as long as this lives.
#[derive(Debug)]
pub struct Forward {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forward {
    /// Where the pod's port is reached.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl BlockingClient {
    /// Port `port` of pod `namespace/pod`, at a local address.
    pub fn port_forward(&self, namespace: &str, pod: &str, port: u16) -> Result<Forward, ApiError> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(ApiError::Runtime)?;
        listener.set_nonblocking(true).map_err(ApiError::Runtime)?;
        let addr = listener.local_addr().map_err(ApiError::Runtime)?;
        let client = self.kube_client();
        let (stop, stopped) = oneshot::channel();
        let (namespace, pod) = (namespace.to_string(), pod.to_string());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ApiError::Runtime)?;
        let thread = std::thread::Builder::new()
            .name(format!("forward {pod}:{port}"))
            .spawn(move || runtime.block_on(serve(listener, client, namespace, pod, port, stopped)))
            .map_err(ApiError::Runtime)?;
        Ok(Forward {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// Accepts until stopped; each connection its own stream to the pod.
async fn serve(
    listener: std::net::TcpListener,
    client: Client,
    namespace: String,
    pod: String,
    port: u16,
    mut stopped: oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => {
                let Ok((mut local, _)) = accepted else { continue };
                let pods = pods.clone();
                let pod = pod.clone();
                connections.spawn(async move {
                    // A stream that cannot be opened closes this one connection.
                    let Ok(mut forwarder) = pods.portforward(&pod, &[port]).await else {
                        return;
                    };
                    if let Some(mut remote) = forwarder.take_stream(port) {
                        let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
                    }
                    forwarder.abort();
                });
            }
        }
    }
    connections.abort_all();
}
