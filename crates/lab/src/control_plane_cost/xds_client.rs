//! Simulated proxies: thousands of lightweight xDS clients connected to istiod over ADS, each
//! as a sidecar or gateway connects (its own node: id, identity, labels), speaking the delta
//! protocol pilot-agent's Envoy speaks (`DELTA_GRPC`, Istio's default). Each subscribes to
//! clusters and listeners (wildcard), then to the endpoints of every EDS cluster and the routes
//! every listener names, and ACKs every response, so istiod sees and pushes to it as to Envoy.
//!
//! A client keeps only what it needs: the names (and, for the one twin of the real Envoy, the
//! versions) of what it holds, with the few fields that drive its subscriptions read through
//! partial messages (a cluster's EDS service name, a listener's RDS names, an assignment's
//! addresses) instead of Envoy's full types. It records when it ACKed the response that carried
//! each change meshbench made ([`super::mesh`] names them so they can be recognised), and how
//! many bytes of responses it received. The clients run on their own runtime, two threads
//! named [`THREAD_NAME`], whose CPU time is theirs ([`SimulatedProxies::cpu_ns`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use meshbench_results::{Stop, XdsType};
use prost::Message;
use tokio::sync::mpsc;

use super::mesh::{self, Change};
use super::CostError;
use crate::LabError;

/// How many clients begin to connect per second: under istiod's own admission rate on two
/// cores (25), so that the proxies' start is paced by meshbench rather than by refusals.
pub const CONNECTS_PER_SEC: f64 = 20.0;
/// A refused or cut-off client's first pause before it reconnects, and the longest.
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MOST: Duration = Duration::from_secs(8);
/// The clients' runtime threads' name, by which their CPU time is read.
pub const THREAD_NAME: &str = "meshbench-xds";
// The type URLs are the results crate's ([`XdsType::type_url`]), but for routes, which no
// change of the experiment's is timed on.
const CDS: &str = XdsType::Cds.type_url();
const EDS: &str = XdsType::Eds.type_url();
const LDS: &str = XdsType::Lds.type_url();
const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
/// The resource types a client holds, in the order it subscribes.
pub const TYPES: [&str; 4] = [CDS, EDS, LDS, RDS];

/// The short name of a resource type URL (`cds`, `eds`, `lds`, `rds`).
pub fn short_type(type_url: &str) -> &'static str {
    match type_url {
        CDS => "cds",
        EDS => "eds",
        LDS => "lds",
        RDS => "rds",
        _ => "other",
    }
}

/// A cluster, as far as a client reads it: its name, its discovery type (3 is EDS) and the
/// service name its endpoints are asked by.
#[derive(Clone, PartialEq, Message)]
struct ClusterView {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    discovery_type: i32,
    #[prost(message, optional, tag = "3")]
    eds: Option<EdsConfigView>,
}

#[derive(Clone, PartialEq, Message)]
struct EdsConfigView {
    #[prost(string, tag = "2")]
    service_name: String,
}

/// Envoy's `Cluster.DiscoveryType.EDS`.
const DISCOVERY_EDS: i32 = 3;

/// A listener, as far as a client reads it: the filters of its chains (and default chain).
#[derive(Clone, PartialEq, Message)]
struct ListenerView {
    #[prost(message, repeated, tag = "3")]
    filter_chains: Vec<FilterChainView>,
    #[prost(message, optional, tag = "25")]
    default_filter_chain: Option<FilterChainView>,
}

#[derive(Clone, PartialEq, Message)]
struct FilterChainView {
    #[prost(message, repeated, tag = "3")]
    filters: Vec<FilterView>,
}

#[derive(Clone, PartialEq, Message)]
struct FilterView {
    #[prost(message, optional, tag = "4")]
    typed_config: Option<AnyView>,
}

#[derive(Clone, PartialEq, Message)]
struct AnyView {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// An HTTP connection manager's RDS: the route configuration it names.
#[derive(Clone, PartialEq, Message)]
struct HcmView {
    #[prost(message, optional, tag = "3")]
    rds: Option<RdsView>,
}

#[derive(Clone, PartialEq, Message)]
struct RdsView {
    #[prost(string, tag = "2")]
    route_config_name: String,
}

/// An endpoint assignment, as far as a client reads it: every endpoint's address.
#[derive(Clone, PartialEq, Message)]
struct AssignmentView {
    #[prost(message, repeated, tag = "2")]
    endpoints: Vec<LocalityView>,
}

#[derive(Clone, PartialEq, Message)]
struct LocalityView {
    #[prost(message, repeated, tag = "2")]
    lb_endpoints: Vec<LbEndpointView>,
}

#[derive(Clone, PartialEq, Message)]
struct LbEndpointView {
    #[prost(message, optional, tag = "1")]
    endpoint: Option<EndpointView>,
}

#[derive(Clone, PartialEq, Message)]
struct EndpointView {
    #[prost(message, optional, tag = "1")]
    address: Option<AddressView>,
}

#[derive(Clone, PartialEq, Message)]
struct AddressView {
    #[prost(message, optional, tag = "1")]
    socket_address: Option<SocketAddressView>,
}

#[derive(Clone, PartialEq, Message)]
struct SocketAddressView {
    #[prost(string, tag = "2")]
    address: String,
}

/// When one client ACKed the response that carried one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckAt {
    pub xds: XdsType,
    pub change: Change,
    pub acked_at: Instant,
}

/// What one client holds and has seen.
#[derive(Debug, Default)]
struct ClientState {
    /// Per type URL: resource name -> version (versions kept for the twin only).
    held: HashMap<&'static str, BTreeMap<String, String>>,
    /// EDS clusters' service names, by cluster name.
    eds_names: HashMap<String, String>,
    /// RDS names, by listener name.
    rds_names: HashMap<String, Vec<String>>,
    /// Names subscribed and not yet received, per type URL (EDS and RDS).
    pending: HashMap<&'static str, HashSet<String>>,
    /// Types answered at least once.
    answered: HashSet<&'static str>,
    converged_at: Option<Instant>,
    acks: Vec<AckAt>,
    /// Changes already seen, so that a later response holding the same one is not a second
    /// arrival.
    seen: HashSet<(XdsType, Change)>,
    /// Why its last stream ended, and how many times it reconnected.
    ended: Option<StreamEnded>,
    reconnects: u32,
}

/// What every client shares with the others.
struct Shared {
    bytes: AtomicU64,
    connected: AtomicU32,
    converged: AtomicU32,
    stop: AtomicBool,
}

/// The simulated proxies of one step; they disconnect when dropped.
pub struct SimulatedProxies {
    runtime: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
    clients: Vec<Arc<Mutex<ClientState>>>,
    started: Instant,
}

impl SimulatedProxies {
    /// Connects one client per node to istiod's plain xDS port `istiod`, [`CONNECTS_PER_SEC`]
    /// at a time: istiod admits new streams at a rate of its own (25 a second on two cores,
    /// `PILOT_MAX_REQUESTS_PER_SECOND`) and refuses the rest, as a rollout of many pods finds.
    /// A client refused or cut off reconnects, as Envoy does, after a growing pause. The
    /// client at `twin` keeps versions.
    pub fn connect(
        istiod: SocketAddr,
        nodes: Vec<Node>,
        twin: Option<usize>,
    ) -> Result<SimulatedProxies, LabError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(THREAD_NAME)
            .enable_all()
            .build()
            .map_err(CostError::Runtime)?;
        let shared = Arc::new(Shared {
            bytes: AtomicU64::new(0),
            connected: AtomicU32::new(0),
            converged: AtomicU32::new(0),
            stop: AtomicBool::new(false),
        });
        let clients: Vec<_> = nodes
            .iter()
            .map(|_| Arc::new(Mutex::new(ClientState::default())))
            .collect();
        let started = Instant::now();
        for (i, node) in nodes.into_iter().enumerate() {
            let state = Arc::clone(&clients[i]);
            let shared = Arc::clone(&shared);
            let keep_versions = twin == Some(i);
            let delay = Duration::from_secs_f64(i as f64 / CONNECTS_PER_SEC);
            runtime.spawn(async move {
                tokio::time::sleep(delay).await;
                let mut pause = RECONNECT_FIRST;
                while !shared.stop.load(Ordering::Relaxed) {
                    let ended = run_client(istiod, &node, keep_versions, &state, &shared).await;
                    let Err(why) = ended else { break };
                    {
                        let mut s = lock(&state);
                        s.ended = Some(why);
                        s.reconnects += 1;
                        s.forget();
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECONNECT_MOST);
                }
            });
        }
        Ok(SimulatedProxies {
            runtime: Some(runtime),
            shared,
            clients,
            started,
        })
    }

    /// How many times a client reconnected so far (refused by istiod's admission rate, or
    /// cut off), all clients together.
    pub fn reconnects(&self) -> u32 {
        self.clients.iter().map(|c| lock(c).reconnects).sum()
    }

    /// Clients connected now.
    pub fn connected(&self) -> u32 {
        self.shared.connected.load(Ordering::Relaxed)
    }

    /// Bytes of responses received so far, all clients together.
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }

    /// Waits until every client holds a full configuration, at most `limit`: how long it took
    /// from the first connection, or why not (how many had, and the first client's end); a
    /// `stop` ends the wait within 50 ms ([`LabError::Stopped`]).
    pub fn wait_converged(&self, limit: Duration, stop: &Stop) -> Result<Duration, LabError> {
        let all = self.clients.len() as u32;
        let deadline = Instant::now() + limit;
        loop {
            if self.shared.converged.load(Ordering::Relaxed) >= all {
                let last = self
                    .clients
                    .iter()
                    .filter_map(|c| lock(c).converged_at)
                    .max()
                    .unwrap_or(self.started);
                return Ok(last - self.started);
            }
            if Instant::now() > deadline {
                let ended = self
                    .clients
                    .iter()
                    .find_map(|c| lock(c).ended.as_ref().map(ToString::to_string));
                return Err(CostError::NotConverged {
                    converged: self.shared.converged.load(Ordering::Relaxed),
                    all,
                    limit,
                    ended,
                }
                .into());
            }
            if !stop.sleep(Duration::from_millis(50)) {
                return Err(LabError::Stopped);
            }
        }
    }

    /// Every arrival of every client, by client.
    pub fn acks(&self) -> Vec<Vec<AckAt>> {
        self.clients.iter().map(|c| lock(c).acks.clone()).collect()
    }

    /// What client `i` holds: per short type (`cds`...), name -> version.
    pub fn held(&self, i: usize) -> BTreeMap<&'static str, BTreeMap<String, String>> {
        lock(&self.clients[i])
            .held
            .iter()
            .map(|(t, m)| (short_type(t), m.clone()))
            .collect()
    }

    /// CPU time the clients' threads have used so far (Linux: `/proc/self/task`).
    pub fn cpu_ns(&self) -> u64 {
        threads_cpu_ns(THREAD_NAME)
    }

    /// Disconnects every client.
    pub fn close(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for SimulatedProxies {
    fn drop(&mut self) {
        self.close();
    }
}

fn lock(c: &Mutex<ClientState>) -> std::sync::MutexGuard<'_, ClientState> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// CPU time of this process's threads named `name`, from their `stat` (utime + stime).
pub fn threads_cpu_ns(name: &str) -> u64 {
    let tck = 100u64; // USER_HZ on Linux
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            if !comm.trim_end().starts_with(name) {
                return None;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            crate::sample::proc_cpu_ns(&stat, tck).ok()
        })
        .sum()
}

/// Why a client's stream ended (it then reconnects, after a pause).
#[derive(Debug, thiserror::Error)]
enum StreamEnded {
    #[error("cannot connect to istiod at {istiod}: {source}")]
    Connect {
        istiod: SocketAddr,
        source: tonic::transport::Error,
    },
    #[error("istiod refused the stream: {}", .0.message())]
    Refused(tonic::Status),
    #[error("istiod closed the stream")]
    Closed,
    #[error("the stream failed: {}", .0.message())]
    Failed(tonic::Status),
}

/// One client's life: connect, subscribe, ACK until istiod closes the stream or the proxies
/// stops.
async fn run_client(
    istiod: SocketAddr,
    node: &Node,
    keep_versions: bool,
    state: &Mutex<ClientState>,
    shared: &Shared,
) -> Result<(), StreamEnded> {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{istiod}"))
        .await
        .map_err(|source| StreamEnded::Connect { istiod, source })?
        .max_decoding_message_size(256 << 20);
    let (send, requests) = mpsc::unbounded_channel::<DeltaDiscoveryRequest>();
    let request = |type_url: &str| DeltaDiscoveryRequest {
        type_url: type_url.to_string(),
        ..DeltaDiscoveryRequest::default()
    };
    // The node goes with the first request; clusters and listeners are wildcard.
    let first = DeltaDiscoveryRequest {
        node: Some(node.clone()),
        ..request(CDS)
    };
    let _ = send.send(first);
    let _ = send.send(request(LDS));
    let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(requests);
    let mut responses = client
        .delta_aggregated_resources(stream)
        .await
        .map_err(StreamEnded::Refused)?
        .into_inner();
    shared.connected.fetch_add(1, Ordering::Relaxed);
    let outcome = loop {
        if shared.stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let response = match responses.message().await {
            Ok(Some(r)) => r,
            Ok(None) => break Err(StreamEnded::Closed),
            Err(e) => break Err(StreamEnded::Failed(e)),
        };
        shared
            .bytes
            .fetch_add(response.encoded_len() as u64, Ordering::Relaxed);
        let follow_ups = {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            let was_converged = s.converged_at.is_some();
            let follow_ups = take(&mut s, &response, keep_versions);
            if !was_converged && s.is_converged() {
                s.converged_at = Some(Instant::now());
                shared.converged.fetch_add(1, Ordering::Relaxed);
            }
            follow_ups
        };
        for r in follow_ups {
            if send.send(r).is_err() {
                break;
            }
        }
    };
    shared.connected.fetch_sub(1, Ordering::Relaxed);
    outcome
}

impl ClientState {
    /// Forgets what a stream brought, for the next one (what arrived stays counted).
    fn forget(&mut self) {
        self.held.clear();
        self.eds_names.clear();
        self.rds_names.clear();
        self.pending.clear();
        self.answered.clear();
    }

    /// Clusters and listeners answered, and every endpoint and route subscribed received.
    fn is_converged(&self) -> bool {
        self.answered.contains(CDS)
            && self.answered.contains(LDS)
            && self.pending.values().all(HashSet::is_empty)
            && (self.eds_names.is_empty() || self.answered.contains(EDS))
    }
}

/// Applies one response to a client's state; returns what the client sends next: the ACK,
/// first, then any change of its endpoint and route subscriptions.
fn take(
    s: &mut ClientState,
    response: &DeltaDiscoveryResponse,
    keep_versions: bool,
) -> Vec<DeltaDiscoveryRequest> {
    let Some(type_url) = TYPES.iter().copied().find(|t| *t == response.type_url) else {
        // A type this client never asked for: ACK it and hold nothing.
        return vec![ack(&response.type_url, &response.nonce)];
    };
    s.answered.insert(type_url);
    let now = Instant::now();
    hold(s, type_url, response, keep_versions);
    let arrived = match type_url {
        CDS => take_clusters(s, response),
        LDS => take_listeners(s, response),
        EDS => endpoint_changes(response),
        _ => Vec::new(),
    };
    for (xds, change) in arrived {
        if s.seen.insert((xds, change)) {
            s.acks.push(AckAt {
                xds,
                change,
                acked_at: now,
            });
        }
    }
    let mut next = vec![ack(type_url, &response.nonce)];
    match type_url {
        CDS => {
            let wanted: HashSet<String> = s.eds_names.values().cloned().collect();
            next.extend(resubscribe(s, EDS, wanted));
        }
        LDS => {
            let wanted: HashSet<String> = s.rds_names.values().flatten().cloned().collect();
            next.extend(resubscribe(s, RDS, wanted));
        }
        _ => {}
    }
    next
}

/// What a response of `type_url` leaves held (versions only when `keep_versions`), and which
/// subscribed names it answered.
fn hold(
    s: &mut ClientState,
    type_url: &'static str,
    response: &DeltaDiscoveryResponse,
    keep_versions: bool,
) {
    let held = s.held.entry(type_url).or_default();
    for name in &response.removed_resources {
        held.remove(name);
    }
    for r in &response.resources {
        let version = if keep_versions {
            r.version.clone()
        } else {
            String::new()
        };
        held.insert(r.name.clone(), version);
    }
    if let Some(pending) = s.pending.get_mut(type_url) {
        for r in &response.resources {
            pending.remove(&r.name);
        }
    }
}

/// A CDS response: each EDS cluster's service name noted (to subscribe to its endpoints);
/// returns the configuration changes it carries.
fn take_clusters(s: &mut ClientState, response: &DeltaDiscoveryResponse) -> Vec<(XdsType, Change)> {
    let mut arrived = Vec::new();
    for name in &response.removed_resources {
        s.eds_names.remove(name);
    }
    for r in &response.resources {
        if let Some(change) = mesh::config_change_of_cluster(&r.name) {
            arrived.push((XdsType::Cds, change));
        }
        let Some(cluster) = resource_body(r).and_then(|b| ClusterView::decode(b).ok()) else {
            continue;
        };
        if cluster.discovery_type == DISCOVERY_EDS {
            let service = cluster
                .eds
                .map(|e| e.service_name)
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| cluster.name.clone());
            s.eds_names.insert(r.name.clone(), service);
        } else {
            s.eds_names.remove(&r.name);
        }
    }
    arrived
}

/// An LDS response: each listener's route names noted (to subscribe to them); returns the
/// configuration changes it carries.
fn take_listeners(
    s: &mut ClientState,
    response: &DeltaDiscoveryResponse,
) -> Vec<(XdsType, Change)> {
    let mut arrived = Vec::new();
    for name in &response.removed_resources {
        s.rds_names.remove(name);
    }
    for r in &response.resources {
        if let Some(change) = mesh::config_change_of_listener(&r.name) {
            arrived.push((XdsType::Lds, change));
        }
        let routes = resource_body(r)
            .and_then(|b| ListenerView::decode(b).ok())
            .map(|l| route_names(&l))
            .unwrap_or_default();
        s.rds_names.insert(r.name.clone(), routes);
    }
    arrived
}

/// The endpoint changes an EDS response carries, known by their addresses.
fn endpoint_changes(response: &DeltaDiscoveryResponse) -> Vec<(XdsType, Change)> {
    let mut arrived = Vec::new();
    for r in &response.resources {
        let Some(assignment) = resource_body(r).and_then(|b| AssignmentView::decode(b).ok()) else {
            continue;
        };
        for address in assignment
            .endpoints
            .iter()
            .flat_map(|l| &l.lb_endpoints)
            .filter_map(|e| {
                e.endpoint
                    .as_ref()?
                    .address
                    .as_ref()?
                    .socket_address
                    .as_ref()
            })
        {
            if let Some(change) = mesh::endpoint_change_of_address(&address.address) {
                arrived.push((XdsType::Eds, change));
            }
        }
    }
    arrived
}

/// The serialized resource a delta `Resource` wraps.
fn resource_body(r: &envoy_types::pb::envoy::service::discovery::v3::Resource) -> Option<&[u8]> {
    r.resource.as_ref().map(|any| any.value.as_slice())
}

/// The ACK of a response.
fn ack(type_url: &str, nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: type_url.to_string(),
        response_nonce: nonce.to_string(),
        ..DeltaDiscoveryRequest::default()
    }
}

/// The request that makes the subscription to `type_url` the names `wanted`, if it differs
/// from what is subscribed (what is held plus what is pending).
fn resubscribe(
    s: &mut ClientState,
    type_url: &'static str,
    wanted: HashSet<String>,
) -> Option<DeltaDiscoveryRequest> {
    let held: HashSet<&String> = s
        .held
        .get(type_url)
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    let pending = s.pending.entry(type_url).or_default();
    let subscribe: Vec<String> = wanted
        .iter()
        .filter(|n| !held.contains(n) && !pending.contains(*n))
        .cloned()
        .collect();
    let mut unsubscribe: Vec<String> = held
        .iter()
        .filter(|n| !wanted.contains(**n))
        .map(|n| (*n).clone())
        .collect();
    unsubscribe.extend(pending.iter().filter(|n| !wanted.contains(*n)).cloned());
    pending.retain(|n| wanted.contains(n));
    pending.extend(subscribe.iter().cloned());
    if let Some(held) = s.held.get_mut(type_url) {
        for n in &unsubscribe {
            held.remove(n);
        }
    }
    if subscribe.is_empty() && unsubscribe.is_empty() {
        return None;
    }
    Some(DeltaDiscoveryRequest {
        type_url: type_url.to_string(),
        resource_names_subscribe: subscribe,
        resource_names_unsubscribe: unsubscribe,
        ..DeltaDiscoveryRequest::default()
    })
}

/// The route configurations a listener's HTTP connection managers name.
fn route_names(l: &ListenerView) -> Vec<String> {
    l.filter_chains
        .iter()
        .chain(l.default_filter_chain.iter())
        .flat_map(|c| &c.filters)
        .filter_map(|f| f.typed_config.as_ref())
        .filter(|any| any.type_url.ends_with(".HttpConnectionManager"))
        .filter_map(|any| HcmView::decode(any.value.as_slice()).ok()?.rds)
        .map(|rds| rds.route_config_name)
        .filter(|n| !n.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
    };
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::Resource;
    use envoy_types::pb::google::protobuf::Any;

    fn resource(name: &str, type_url: &str, body: Vec<u8>) -> Resource {
        Resource {
            name: name.into(),
            version: "v1".into(),
            resource: Some(Any {
                type_url: type_url.into(),
                value: body,
            }),
            ..Resource::default()
        }
    }

    #[test]
    fn a_stop_ends_the_wait_for_proxies_that_cannot_connect() {
        // Nothing listens there: the clients reconnect until they are dropped.
        let istiod = SocketAddr::from(([127, 0, 0, 1], crate::port::free_port().unwrap()));
        let proxies = SimulatedProxies::connect(istiod, vec![Node::default(); 3], None).unwrap();
        let stop = Stop::new();
        let asker = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            asker.request();
        });
        let began = Instant::now();
        let waited = proxies.wait_converged(Duration::from_secs(60), &stop);
        assert!(matches!(waited, Err(LabError::Stopped)), "{waited:?}");
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{:?}",
            began.elapsed()
        );
        t.join().unwrap();
        let began = Instant::now();
        drop(proxies);
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "{:?}",
            began.elapsed()
        );
    }

    #[test]
    fn a_cluster_response_is_acked_and_subscribes_its_endpoints_through_the_partial_view() {
        let cluster = Cluster {
            name: "outbound|80||svc-1.default.svc.cluster.local".into(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
            eds_cluster_config: Some(EdsClusterConfig {
                service_name: "outbound|80||svc-1.default.svc.cluster.local".into(),
                ..EdsClusterConfig::default()
            }),
            ..Cluster::default()
        };
        let response = DeltaDiscoveryResponse {
            type_url: CDS.into(),
            nonce: "n1".into(),
            resources: vec![resource(&cluster.name, CDS, cluster.encode_to_vec())],
            ..DeltaDiscoveryResponse::default()
        };
        let mut s = ClientState::default();
        let next = take(&mut s, &response, true);
        assert_eq!(next[0].response_nonce, "n1");
        assert_eq!(next[1].type_url, EDS);
        assert_eq!(next[1].resource_names_subscribe, vec![cluster.name.clone()]);
        assert!(
            !s.is_converged(),
            "endpoints and listeners are still to come"
        );
        assert_eq!(s.held[CDS][&cluster.name], "v1");
        // Removed: the subscription follows.
        let removed = DeltaDiscoveryResponse {
            type_url: CDS.into(),
            nonce: "n2".into(),
            removed_resources: vec![cluster.name.clone()],
            ..DeltaDiscoveryResponse::default()
        };
        let next = take(&mut s, &removed, true);
        assert_eq!(
            next[1].resource_names_unsubscribe,
            vec![cluster.name.clone()]
        );
    }
}
