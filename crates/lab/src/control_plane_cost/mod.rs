//! One `control_plane` step: what istiod costs serving a mesh of a given scale. It starts the
//! control plane as the lab does, registers the mesh ([`mesh`]), starts one real Envoy
//! (pilot-agent's sidecar or gateway, in a network namespace of its own: its agent and
//! listeners bind every address there; `real_envoy.rs`) and waits for it to accept its
//! configuration, then connects the simulated proxies ([`xds_client`]) with nodes made from
//! the real one's and times until each holds a full configuration. One simulated proxy is the real one's twin (the same node): what it holds
//! is compared with what the real Envoy accepted, name and version.
//!
//! Then, over the measured window, istiod's CPU and memory are sampled as any role's while
//! endpoint and configuration changes are written at the asked rates (a rate of 0 still writes
//! one change of its kind mid-window, so every step times both), and afterwards every change is
//! waited for, at most `settle`, at every proxy. A change counts as arrived at a proxy when the
//! proxy ACKed the response that carried it or a later change of the same object (istiod
//! merges changes that come close together: the later one carries the earlier).
//!
//! Everything the step started stops when [`CostStep`] is dropped: the clients, the agent and
//! its Envoy, istiod, the API server, the namespace. A stop (Ctrl-C) while it is set up (the
//! control plane starting, the mesh registered, the real Envoy awaited, the proxies
//! connecting) ends the setup within seconds with [`LabError::Stopped`], and what was started
//! stops the same way; a stop during the measured window ends the window (the step is partial).

pub mod mesh;
mod real_envoy;
pub mod xds_client;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use meshbench_results::control_plane::{Agreement, Propagation};
use meshbench_results::{
    ControlPlaneFigures, MeshScale, ProxyKind, Role, Sample, Stop, Usage, XdsType,
};
use serde_json::Value;
use tempfile::TempDir;

use crate::istio::sidecars;
use crate::istio::{AgentPorts, ControlPlane, IstioError, MeshOptions};
use crate::netns::Namespaces;
use crate::process::RoleProcess;
use crate::program::envoy::admin::AdminError;
use crate::sampler::{self, Sampler};
use crate::LabError;
use mesh::{Change, MeshPod, Registered};
use real_envoy::{real_pod, start_real, RealEnvoy};
use xds_client::{AckAt, SimulatedProxies, CONNECTS_PER_SEC};

/// How long the simulated proxies may take to hold their configuration once the last has
/// begun to connect.
const CONVERGE_AFTER_CONNECTS: Duration = Duration::from_secs(120);

/// How a step runs beyond its scale.
#[derive(Debug, Clone)]
pub struct CostSpec {
    pub scale: MeshScale,
    /// Its files: the API server's, istiod's, the agent's.
    pub dir: PathBuf,
    /// Unique to this process and step: names the namespace and its interfaces.
    pub owner: String,
    pub warmup: Duration,
    pub duration: Duration,
    /// How long after the window a change may still take to arrive.
    pub settle: Duration,
    pub sample_every: Duration,
}

/// What a step measured.
#[derive(Debug, Clone)]
pub struct CostRun {
    pub figures: ControlPlaneFigures,
    /// istiod's samples and their summary over the window (ms on the samples' clock).
    pub istiod_samples: Vec<Sample>,
    pub istiod: Usage,
    /// Whether a stop cut the window short.
    pub partial: bool,
}

/// Why a control-plane step could not be set up or measured.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    #[error("a control-plane step needs a service and a proxy")]
    EmptyMesh,
    #[error("the real Envoy's configuration: {0}")]
    RealEnvoyConfig(#[source] AdminError),
    #[error("the real Envoy's config dump has no bootstrap node")]
    NoBootstrapNode,
    /// The real Envoy's agent ended during the window: its status and the tail of its output.
    #[error("the real Envoy's agent exited ({status}): {log}")]
    AgentExited { status: String, log: String },
    /// Not every simulated proxy held a full configuration in time.
    #[error(
        "{converged} of {all} simulated proxies held a full configuration after {} s{}",
        .limit.as_secs(),
        .ended.as_ref().map(|e| format!(" (one ended: {e})")).unwrap_or_default()
    )]
    NotConverged {
        converged: u32,
        all: u32,
        limit: Duration,
        /// Why one client's stream ended, if one did.
        ended: Option<String>,
    },
    #[error("cannot start the xDS clients' runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// What the measured window saw.
struct Window {
    /// The changes written, with when.
    written: Vec<Written>,
    length: Duration,
    /// Its bounds on the samples' clock (ms).
    from_ms: u64,
    to_ms: u64,
    /// xDS bytes the clients received, and their CPU time (ns).
    bytes: u64,
    clients_cpu: u64,
    /// istiod's pushes by type over the window (none when its metrics could not be read).
    pushes: BTreeMap<String, u64>,
    sampled: sampler::Sampled,
}

/// A control-plane step set up and ready to measure. Its parts stop in the order of its
/// fields: the clients, the agent and its Envoy, istiod and the API server (the processes all
/// asked to end at once first), the namespace, then the files.
pub struct CostStep {
    spec: CostSpec,
    registered: Registered,
    converged: Duration,
    agreement: Agreement,
    proxies: SimulatedProxies,
    agent: RoleProcess,
    control_plane: ControlPlane,
    _namespaces: Namespaces,
    _pod_dir: TempDir,
    _dir: TempDir,
}

impl Drop for CostStep {
    fn drop(&mut self) {
        // The clients first; the agent and the control plane asked to end together, so that
        // the fields' drops (each waiting for its own) overlap.
        self.proxies.close();
        self.agent.terminate();
        self.control_plane.terminate();
    }
}

impl CostStep {
    /// Starts everything and connects every proxy; `note` hears each stage. A `stop` ends the
    /// start within a second or two ([`LabError::Stopped`]); everything started so far stops
    /// as it drops.
    pub fn start(
        spec: CostSpec,
        stop: &Stop,
        note: &mut dyn FnMut(&str),
    ) -> Result<CostStep, LabError> {
        let scale = spec.scale;
        if scale.services == 0 || scale.proxies == 0 {
            return Err(CostError::EmptyMesh.into());
        }
        crate::go_on(stop)?;
        // Locals drop in reverse: the files last.
        let dir = crate::removed_on_drop(&spec.dir)?;
        // The real Envoy's agent and listeners bind every address: it gets a namespace.
        let prefix = format!("cp{}", &spec.owner[spec.owner.len().saturating_sub(6)..]);
        let mut namespaces = Namespaces::new(&spec.owner, &prefix);
        let pod_ns = namespaces.add(0)?;
        let control_plane = ControlPlane::start(
            &spec.dir.join("control-plane"),
            pod_ns.host_addr,
            MeshOptions::default(),
            None,
            stop,
        )?;
        note(&format!(
            "istiod ready in {:.1} s",
            control_plane.istiod_ready_in.as_secs_f64()
        ));
        let real = real_pod(scale.kind, pod_ns.addr);
        let (pods, registered) = register(&control_plane, scale, &real, stop, note)?;
        let pod_dir = crate::removed_on_drop(&sidecars::pod_dir(&spec.owner, "real")?)?;
        let mut agent = start_real(&control_plane, &spec, &real, pod_dir.path(), &pod_ns)?;
        let envoy = RealEnvoy {
            admin: SocketAddr::from(([127, 0, 0, 1], AgentPorts::ISTIO.admin)),
            netns: pod_ns.netns.clone(),
        };
        let connected = connect_all(
            &control_plane,
            &envoy,
            &mut agent,
            (scale, &pods),
            stop,
            note,
        );
        let (proxies, converged, agreement) = match connected {
            Ok(c) => c,
            Err(e) => {
                // Asked to end together, so that the drops below overlap.
                agent.terminate();
                control_plane.terminate();
                return Err(e);
            }
        };
        Ok(CostStep {
            spec,
            registered,
            proxies,
            converged,
            agreement,
            agent,
            control_plane,
            _namespaces: namespaces,
            _pod_dir: pod_dir,
            _dir: dir,
        })
    }

    /// The twin's agreement with the real Envoy.
    pub fn agreement(&self) -> &Agreement {
        &self.agreement
    }

    /// Warms up, measures the window while writing changes, waits for them to arrive; `stop`
    /// ends the window early (the step is then partial).
    pub fn measure(&mut self, stop: &Stop) -> Result<CostRun, LabError> {
        let spec = self.spec.clone();
        stop.sleep(spec.warmup);
        let window = self.measure_window(stop)?;
        let partial = stop.requested();
        self.still_running()?;
        // Every change, at every proxy, or the settle time.
        let connected = self.proxies.connected();
        let expected_of = |xds: XdsType| match (xds, spec.scale.kind) {
            (XdsType::Lds, ProxyKind::Gateway) => 0,
            _ => u64::from(connected),
        };
        let acks = self.wait_for_changes(&window.written, &expected_of, stop);
        let propagation = XdsType::ALL
            .iter()
            .filter_map(|&xds| {
                propagate(
                    xds,
                    &window.written,
                    &acks,
                    expected_of(xds),
                    spec.scale.services,
                )
            })
            .collect();
        let samples = window
            .sampled
            .roles
            .get(&Role::Istiod)
            .cloned()
            .unwrap_or_default();
        let istiod = sampler::summarize(&samples, window.from_ms, window.to_ms);
        let figures = self.figures(&window, connected, propagation);
        Ok(CostRun {
            figures,
            istiod_samples: samples,
            istiod,
            partial,
        })
    }

    /// The measured window: istiod sampled while the changes are written at their rates, and
    /// what the clients and istiod counted around it.
    fn measure_window(&mut self, stop: &Stop) -> Result<Window, LabError> {
        let sampler = Sampler::start(vec![self.control_plane.watch()], self.spec.sample_every);
        let pushes_before = self.control_plane.istiod_metrics().map(|m| pushes(&m));
        let bytes_before = self.proxies.bytes();
        let clients_cpu_before = self.proxies.cpu_ns();
        let from_ms = meshbench_results::usage::now_ms();
        let began = Instant::now();
        let written = self.write_changes(began, self.spec.duration, stop)?;
        let length = began.elapsed();
        let to_ms = meshbench_results::usage::now_ms();
        let bytes = self.proxies.bytes() - bytes_before;
        let clients_cpu = self.proxies.cpu_ns() - clients_cpu_before;
        let pushes_after = self.control_plane.istiod_metrics().map(|m| pushes(&m));
        Ok(Window {
            written,
            length,
            from_ms,
            to_ms,
            bytes,
            clients_cpu,
            pushes: match (pushes_before, pushes_after) {
                (Ok(b), Ok(a)) => a
                    .iter()
                    .map(|(t, n)| (t.clone(), n.saturating_sub(b.get(t).copied().unwrap_or(0))))
                    .filter(|(_, n)| *n > 0)
                    .collect(),
                _ => BTreeMap::new(),
            },
            sampled: sampler.finish(),
        })
    }

    /// Fails when istiod or the real Envoy's agent ended.
    fn still_running(&mut self) -> Result<(), LabError> {
        if let Some(why) = self.control_plane.istiod_exited() {
            return Err(IstioError::IstiodExited(why).into());
        }
        if let Some(status) = self.agent.exited() {
            return Err(CostError::AgentExited {
                status: status.to_string(),
                log: self.agent.log_tail(5),
            }
            .into());
        }
        Ok(())
    }

    /// Waits until every change written reached every proxy that should get it (a later
    /// change of the same kind carries it), at most the settle time or until `stop`; returns
    /// every proxy's ACKs.
    fn wait_for_changes(
        &self,
        written: &[Written],
        expected_of: &dyn Fn(XdsType) -> u64,
        stop: &Stop,
    ) -> Vec<Vec<AckAt>> {
        let wait_until = Instant::now() + self.spec.settle;
        let complete = |acks: &[Vec<AckAt>]| {
            XdsType::ALL.iter().all(|&xds| {
                let last = written
                    .iter()
                    .filter(|w| w.xds_of(xds))
                    .map(|w| w.change)
                    .max();
                let Some(last) = last else { return true };
                expected_of(xds) == 0
                    || acks
                        .iter()
                        .filter(|a| a.iter().any(|x| x.xds == xds && x.change >= last))
                        .count() as u64
                        >= expected_of(xds)
            })
        };
        let mut acks = self.proxies.acks();
        while !complete(&acks)
            && Instant::now() < wait_until
            && stop.sleep(Duration::from_millis(100))
        {
            acks = self.proxies.acks();
        }
        acks
    }

    /// The step's figures from its window and the changes' propagation.
    fn figures(
        &self,
        window: &Window,
        connected: u32,
        propagation: Vec<Propagation>,
    ) -> ControlPlaneFigures {
        let secs = window.length.as_secs_f64().max(1e-9);
        ControlPlaneFigures {
            connected,
            real_proxies: 1,
            services: self.registered.services,
            endpoints: self.registered.endpoints,
            virtual_services: self.registered.virtual_services,
            destination_rules: self.registered.destination_rules,
            converged_secs: self.converged.as_secs_f64(),
            propagation,
            pushes: window.pushes.clone(),
            xds_bytes: window.bytes,
            xds_bytes_per_sec: window.bytes as f64 / secs,
            clients_cpu_millicores: window.clients_cpu as f64 / 1e6 / secs,
            agreement: self.agreement.clone(),
        }
    }

    /// Writes the window's changes at their rates (a rate of 0: one mid-window); returns
    /// each with the instant its write began.
    fn write_changes(
        &mut self,
        began: Instant,
        window: Duration,
        stop: &Stop,
    ) -> Result<Vec<Written>, LabError> {
        let scale = self.spec.scale;
        let schedule = schedule(scale, window);
        let mut written = Vec::with_capacity(schedule.len());
        let mut counts = [0u32; 2];
        for (at, kind) in schedule {
            let due = at.saturating_sub(began.elapsed());
            if !due.is_zero() && !stop.sleep(due) {
                return Ok(written);
            }
            let n = counts[kind as usize];
            if n >= mesh::MAX_CHANGES - 1 {
                continue;
            }
            counts[kind as usize] += 1;
            let now = Instant::now();
            match kind {
                ChangeKind::Endpoint => {
                    mesh::write_endpoint_change(&self.control_plane.api, scale.services, n)?
                }
                ChangeKind::Config => mesh::write_config_change(&self.control_plane.api, n)?,
            }
            written.push(Written {
                kind,
                change: Change(n),
                at: now,
            });
        }
        stop.sleep((began + window).saturating_duration_since(Instant::now()));
        Ok(written)
    }
}

/// The two kinds of change a step writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChangeKind {
    Endpoint = 0,
    Config = 1,
}

/// One change written, and when its write began.
#[derive(Debug, Clone, Copy)]
struct Written {
    kind: ChangeKind,
    change: Change,
    at: Instant,
}

impl Written {
    /// Whether it reaches the proxies in `xds`.
    fn xds_of(&self, xds: XdsType) -> bool {
        match self.kind {
            ChangeKind::Endpoint => xds == XdsType::Eds,
            ChangeKind::Config => matches!(xds, XdsType::Cds | XdsType::Lds),
        }
    }
}

/// When each change is written within the window: each kind evenly at its rate, or once at
/// the middle when its rate is 0; in time order.
fn schedule(scale: MeshScale, window: Duration) -> Vec<(Duration, ChangeKind)> {
    let mut at = Vec::new();
    for (rate, kind) in [
        (scale.endpoint_churn_per_s, ChangeKind::Endpoint),
        (scale.config_churn_per_s, ChangeKind::Config),
    ] {
        if rate > 0.0 {
            let period = Duration::from_secs_f64(1.0 / rate);
            let mut t = period / 2;
            while t < window {
                at.push((t, kind));
                t += period;
            }
        } else {
            at.push((window / 2, kind));
        }
    }
    at.sort_by_key(|(t, k)| (*t, *k as u8));
    at
}

/// The propagation of the changes of type `xds`: per proxy, each change arrived when it or a
/// later change of the same object was ACKed (the same service's for endpoints; the one
/// ServiceEntry for configuration). `None` when no change of its kind was written or no proxy
/// should get it.
fn propagate(
    xds: XdsType,
    written: &[Written],
    acks: &[Vec<AckAt>],
    expected_proxies: u64,
    services: u32,
) -> Option<Propagation> {
    let changes: Vec<&Written> = written.iter().filter(|w| w.xds_of(xds)).collect();
    if changes.is_empty() || expected_proxies == 0 {
        return None;
    }
    let same_object = |a: Change, b: Change| match xds {
        XdsType::Eds => a.0 % services.max(1) == b.0 % services.max(1),
        XdsType::Cds | XdsType::Lds => true,
    };
    let mut latencies = Vec::new();
    let mut per_change: HashMap<Change, Vec<f64>> = HashMap::new();
    for proxy in acks {
        let mine: Vec<&AckAt> = proxy.iter().filter(|a| a.xds == xds).collect();
        for w in &changes {
            let arrived = mine
                .iter()
                .filter(|a| a.change >= w.change && same_object(a.change, w.change))
                .map(|a| a.acked_at)
                .min();
            if let Some(at) = arrived {
                let ms = at.saturating_duration_since(w.at).as_secs_f64() * 1e3;
                latencies.push(ms);
                per_change.entry(w.change).or_default().push(ms);
            }
        }
    }
    let ninety = (expected_proxies as f64 * 0.9).ceil() as usize;
    let mut to_ninety: Vec<f64> = per_change
        .into_values()
        .filter(|v| v.len() >= ninety.max(1))
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[ninety.max(1) - 1]
        })
        .collect();
    Some(Propagation::of(
        xds,
        changes.len() as u32,
        changes.len() as u64 * expected_proxies,
        &mut latencies,
        &mut to_ninety,
    ))
}

/// Registers the mesh of `scale` with the control plane: the simulated proxies' pods and the
/// real one (last); returns the pods and what was registered.
fn register(
    control_plane: &ControlPlane,
    scale: MeshScale,
    real: &MeshPod,
    stop: &Stop,
    note: &mut dyn FnMut(&str),
) -> Result<(Vec<MeshPod>, Registered), LabError> {
    let mut pods: Vec<MeshPod> = (0..scale.proxies)
        .map(|j| MeshPod::simulated(scale.kind, j, scale.services))
        .collect();
    pods.push(real.clone());
    let began = Instant::now();
    let registered = mesh::register(&control_plane.api, &scale, &pods, stop)?;
    note(&format!(
        "registered {} services, {} pods, {} endpoints, {} Istio objects in {:.1} s",
        scale.services,
        pods.len(),
        registered.endpoints,
        registered.virtual_services + registered.destination_rules,
        began.elapsed().as_secs_f64()
    ));
    Ok((pods, registered))
}

/// Waits for the real Envoy (run by `agent`), then connects the simulated proxies
/// ([`connect_proxies`]) and compares the twin with the real Envoy; a `stop` ends any of it.
fn connect_all(
    control_plane: &ControlPlane,
    envoy: &RealEnvoy,
    agent: &mut RoleProcess,
    (scale, pods): (MeshScale, &[MeshPod]),
    stop: &Stop,
    note: &mut dyn FnMut(&str),
) -> Result<(SimulatedProxies, Duration, Agreement), LabError> {
    let real_node = envoy.await_configured(agent, scale, stop, note)?;
    let (proxies, converged, twin) =
        connect_proxies(control_plane, scale, pods, &real_node, stop, note)?;
    // Nothing changed since: the twin and the real Envoy should hold the same.
    let agreement = agree(
        real_node["id"].as_str().unwrap_or_default(),
        &held_by_envoy(&envoy.config_dump()?),
        &proxies.held(twin),
    );
    crate::go_on(stop)?;
    Ok((proxies, converged, agreement))
}

/// Connects a simulated proxy per pod but the real one, and the real Envoy's twin (its own
/// node) last, paced as istiod admits new streams; returns them once each holds a full
/// configuration, with how long that took and the twin's index.
fn connect_proxies(
    control_plane: &ControlPlane,
    scale: MeshScale,
    pods: &[MeshPod],
    real_node: &Value,
    stop: &Stop,
    note: &mut dyn FnMut(&str),
) -> Result<(SimulatedProxies, Duration, usize), LabError> {
    let mut nodes: Vec<_> = pods[..scale.proxies as usize]
        .iter()
        .map(|p| p.node(scale.kind, real_node))
        .collect();
    // The twin: the real Envoy's own node, one more client.
    nodes.push(mesh::node_of(real_node));
    let twin = nodes.len() - 1;
    let proxies = SimulatedProxies::connect(control_plane.grpc, nodes, Some(twin))?;
    // The connections are paced (istiod admits so many new streams a second); then each
    // client needs its full configuration.
    let limit = Duration::from_secs_f64(f64::from(scale.proxies + 1) / CONNECTS_PER_SEC)
        + CONVERGE_AFTER_CONNECTS;
    let converged = proxies.wait_converged(limit, stop)?;
    note(&format!(
        "{} simulated proxies held a full configuration {:.1} s after the first connected ({} connections a second; {} reconnects)",
        scale.proxies,
        converged.as_secs_f64(),
        CONNECTS_PER_SEC,
        proxies.reconnects()
    ));
    Ok((proxies, converged, twin))
}

/// What an Envoy's config dump holds from xDS: per short type, name -> version.
pub fn held_by_envoy(dump: &Value) -> BTreeMap<&'static str, BTreeMap<String, String>> {
    let mut held: BTreeMap<&'static str, BTreeMap<String, String>> = BTreeMap::new();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    for config in dump["configs"].as_array().into_iter().flatten() {
        let items = |key: &str| config[key].as_array().cloned().unwrap_or_default();
        for c in items("dynamic_active_clusters") {
            held.entry("cds")
                .or_default()
                .insert(text(&c["cluster"]["name"]), text(&c["version_info"]));
        }
        for l in items("dynamic_listeners") {
            if let Some(active) = l.get("active_state") {
                held.entry("lds")
                    .or_default()
                    .insert(text(&l["name"]), text(&active["version_info"]));
            }
        }
        for r in items("dynamic_route_configs") {
            held.entry("rds")
                .or_default()
                .insert(text(&r["route_config"]["name"]), text(&r["version_info"]));
        }
        for e in items("dynamic_endpoint_configs") {
            held.entry("eds").or_default().insert(
                text(&e["endpoint_config"]["cluster_name"]),
                text(&e["version_info"]),
            );
        }
    }
    // Envoy lists the endpoints of every cluster; only EDS clusters' came over xDS.
    let eds: std::collections::HashSet<String> = dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| {
            c["dynamic_active_clusters"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|c| c["cluster"]["type"] == "EDS")
        .map(|c| {
            let service = text(&c["cluster"]["eds_cluster_config"]["service_name"]);
            if service.is_empty() {
                text(&c["cluster"]["name"])
            } else {
                service
            }
        })
        .collect();
    if let Some(endpoints) = held.get_mut("eds") {
        endpoints.retain(|name, _| eds.contains(name));
    }
    held
}

/// The real Envoy's holdings against its twin's: every name and version of each type.
pub fn agree(
    node: &str,
    real: &BTreeMap<&'static str, BTreeMap<String, String>>,
    twin: &BTreeMap<&'static str, BTreeMap<String, String>>,
) -> Agreement {
    let empty = BTreeMap::new();
    let mut differences = Vec::new();
    let mut resources = BTreeMap::new();
    for t in ["cds", "eds", "lds", "rds"] {
        let r = real.get(t).unwrap_or(&empty);
        let s = twin.get(t).unwrap_or(&empty);
        resources.insert(t.to_string(), r.len() as u32);
        for (name, version) in r {
            match s.get(name) {
                None => differences.push(format!("{t} {name}: only the real Envoy holds it")),
                Some(v) if v != version => differences.push(format!(
                    "{t} {name}: version {version:?} at the real Envoy, {v:?} at its twin"
                )),
                Some(_) => {}
            }
        }
        for name in s.keys().filter(|n| !r.contains_key(*n)) {
            differences.push(format!("{t} {name}: only the simulated twin holds it"));
        }
    }
    differences.truncate(20);
    Agreement {
        node: node.to_string(),
        resources,
        differences,
    }
}

/// istiod's `pilot_xds_pushes` by type, from its Prometheus text.
pub fn pushes(metrics: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("pilot_xds_pushes{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(kind) = labels
            .split("type=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let n = value.parse::<f64>().unwrap_or(0.0) as u64;
        *out.entry(kind.to_string()).or_insert(0) += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_spreads_each_rate_and_writes_one_of_a_kind_without_one() {
        let scale = MeshScale {
            kind: ProxyKind::Sidecar,
            proxies: 1,
            services: 1,
            istio_objects: 0,
            endpoint_churn_per_s: 2.0,
            config_churn_per_s: 0.0,
        };
        let s = schedule(scale, Duration::from_secs(3));
        let endpoints: Vec<_> = s
            .iter()
            .filter(|(_, k)| *k == ChangeKind::Endpoint)
            .collect();
        assert_eq!(endpoints.len(), 6);
        assert_eq!(
            s.iter().filter(|(_, k)| *k == ChangeKind::Config).count(),
            1
        );
        assert!(s.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn a_later_change_of_the_same_object_carries_an_earlier_one() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let written = vec![
            Written {
                kind: ChangeKind::Config,
                change: Change(0),
                at: at(0),
            },
            Written {
                kind: ChangeKind::Config,
                change: Change(1),
                at: at(50),
            },
        ];
        // The proxy only ever saw change 1 (istiod merged them), at 300 ms.
        let acks = vec![vec![AckAt {
            xds: XdsType::Cds,
            change: Change(1),
            acked_at: at(300),
        }]];
        let p = propagate(XdsType::Cds, &written, &acks, 1, 4).unwrap();
        assert_eq!((p.changes, p.expected, p.acked), (2, 2, 2));
        assert_eq!((p.p50_ms, p.max_ms), (250.0, 300.0));
        assert_eq!(p.to_90_percent_ms, Some(250.0));
        // Endpoints: a later change of another service carries nothing.
        let written = vec![
            Written {
                kind: ChangeKind::Endpoint,
                change: Change(0),
                at: at(0),
            },
            Written {
                kind: ChangeKind::Endpoint,
                change: Change(1),
                at: at(0),
            },
        ];
        let acks = vec![vec![AckAt {
            xds: XdsType::Eds,
            change: Change(1),
            acked_at: at(10),
        }]];
        let p = propagate(XdsType::Eds, &written, &acks, 1, 4).unwrap();
        assert_eq!((p.acked, p.missed()), (1, 1));
    }

    #[test]
    fn istiods_pushes_are_summed_by_type() {
        let text = "# HELP pilot_xds_pushes x\npilot_xds_pushes{type=\"cds\"} 12\npilot_xds_pushes{type=\"eds\"} 40\npilot_xds_pushes{type=\"cds_senderr\"} 1\npilot_xds 3\n";
        let p = pushes(text);
        assert_eq!(p["cds"], 12);
        assert_eq!(p["eds"], 40);
        assert_eq!(p["cds_senderr"], 1);
    }

    #[test]
    fn the_twin_agrees_only_with_the_same_names_and_versions() {
        let real: BTreeMap<_, _> = [("cds", [("a".to_string(), "1".to_string())].into())].into();
        let same = real.clone();
        assert!(agree("n", &real, &same).agrees());
        let other: BTreeMap<_, _> = [(
            "cds",
            [
                ("a".to_string(), "2".to_string()),
                ("b".to_string(), String::new()),
            ]
            .into(),
        )]
        .into();
        let a = agree("n", &real, &other);
        assert_eq!(a.differences.len(), 2, "{:?}", a.differences);
    }
}
