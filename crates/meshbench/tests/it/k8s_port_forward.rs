//! `BlockingClient::port_forward` (crates/k8s/src/forward.rs) on the real test node
//! (common/cluster.rs): a port bound only to a pod's own 127.0.0.1 (as Envoy's admin port is in
//! an Istio sidecar) reached from this machine at a local address, through the API server, the
//! kubelet and containerd.
//!
//! Checked: several HTTP/1.1 GETs, each on a connection of its own (a stream of its own), reach
//! `meshbench backend --listen 127.0.0.1:8080` in the pod and come back 200 with the body's 64
//! bytes; a port where nothing listens closes that one connection and is named by
//! `last_error`, while the other forward goes on; once the `Forward` is dropped its address
//! refuses connections.
//!
//! Where a kubelet cannot run, the test fails with `node_unavailable()`'s reason.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::cluster::{self, TestCluster};
use meshbench_k8s::{BlockingClient, StreamError};
use serde_json::json;

const NS: &str = "forward";
const IMAGE: &str = "localhost/meshbench:test";
const PORT: u16 = 8080;
const BODY_BYTES: usize = 64;
/// GETs through the forward, each on a new connection.
const GETS: usize = 5;

/// One `GET /` on a new connection to `addr`: the status and the body (by Content-Length).
fn get(addr: SocketAddr) -> Result<(u16, Vec<u8>), String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: backend\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut answer = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = answer.parse(&got) {
            let length: usize = answer
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .ok_or("no Content-Length")?;
            if got.len() >= head + length {
                let status = answer.code.ok_or("no status")?;
                return Ok((status, got[head..head + length].to_vec()));
            }
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err(format!("closed after {} bytes", got.len())),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[test]
fn a_port_bound_to_a_pods_loopback_is_reached_through_port_forward_one_stream_per_connection() {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let c = TestCluster::with_node();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = c.client(&rt);
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    c.load_meshbench_image(IMAGE);
    k.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .unwrap();
    k.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "backend", "namespace": NS},
        "spec": {"containers": [{
            "name": "backend", "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["/meshbench"],
            "args": ["backend", "--listen", format!("127.0.0.1:{PORT}"), "--size", BODY_BYTES.to_string()]
        }]}
    }))
    .unwrap();
    c.wait_pod_ready(&rt, &client, NS, "backend", Duration::from_secs(60));

    let began = Instant::now();
    let forward = k.port_forward(NS, "backend", PORT).unwrap();
    let addr = forward.addr();
    assert!(addr.ip().is_loopback(), "{addr}");
    // The container is running; its listener may be a moment behind.
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        match get(addr) {
            Ok(answer) => break answer,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no answer through {addr}: {e}; last stream error: {:?}\n{}",
                forward.last_error(),
                cluster::log_tail(&c.logs.join("kube-apiserver.log"), 10)
            ),
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    eprintln!(
        "first answer through the forward after {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let mut answers = vec![first];
    for _ in 1..GETS {
        answers.push(
            get(addr)
                .unwrap_or_else(|e| panic!("GET through {addr}: {e}; {:?}", forward.last_error())),
        );
    }
    for (status, body) in &answers {
        assert_eq!((*status, body.len()), (200, BODY_BYTES));
    }

    // Nothing listens on the pod's port 8081: that connection closes, the error says why.
    let nowhere = k.port_forward(NS, "backend", PORT + 1).unwrap();
    let refused = get(nowhere.addr());
    assert!(refused.is_err(), "{refused:?}");
    let error = nowhere.last_error();
    assert!(
        matches!(error, Some(StreamError::Pod { port, .. }) if port == PORT + 1),
        "{error:?}"
    );
    eprintln!("a port where nothing listens: {}", error.unwrap());
    assert_eq!(
        get(addr).map(|(s, _)| s),
        Ok(200),
        "the other forward goes on"
    );
    drop(nowhere);

    // A pod that is not there is refused before any address is made.
    assert!(matches!(
        k.port_forward(NS, "no-such-pod", PORT),
        Err(meshbench_k8s::ApiError::PodNotRunning { .. })
    ));

    drop(forward);
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "{addr} still accepts after the Forward was dropped"
    );
    eprintln!(
        "{GETS} GETs through port-forward, then closed, in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    c.stop();
}
