//! The experiment file: what to start, how to limit it, what load to drive, how often to repeat.
//! Read from YAML into typed sections; `--set key=value` edits the YAML tree before it is read.
//! Every mistake in the file is reported at once, each with its file, key and what was expected
//! (docs/experiment.md is the key-by-key reference). Topologies, protocols and loop modes are
//! the contracts' types (`meshbench_results`), proxy programs included (`Program`), read
//! straight from the file. Two matrices make the plan's cells: `load` for the topologies that
//! carry load, `control_plane` for the topology of that name, which runs alone.

use std::collections::BTreeMap;
use std::path::Path;

use meshbench_results::Program;
use meshbench_results::{
    Arrival, HaproxyReload, IdleStrategy, LoadPoint, LoopMode, PeerAuthentication, Protocol,
    ProxyKind, StepKind,
};

use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

use crate::changes::ChangeSection;
use crate::cluster::ClusterSection;
use crate::external::External;
use crate::read::Mistake;
use crate::ConfigError;

mod edits;
mod validate;

use edits::{apply_override, how_to_set, OldWords};

/// A whole experiment file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Free-form labels stored with the experiment (study, ticket, environment...).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub topologies: Vec<StepKind>,
    #[serde(default = "default_duration")]
    pub duration_secs: f64,
    #[serde(default = "default_warmup")]
    pub warmup_secs: f64,
    #[serde(default = "default_cooldown")]
    pub cooldown_secs: f64,
    /// Each variant runs this many times, interleaved with the other variants.
    #[serde(default = "one")]
    pub repeats: u32,
    #[serde(default = "default_sample_interval")]
    pub sample_interval_ms: u64,
    #[serde(default)]
    pub isolation: Isolation,
    #[serde(default)]
    pub load: LoadSection,
    /// Topology `control_plane`'s matrix: the meshes istiod serves, one step per cell. Absent:
    /// its defaults; given without that topology: refused (it would be ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneSection>,
    /// The L7 proxy of serveronly, clientonly, both, waypoint.
    #[serde(default)]
    pub proxy: Proxy,
    /// The L4 tunnels of ambient and waypoint.
    #[serde(default = "Proxy::tunnel_default")]
    pub tunnel: Proxy,
    #[serde(default)]
    pub gateway: Gateway,
    #[serde(default)]
    pub backend: Backend,
    #[serde(default)]
    pub limits: Limits,
    /// Systems meshbench does not start (topology `external`): URLs under load, roles read
    /// from Prometheus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<External>,
    /// Send every step's load from agents (`meshbench agent`) instead of this process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<FleetConfig>,
    /// Realise the lab's topologies on a Kubernetes cluster instead of this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSection>,
    /// Per-hop attribution: where each step's latency goes, from a sample of requests the
    /// lab's Envoys log (docs/answers.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<AttributionConfig>,
    /// What a change costs the traffic: changes applied to each gateway step under load, each
    /// step paired with the same step without them (`crate::changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<ChangeSection>>,
    /// One note per old key the file or its `--set`s used (`load.qps`...), for the caller to
    /// print: they are read as their new names.
    #[serde(skip)]
    pub old_words: Vec<String>,
}

/// `agents:`, how the fleet is gathered: how many agents dial in and where, or which listening
/// agents to dial. The token is never in the file: it comes from `--token-file` or
/// `MESHBENCH_AGENT_TOKEN`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Named `Agents` to serde, whose messages say the type's name ("expected struct Agents").
#[serde(deny_unknown_fields, rename = "Agents")]
pub struct FleetConfig {
    /// Agents that dial this coordinator: how many to wait for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// Where they dial in (default 127.0.0.1:7700).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// How long to wait for them, seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_secs: Option<f64>,
    /// Or: agents that listen, dialled by this coordinator (HOST:PORT each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

fn default_duration() -> f64 {
    10.0
}
fn default_warmup() -> f64 {
    2.0
}
fn default_cooldown() -> f64 {
    1.0
}
fn one() -> u32 {
    1
}
fn default_sample_interval() -> u64 {
    1000
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Every role on this machine's loopback.
    #[default]
    Loopback,
    /// Every role in its own network namespace, joined by veth pairs.
    Netns,
}

/// The file's `load:` section: the load matrix (every combination of its lists is one
/// [`meshbench_results::LoadPoint`] of the plan) and the settings every step shares.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
// Named `Load` to serde, whose messages say the type's name ("expected struct Load").
#[serde(deny_unknown_fields, default, rename = "Load")]
pub struct LoadSection {
    pub mode: LoopMode,
    /// Requests per second (open loop); the file's old word `qps` is still read.
    pub rate_rps: Vec<f64>,
    /// Connections the generator keeps open.
    pub connections: Vec<u32>,
    /// Closed loop: requests in flight at most, fewer than the connections, which then are a
    /// pool kept per host (as k6 virtual users keep theirs), so that many hosts do not mean a
    /// new connection per request. Empty: one per connection (x streams). The file's old
    /// `connection_pool` is still read (its `connections` were these).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub in_flight: Vec<u32>,
    /// Response body size the backend sends.
    pub response_bytes: Vec<u64>,
    /// Request body size (POST when above 0).
    pub request_bytes: u64,
    /// `uniform`: evenly spaced arrivals. `poisson`: random gaps, a stronger form of fortio's
    /// ±10 % jitter. The file's old word `jitter` (`false`, `true`) is still read.
    pub arrival: Vec<Arrival>,
    /// How the open loop waits for its sends (`meshbench run --idle-strategy`).
    pub idle_strategy: IdleStrategy,
    /// The open loop's pacing budget in µs: how late a send may leave after its intended
    /// instant (`meshbench run --pacing-slack`); absent: auto, from the machine's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacing_slack_us: Option<u64>,
    pub protocol: Protocol,
    /// HTTP/2 streams per connection.
    pub streams: u32,
    /// Generator threads (0: one per core).
    pub threads: u32,
    pub timeout_ms: u64,
}

impl Default for LoadSection {
    fn default() -> Self {
        LoadSection {
            mode: LoopMode::Open,
            rate_rps: vec![1000.0],
            connections: vec![16],
            in_flight: Vec::new(),
            response_bytes: vec![LoadPoint::DEFAULT_RESPONSE_BYTES],
            request_bytes: 0,
            arrival: vec![Arrival::Uniform],
            idle_strategy: IdleStrategy::Auto,
            pacing_slack_us: None,
            protocol: Protocol::Http1,
            streams: 1,
            threads: 0,
            timeout_ms: 5000,
        }
    }
}

/// The file's `control_plane:` section: the control-plane matrix (every combination of its five
/// lists is one [`meshbench_results::MeshScale`] of the plan, as `load`'s lists make load
/// points) and what every such step shares. Each list key takes one number or a list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
// Named `ControlPlane` to serde, whose messages say the type's name.
#[serde(deny_unknown_fields, default, rename = "ControlPlane")]
pub struct ControlPlaneSection {
    /// Simulated proxies connected to istiod over ADS (the one real Envoy comes on top).
    #[serde(deserialize_with = "number_or_list")]
    pub proxies: Vec<u32>,
    /// Kubernetes Services, each with its EndpointSlice (the simulated proxies are its pods).
    #[serde(deserialize_with = "number_or_list")]
    pub services: Vec<u32>,
    /// Istio objects: VirtualServices and DestinationRules.
    #[serde(deserialize_with = "number_or_list")]
    pub istio_objects: Vec<u32>,
    /// Endpoint changes written per second during the window (an EndpointSlice edited); 0
    /// still writes one, mid-window.
    #[serde(deserialize_with = "number_or_list")]
    pub endpoint_churn_per_s: Vec<f64>,
    /// Configuration changes written per second during the window (a ServiceEntry edited); 0
    /// still writes one, mid-window.
    #[serde(deserialize_with = "number_or_list")]
    pub config_churn_per_s: Vec<f64>,
    /// What the proxies connect as, one value for every step.
    pub kind: ProxyKind,
    /// How long after the window a written change may still take to reach every proxy; a
    /// (change, proxy) pair not ACKed by then is counted as missed.
    pub settle_secs: f64,
}

impl Default for ControlPlaneSection {
    fn default() -> Self {
        ControlPlaneSection {
            proxies: vec![100],
            services: vec![50],
            istio_objects: vec![0],
            endpoint_churn_per_s: vec![0.0],
            config_churn_per_s: vec![0.0],
            kind: ProxyKind::Sidecar,
            settle_secs: 30.0,
        }
    }
}

/// Most simulated proxies, services or Istio objects a control-plane cell may ask for.
pub const MAX_MESH_COUNT: u32 = 20_000;

/// Most changes of one kind a control-plane step writes per second.
pub const MAX_CHURN_PER_S: f64 = 1000.0;

/// Longest `control_plane.settle_secs`.
pub const MAX_SETTLE_SECS: f64 = 600.0;

impl ControlPlaneSection {
    /// Every list has a value and every value is in its range.
    fn validate(&self, p: &mut Vec<String>) {
        let ControlPlaneSection {
            proxies,
            services,
            istio_objects,
            endpoint_churn_per_s,
            config_churn_per_s,
            kind: _, // either word its type reads is one
            settle_secs,
        } = self;
        for (key, values, least) in [
            ("proxies", proxies, 1),
            ("services", services, 1),
            ("istio_objects", istio_objects, 0),
        ] {
            if values.is_empty() {
                p.push(format!("control_plane.{key}: expected at least one count"));
            }
            for (i, v) in values.iter().enumerate() {
                if !(least..=MAX_MESH_COUNT).contains(v) {
                    p.push(format!(
                        "control_plane.{key}[{i}]: expected a whole number from {least} to {MAX_MESH_COUNT}, found {v}"
                    ));
                }
            }
        }
        for (key, values) in [
            ("endpoint_churn_per_s", endpoint_churn_per_s),
            ("config_churn_per_s", config_churn_per_s),
        ] {
            if values.is_empty() {
                p.push(format!("control_plane.{key}: expected at least one rate"));
            }
            for (i, v) in values.iter().enumerate() {
                if !(v.is_finite() && (0.0..=MAX_CHURN_PER_S).contains(v)) {
                    p.push(format!(
                        "control_plane.{key}[{i}]: expected changes per second from 0 to {MAX_CHURN_PER_S}, found {v}"
                    ));
                }
            }
        }
        if !(settle_secs.is_finite() && *settle_secs > 0.0 && *settle_secs <= MAX_SETTLE_SECS) {
            p.push(format!(
                "control_plane.settle_secs: expected a number of seconds above 0 and at most {MAX_SETTLE_SECS}, found {settle_secs}"
            ));
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Proxy {
    /// Which program plays the role.
    #[serde(rename = "type")]
    pub kind: Program,
    /// Worker processes or threads; 0 follows the CPU allotment (as Envoy's --concurrency).
    pub workers: u32,
    /// Mutual TLS between the two proxies of `both`, and between the tunnels.
    pub mtls: bool,
    /// `type: istio` only: the mesh's PeerAuthentication when `mtls` is on (absent: Istio's
    /// default, permissive). One value or a list: with two, each sidecar topology runs once
    /// per value, as variants.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub peer_authentication: Vec<PeerAuthentication>,
    /// For `type: command`: the program and its arguments. `{config}` is the rendered
    /// template's path; `{listen_port}`, `{upstream_port}` and `{workers}` are filled in.
    pub command: Vec<String>,
    /// For `type: command`: the configuration file's text, with the same placeholders.
    pub config_template: String,
    /// The program to measure instead when `type`'s is not installed here (the presets name
    /// envoy with nginx as its stand-in); the run says so in one line. Unset: a missing
    /// program fails the steps that need it.
    pub fallback: Option<Program>,
    /// Envoy only: add upstream stand-ins for what Istio's telemetry filters do per request
    /// (a Lua filter exchanging peer metadata headers, the stats access logger recording a
    /// request counter and duration and size histograms with Istio's labels). Off: Envoy with
    /// Istio's filter chain less its own filters (docs/envoy.md).
    pub istio_telemetry: bool,
}

impl Proxy {
    fn tunnel_default() -> Proxy {
        Proxy {
            kind: Program::Haproxy,
            mtls: true,
            ..Proxy::default()
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Gateway {
    /// The gateway program, or a list of them: with several, the gateway topology runs once
    /// per program, as variants (`gateway nginx`, `gateway contour`...), the same plan through
    /// each, so that the answers table which costs least per 1,000 RPS.
    #[serde(rename = "type", deserialize_with = "one_or_many")]
    pub kinds: Vec<Program>,
    /// The program to measure instead when `type`'s is not installed here.
    pub fallback: Option<Program>,
    pub domains: u32,
    pub paths: u32,
    pub workers: u32,
    /// `type: haproxy` only: how its gateway is reloaded when changed (`seamless`, its
    /// master-worker reload, by default; `plain`, a new process with `-sf`). One value or a
    /// list: with two, haproxy's gateway runs once per value, as variants.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub haproxy_reload: Vec<HaproxyReload>,
}

impl Gateway {
    /// Whether `program` is one of the listed gateways.
    pub fn runs(&self, program: Program) -> bool {
        self.kinds.contains(&program)
    }

    /// Whether a listed gateway is configured by a control plane the lab starts (istiod,
    /// Contour).
    pub fn controlled(&self) -> bool {
        self.runs(Program::Istio) || self.runs(Program::Contour)
    }

    /// The gateway of a step: its variant's when the file lists several, else the one listed.
    pub fn of(&self, variant: Option<Program>) -> Program {
        variant.or(self.kinds.first().copied()).unwrap_or_default()
    }
}

impl Default for Gateway {
    fn default() -> Self {
        Gateway {
            kinds: vec![Program::Nginx],
            fallback: None,
            domains: 10,
            paths: 10,
            workers: 0,
            haproxy_reload: Vec::new(),
        }
    }
}

/// The built-in backend (`meshbench backend`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Backend {
    /// Added to every response.
    pub delay_ms: u64,
    /// How the delay is waited out.
    pub delay_mode: DelayMode,
    /// Worker threads (0: one per core).
    pub threads: u32,
    /// Replicas behind the gateway (the study ran nginx x 3), each a role of its own
    /// (`backend`, `backend_2`, ...) under `limits.backend`, balanced by the gateway in turn;
    /// the baseline's direct path has no balancer and keeps one.
    pub replicas: u8,
}

impl Default for Backend {
    fn default() -> Self {
        Backend {
            delay_ms: 0,
            delay_mode: DelayMode::default(),
            threads: 0,
            replicas: 1,
        }
    }
}

/// How the backend waits out its delay (`meshbench backend --delay-mode`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum DelayMode {
    /// No CPU; late by however late the kernel wakes the thread (tens of µs, ms when busy).
    #[default]
    Sleep,
    /// The last 300 µs spun: the delay to within µs, for that much CPU per response. For a
    /// known delay whose truth matters (attribution's).
    Spin,
}

impl DelayMode {
    /// Its word on the backend's command line.
    pub fn word(self) -> &'static str {
        match self {
            DelayMode::Sleep => "sleep",
            DelayMode::Spin => "spin",
        }
    }
}

/// CPU and memory limits per role. `cpus` may be a list: each value is a variant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Every L7 proxy: sidecars, the gateway, the waypoint.
    pub proxy: RoleLimits,
    /// The L4 tunnels.
    pub tunnel: RoleLimits,
    pub backend: RoleLimits,
    /// The load generator (this process): `cpuset` only.
    pub client: RoleLimits,
    /// The control plane the lab runs for the proxies it configures (istiod, Contour): `cpus`
    /// (a list sweeps it, as the study swept Contour's cores), `cpuset`, `memory_mib`.
    pub control_plane: RoleLimits,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RoleLimits {
    /// CPU quotas in cores (0.25 = a quarter of one core); each value is one variant.
    pub cpus: Vec<f64>,
    /// CPUs to pin to, as the kernel writes them ("0", "0-1", "0,2"); a lone CPU may be a
    /// number (`cpuset: 0`, `--set limits.client.cpuset=0`), as YAML reads it.
    #[serde(deserialize_with = "cpu_list")]
    pub cpuset: Option<String>,
    pub memory_mib: Option<u64>,
}

/// One value (a word), or a list of them.
fn one_or_many<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    one_or_a_list(d, "a word or a list of words")
}

/// One number, or a list of them (the `control_plane` matrix keys: `proxies: 100` is
/// `proxies: [100]`).
fn number_or_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    one_or_a_list(d, "a number or a list of numbers")
}

/// One value (a word or a number), or a list of them; `expecting` names what was wanted when
/// it is neither.
fn one_or_a_list<'de, D, T>(d: D, expecting: &'static str) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    use serde::de::value::{F64Deserializer, I64Deserializer, StrDeserializer, U64Deserializer};
    struct OneOrAList<T> {
        expecting: &'static str,
        one: std::marker::PhantomData<T>,
    }
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for OneOrAList<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            T::deserialize(StrDeserializer::<E>::new(v)).map(|one| vec![one])
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            T::deserialize(U64Deserializer::<E>::new(v)).map(|one| vec![one])
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            T::deserialize(I64Deserializer::<E>::new(v)).map(|one| vec![one])
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            T::deserialize(F64Deserializer::<E>::new(v)).map(|one| vec![one])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut all = Vec::new();
            while let Some(v) = seq.next_element()? {
                all.push(v);
            }
            Ok(all)
        }
    }
    d.deserialize_any(OneOrAList {
        expecting,
        one: std::marker::PhantomData,
    })
}

/// A cpuset as text, whether YAML read it as text (`0-1`, `0,2`) or as a number (`0`).
fn cpu_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct CpuList;
    impl<'de> serde::de::Visitor<'de> for CpuList {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a CPU list such as 0, 0-1 or 0,2")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(CpuList)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            match u64::try_from(v) {
                Ok(cpu) => self.visit_u64(cpu),
                Err(_) => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
            }
        }
    }
    d.deserialize_option(CpuList)
}

impl FleetConfig {
    /// The fleet is gathered one way: agents that dial in, or agents that listen.
    fn validate(&self, p: &mut Vec<String>) {
        let FleetConfig {
            count,
            listen: _,
            wait_secs: _,
            addresses,
        } = self;
        match (count, addresses.is_empty()) {
            (Some(0), _) => p.push("agents.count: must be at least 1".into()),
            (Some(_), false) => p.push(
                "agents: give count (agents dial in) or addresses (agents listen), not both".into(),
            ),
            (None, true) => p.push(
                "agents: give count (how many dial in) or addresses (agents that listen)".into(),
            ),
            (Some(_), true) | (None, false) => {}
        }
    }
}

/// Longest `duration_secs`, `warmup_secs` or `cooldown_secs`: a week (the runner turns them
/// into `Duration`s and deadlines, which 1e300 seconds is not).
pub const MAX_SECS: f64 = 7.0 * 86_400.0;

/// Reads an experiment file, applies `key=value` overrides, checks everything.
pub fn load(path: &Path, overrides: &[String]) -> Result<Experiment, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    let mut e = parse(&file, &text, overrides)?;
    if let (Some(c), Some(dir)) = (e.cluster.as_mut(), path.parent()) {
        c.resolve_paths(dir);
    }
    if let (Some(x), Some(dir)) = (e.external.as_mut(), path.parent()) {
        x.resolve_paths(dir);
    }
    Ok(e)
}

/// Parses experiment YAML (`file` names it in messages).
pub fn parse(file: &str, text: &str, overrides: &[String]) -> Result<Experiment, ConfigError> {
    let mut tree: Value = serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Syntax {
        file: file.to_string(),
        reason: e.to_string(),
    })?;
    if tree.is_null() {
        tree = Value::Mapping(Mapping::new());
    }
    let mut problems = Vec::new();
    let mut old_words = OldWords::default();
    old_words.in_file(&mut tree, &mut problems);
    for o in overrides {
        if let Err(p) = apply_override(&mut tree, &old_words.in_override(o)) {
            problems.push(p.to_string());
        }
    }
    old_words.jitter_as_arrival(&mut tree);
    old_words.pool_as_connections(&mut tree, &mut problems);
    if !tree.is_mapping() {
        return Err(ConfigError::Invalid {
            file: file.to_string(),
            problems: vec![
                "the file must be a mapping of keys (name:, topologies:, load: ...)".into(),
            ],
        });
    }
    // The types are the schema: every key's type, every unknown key, at once.
    let read = crate::read::every_mistake::<Experiment>(tree);
    if let Err(mistakes) = &read {
        problems.extend(mistakes.iter().map(Mistake::message));
    }
    let mut experiment = match read {
        Ok(e) if problems.is_empty() => e,
        _ => {
            let problems = problems
                .into_iter()
                .map(|p| old_words.in_their_words(p))
                .collect();
            return Err(ConfigError::Invalid {
                file: file.to_string(),
                problems: how_to_set(problems, overrides),
            });
        }
    };
    let problems: Vec<String> = experiment
        .validate()
        .into_iter()
        .map(|p| old_words.in_their_words(p))
        .collect();
    experiment.old_words = old_words.notes;
    if problems.is_empty() {
        Ok(experiment)
    } else {
        Err(ConfigError::Invalid {
            file: file.to_string(),
            problems,
        })
    }
}

/// `attribution:`: which share of the measured requests is tagged and split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributionConfig {
    /// The share of measured requests tagged (0 < sample <= 1): one in round(1/sample).
    #[serde(default = "AttributionConfig::default_sample")]
    pub sample: f64,
}

impl AttributionConfig {
    fn default_sample() -> f64 {
        0.01
    }

    /// One measured request in this many is tagged.
    pub fn every(&self) -> u32 {
        (1.0 / self.sample).round().clamp(1.0, u32::MAX as f64) as u32
    }
}

/// CPU numbers run below this: the largest `NR_CPUS` a Linux kernel can be built with.
pub const MAX_CPUS: usize = 8192;

/// `0`, `0-3`, `0,2-3` into CPU numbers; None if it is not such a list or names a CPU at or
/// above [`MAX_CPUS`] (so that `0-99999999999` is not a list of 10^11 numbers).
pub fn parse_cpuset(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let cpu = |n: &str| n.trim().parse::<usize>().ok().filter(|&c| c < MAX_CPUS);
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (cpu(a)?, cpu(b)?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(cpu(part)?),
        }
        if cpus.len() > MAX_CPUS {
            return None;
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanSize;

    const MINIMAL: &str = "name: t\ntopologies: [baseline, serveronly]\n";

    #[test]
    fn a_minimal_file_takes_the_defaults() {
        let e = parse("t.yaml", MINIMAL, &[]).unwrap();
        assert_eq!(
            e.topologies,
            vec![
                StepKind::Chain(meshbench_results::Topology::Baseline),
                StepKind::Chain(meshbench_results::Topology::Serveronly)
            ]
        );
        assert_eq!(e.duration_secs, 10.0);
        assert_eq!(e.load.rate_rps, vec![1000.0]);
        assert_eq!(e.tunnel.kind, Program::Haproxy);
        assert!(e.tunnel.mtls);
    }

    #[test]
    fn every_mistake_is_reported_at_once_with_its_key() {
        let text = "name: t\ntopologies: [baseline, sidecar]\nduration: 5\nload:\n  qps: [100, fast]\n  conections: [4]\nlimits:\n  proxy:\n    cpus: [-1]\n";
        let err = parse("bad.yaml", text, &[]).unwrap_err().to_string();
        assert!(err.starts_with("bad.yaml: "), "{err}");
        assert!(err.contains("duration: unknown key"), "{err}");
        assert!(
            err.contains("topologies[1]: unknown variant `sidecar`"),
            "{err}"
        );
        assert!(err.contains("load.qps[1]"), "{err}");
        assert!(err.contains("load.conections: unknown key"), "{err}");
        // Range checks run once the types are right; here they are blocked by the type errors.
        let err = parse(
            "bad.yaml",
            "name: t\ntopologies: [baseline]\nrepeats: 0\nlimits:\n  proxy:\n    cpus: [-1]\n    cpuset: 'x'\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        for key in ["repeats", "limits.proxy.cpus[0]", "limits.proxy.cpuset"] {
            assert!(err.contains(key), "{key} in {err}");
        }
    }

    /// The keys are the struct's: `pacing_slack_us`, which the section's default leaves
    /// out when written, was once refused as unknown because the known keys were read off
    /// that default.
    #[test]
    fn every_key_of_the_struct_is_a_key_of_the_file() {
        let e = parse("t.yaml", MINIMAL, &["load.pacing_slack_us=50".into()]).unwrap();
        assert_eq!(e.load.pacing_slack_us, Some(50));
        let err = parse("t.yaml", MINIMAL, &["load.pacing_slack=50".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("load.pacing_slack: unknown key; expected one of mode, rate_rps, connections, in_flight, response_bytes, request_bytes, arrival, idle_strategy, pacing_slack_us"),
            "{err}"
        );
        let err = parse(
            "t.yaml",
            MINIMAL,
            &["agents.count=0".into(), "agent=1".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(
                "agent: unknown key; expected one of name, description, labels, topologies"
            ),
            "{err}"
        );
        assert!(err.contains("load, control_plane, proxy"), "{err}");
        let err = parse("t.yaml", CONTROL_PLANE, &["control_plane.proxy=1".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("control_plane.proxy: unknown key; expected one of proxies, services, istio_objects, endpoint_churn_per_s, config_churn_per_s, kind, settle_secs"),
            "{err}"
        );
    }

    const CONTROL_PLANE: &str = "name: t\ntopologies: [control_plane]\n";

    #[test]
    fn a_control_plane_section_reads_numbers_or_lists_and_takes_its_defaults() {
        let e = parse("t.yaml", CONTROL_PLANE, &[]).unwrap();
        assert_eq!(e.control_plane, None);
        let m = e.control_plane_matrix();
        assert_eq!(m, ControlPlaneSection::default());
        assert_eq!(
            (
                m.proxies,
                m.services,
                m.istio_objects,
                m.kind,
                m.settle_secs
            ),
            (vec![100], vec![50], vec![0], ProxyKind::Sidecar, 30.0)
        );
        assert_eq!(
            (m.endpoint_churn_per_s, m.config_churn_per_s),
            (vec![0.0], vec![0.0])
        );
        let file = format!(
            "{CONTROL_PLANE}control_plane:\n  proxies: [50, 100]\n  services: 20\n  endpoint_churn_per_s: 0.5\n  config_churn_per_s: [0, 1.5]\n  kind: gateway\n  settle_secs: 10\n"
        );
        let e = parse("t.yaml", &file, &["control_plane.istio_objects=40".into()]).unwrap();
        let m = e.control_plane.unwrap();
        assert_eq!(m.proxies, [50, 100]);
        assert_eq!(m.services, [20]);
        assert_eq!(m.istio_objects, [40]);
        assert_eq!(m.endpoint_churn_per_s, [0.5]);
        assert_eq!(m.config_churn_per_s, [0.0, 1.5]);
        assert_eq!((m.kind, m.settle_secs), (ProxyKind::Gateway, 10.0));
        // Wrong types, each named with its key.
        let err = parse(
            "t.yaml",
            CONTROL_PLANE,
            &[
                "control_plane.proxies=lots".into(),
                "control_plane.services=[1.5]".into(),
                "control_plane.istio_objects=-1".into(),
                "control_plane.kind=router".into(),
            ],
        )
        .unwrap_err()
        .to_string();
        for want in [
            "control_plane.proxies: invalid type: string \"lots\", expected a whole number",
            "control_plane.services[0]: invalid type: floating point `1.5`, expected a whole number",
            "control_plane.istio_objects: invalid value: integer `-1`, expected a whole number",
            "control_plane.kind: unknown variant `router`, expected `sidecar` or `gateway`",
        ] {
            assert!(err.contains(want), "{want} in {err}");
        }
    }

    #[test]
    fn control_plane_runs_alone_and_its_section_goes_with_it() {
        let file = "name: t\ntopologies: [control_plane, baseline, both]\nagents:\n  count: 2\nattribution: {sample: 0.1}\ncluster:\n  image: meshbench:1\n  coordinator: 10.0.0.1:7700\n  prometheus_url: http://prometheus:9090\nexternal:\n  prometheus_url: http://127.0.0.1:9090\n  variants:\n    - {name: direct, url: 'http://127.0.0.1:1/'}\nlimits:\n  backend:\n    cpus: [1, 2]\n";
        let err = parse("t.yaml", file, &[]).unwrap_err().to_string();
        assert!(
            err.contains("t.yaml: topologies: control_plane runs alone (it sends no load); put it in its own file, without baseline, both"),
            "{err}"
        );
        for key in ["cluster", "agents", "external", "attribution"] {
            let line = format!("t.yaml: {key}: a control_plane step runs istiod");
            assert_eq!(err.matches(&line).count(), 1, "{line} in {err}");
        }
        assert!(
            err.contains("t.yaml: limits.backend.cpus: a control_plane step sweeps no CPU"),
            "{err}"
        );
        // The external section is refused once, by the control-plane rule.
        let err = parse(
            "t.yaml",
            &format!("{CONTROL_PLANE}external:\n  prometheus_url: http://127.0.0.1:9090\n  variants:\n    - {{name: direct, url: 'http://127.0.0.1:1/'}}\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err.lines().filter(|l| l.contains("external")).count(),
            1,
            "{err}"
        );
        // One CPU value is no sweep.
        assert!(parse("t.yaml", CONTROL_PLANE, &["limits.proxy.cpus=[2]".into()]).is_ok());
        // The section without the topology would be ignored.
        let err = parse("t.yaml", MINIMAL, &["control_plane.proxies=10".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "t.yaml: control_plane: given, but topologies does not list control_plane"
            ),
            "{err}"
        );
    }

    #[test]
    fn every_control_plane_bound_is_refused_with_its_key() {
        let cases = [
            ("proxies=0", "control_plane.proxies[0]: expected a whole number from 1 to 20000, found 0"),
            ("proxies=[100, 20001]", "control_plane.proxies[1]: expected a whole number from 1 to 20000, found 20001"),
            ("proxies=[]", "control_plane.proxies: expected at least one count"),
            ("services=0", "control_plane.services[0]: expected a whole number from 1 to 20000"),
            ("services=20001", "control_plane.services[0]: expected a whole number from 1 to 20000"),
            ("istio_objects=20001", "control_plane.istio_objects[0]: expected a whole number from 0 to 20000"),
            ("endpoint_churn_per_s=-1", "control_plane.endpoint_churn_per_s[0]: expected changes per second from 0 to 1000, found -1"),
            ("endpoint_churn_per_s=[]", "control_plane.endpoint_churn_per_s: expected at least one rate"),
            ("config_churn_per_s=1000.5", "control_plane.config_churn_per_s[0]: expected changes per second from 0 to 1000"),
            ("config_churn_per_s=[0, .nan]", "control_plane.config_churn_per_s[1]: expected changes per second from 0 to 1000, found NaN"),
            ("settle_secs=0", "control_plane.settle_secs: expected a number of seconds above 0 and at most 600, found 0"),
            ("settle_secs=600.5", "control_plane.settle_secs: expected a number of seconds above 0 and at most 600"),
            ("settle_secs=.inf", "control_plane.settle_secs: expected a number of seconds above 0"),
        ];
        for (set, want) in cases {
            let err = parse("t.yaml", CONTROL_PLANE, &[format!("control_plane.{set}")])
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{set}: want {want} in {err}");
        }
        // Every problem at once, and the bounds themselves are accepted.
        let file = format!("{CONTROL_PLANE}control_plane:\n  proxies: 0\n  services: 20001\n  istio_objects: 20001\n  endpoint_churn_per_s: -1\n  config_churn_per_s: 1001\n  settle_secs: 0\n");
        let err = parse("t.yaml", &file, &[]).unwrap_err().to_string();
        let keys: Vec<&str> = err
            .lines()
            .filter_map(|l| l.strip_prefix("t.yaml: control_plane."))
            .filter_map(|l| l.split([':', '[']).next())
            .collect();
        assert_eq!(
            keys,
            [
                "proxies",
                "services",
                "istio_objects",
                "endpoint_churn_per_s",
                "config_churn_per_s",
                "settle_secs"
            ],
            "{err}"
        );
        let edges = [
            "control_plane.proxies=[1, 20000]",
            "control_plane.services=[1, 20000]",
            "control_plane.istio_objects=[0, 20000]",
            "control_plane.endpoint_churn_per_s=[0, 1000]",
            "control_plane.config_churn_per_s=[0, 0.25, 1000]",
            "control_plane.settle_secs=600",
        ]
        .map(String::from);
        assert!(parse("t.yaml", CONTROL_PLANE, &edges).is_ok());
    }

    #[test]
    fn the_plan_size_counts_the_control_plane_matrix() {
        let ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]";
        let sets: Vec<String> = [
            "proxies",
            "services",
            "istio_objects",
            "endpoint_churn_per_s",
            "config_churn_per_s",
        ]
        .iter()
        .map(|k| format!("control_plane.{k}={ten}"))
        .chain(["repeats=2".to_string()])
        .collect();
        let err = parse("t.yaml", CONTROL_PLANE, &sets)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the plan has 200000 steps (100000 control-plane cells x 2 repeats); at most 100000 are run: shorten a list of control_plane, or lower repeats"),
            "{err}"
        );
        // The load matrix counts for nothing here.
        let e = parse(
            "t.yaml",
            CONTROL_PLANE,
            &[
                "load.rate_rps=[1, 2, 3]".into(),
                "control_plane.proxies=[1, 2]".into(),
                "repeats=3".into(),
            ],
        )
        .unwrap();
        let size = PlanSize::of(&e);
        assert_eq!((size.variants, size.mesh_points, size.steps()), (0, 2, 6));
        assert_eq!(crate::Plan::compile(&e).steps.len(), 6);
    }

    #[test]
    fn overrides_edit_any_key() {
        let e = parse(
            "t.yaml",
            MINIMAL,
            &[
                "duration_secs=3".into(),
                "load.rate_rps=[10, 20]".into(),
                "limits.proxy.cpus=[0.5]".into(),
                "proxy.type=haproxy".into(),
            ],
        )
        .unwrap();
        assert_eq!(e.duration_secs, 3.0);
        assert_eq!(e.load.rate_rps, vec![10.0, 20.0]);
        assert!(e.old_words.is_empty(), "{:?}", e.old_words);
        assert_eq!(e.limits.proxy.cpus, vec![0.5]);
        assert_eq!(e.proxy.kind, Program::Haproxy);
        let err = parse(
            "t.yaml",
            MINIMAL,
            &["nokey".into(), "load.rate_rps.x=1".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("expected KEY=VALUE"), "{err}");
        assert!(err.contains("load.rate_rps: invalid type: map"), "{err}");
    }

    #[test]
    fn the_old_load_words_are_read_as_the_new_with_a_note_each() {
        let old =
            "name: t\ntopologies: [baseline]\nload:\n  qps: [100, 200]\n  jitter: [false, true]\n";
        let new = "name: t\ntopologies: [baseline]\nload:\n  rate_rps: [100, 200]\n  arrival: [uniform, poisson]\n";
        let (e_old, e_new) = (
            parse("t.yaml", old, &[]).unwrap(),
            parse("t.yaml", new, &[]).unwrap(),
        );
        assert_eq!(e_old.load, e_new.load);
        assert_eq!(
            crate::Plan::compile(&e_old).steps,
            crate::Plan::compile(&e_new).steps
        );
        assert!(e_new.old_words.is_empty());
        assert_eq!(
            e_old.old_words,
            [
                "load.qps is an old name, read as load.rate_rps: write load.rate_rps instead (the same values)",
                "load.jitter is an old name, read as load.arrival: write load.arrival instead (false: uniform, true: poisson)",
            ]
        );
        // In a --set, the old key renames the new one's values.
        let e = parse(
            "t.yaml",
            new,
            &["load.qps=[300]".into(), "load.jitter=[true]".into()],
        )
        .unwrap();
        assert_eq!(e.load.rate_rps, vec![300.0]);
        assert_eq!(e.load.arrival, vec![Arrival::Poisson]);
        assert_eq!(e.old_words.len(), 2);
        let both = "name: t\ntopologies: [baseline]\nload:\n  qps: [1]\n  rate_rps: [2]\n";
        let err = parse("t.yaml", both, &[]).unwrap_err().to_string();
        assert!(
            err.contains(
                "load.qps: given with load.rate_rps, its new name; keep only load.rate_rps"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_lone_cpu_is_a_cpuset_written_as_a_number_too() {
        let e = parse("t.yaml", MINIMAL, &["limits.client.cpuset=0".into()]).unwrap();
        assert_eq!(e.limits.client.cpuset.as_deref(), Some("0"));
        let file = format!("{MINIMAL}limits:\n  proxy:\n    cpuset: 1\n");
        let e = parse("t.yaml", &file, &[]).unwrap();
        assert_eq!(e.limits.proxy.cpuset.as_deref(), Some("1"));
        let err = parse("t.yaml", MINIMAL, &["limits.client.cpuset=[0, 1]".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("limits.client.cpuset")
                && err.contains("a CPU list such as 0, 0-1 or 0,2"),
            "{err}"
        );
    }

    #[test]
    fn a_set_value_of_the_wrong_type_says_how_to_write_it() {
        for (set, written) in [
            ("name=1234", r#"--set 'name="1234"'"#),
            ("labels.build=42", r#"--set 'labels.build="42"'"#),
            ("topologies=baseline", "--set 'topologies=[baseline]'"),
        ] {
            let err = parse("t.yaml", MINIMAL, &[set.into()])
                .unwrap_err()
                .to_string();
            assert!(err.contains(written), "{set}: want {written} in {err}");
        }
        // A mistake in the file itself is not blamed on --set.
        let err = parse("t.yaml", "name: 7\ntopologies: [baseline]\n", &[])
            .unwrap_err()
            .to_string();
        assert!(!err.contains("--set"), "{err}");
    }

    #[test]
    fn the_self_checks_advice_names_a_key_that_set_accepts() {
        use meshbench_engine::check::{judge, Figures};
        use meshbench_results::Cause;
        let check = judge(&Figures {
            requests: 100,
            sends: 100,
            most_waiting_thread: 0.5,
            ..Figures::default()
        });
        let advice = &check.findings[0];
        assert_eq!(advice.cause, Cause::CpuContention);
        let key = advice
            .message
            .split(|c: char| c.is_whitespace() || c == ')' || c == ',')
            .find(|w| w.starts_with("limits."))
            .unwrap_or_else(|| panic!("no experiment key in {}", advice.message));
        let e = parse("t.yaml", MINIMAL, &[format!("{key}=0")]).unwrap();
        assert_eq!(e.limits.client.cpuset.as_deref(), Some("0"));
    }

    #[test]
    fn requests_in_flight_need_a_closed_loop_and_connections_to_carry_them() {
        let file =
            "name: t\ntopologies: [gateway]\nload:\n  connections: [32, 64]\n  in_flight: [8, 64]\n";
        let err = parse("t.yaml", file, &[]).unwrap_err().to_string();
        assert!(err.contains("load.in_flight: caps a closed loop"), "{err}");
        assert!(err.contains("64 is more than 32 connections"), "{err}");
        let ok = parse(
            "t.yaml",
            file,
            &["load.mode=closed".into(), "load.connections=[640]".into()],
        )
        .unwrap();
        let loads: Vec<String> = crate::Plan::compile(&ok)
            .steps
            .iter()
            .map(|s| s.load().unwrap().to_string())
            .collect();
        assert_eq!(
            loads,
            [
                "max rps x 640 conns, 8 in flight",
                "max rps x 640 conns, 64 in flight"
            ]
        );
    }

    #[test]
    fn an_old_connection_pool_is_read_as_connections_and_its_connections_as_in_flight() {
        let old = "name: t\ntopologies: [gateway]\nload:\n  mode: closed\n  connection_pool: 320\n  connections: [32]\n";
        let new = "name: t\ntopologies: [gateway]\nload:\n  mode: closed\n  connections: [320]\n  in_flight: [32]\n";
        let (e_old, e_new) = (
            parse("t.yaml", old, &[]).unwrap(),
            parse("t.yaml", new, &[]).unwrap(),
        );
        assert_eq!(e_old.load, e_new.load);
        assert_eq!(e_old.old_words.len(), 1, "{:?}", e_old.old_words);
        assert!(e_old.old_words[0].starts_with("load.connection_pool is an old name"));
        assert!(e_new.old_words.is_empty());
        // In a --set too, and a pool of 0 was the default.
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [gateway]\nload:\n  mode: closed\n",
            &["load.connection_pool=0".into()],
        )
        .unwrap();
        assert_eq!(
            e.load,
            LoadSection {
                mode: LoopMode::Closed,
                ..LoadSection::default()
            }
        );
        let both = format!("{new}  connection_pool: 8\n");
        let err = parse("t.yaml", &both, &[]).unwrap_err().to_string();
        assert!(
            err.contains("load.connection_pool: given with load.in_flight"),
            "{err}"
        );
    }

    #[test]
    fn a_peer_authentication_is_a_word_or_a_list_and_a_wrong_one_is_named() {
        let read = |v: &str| {
            parse(
                "t.yaml",
                &format!("name: t\ntopologies: [both]\nisolation: netns\nproxy:\n  type: istio\n  mtls: true\n  peer_authentication: {v}\n"),
                &[],
            )
        };
        assert_eq!(
            read("strict").unwrap().proxy.peer_authentication,
            [PeerAuthentication::Strict]
        );
        assert_eq!(
            read("[permissive, strict]")
                .unwrap()
                .proxy
                .peer_authentication,
            [PeerAuthentication::Permissive, PeerAuthentication::Strict]
        );
        let wrong = read("loose").unwrap_err().to_string();
        assert!(
            wrong.contains("proxy.peer_authentication") && wrong.contains("permissive"),
            "{wrong}"
        );
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpuset("0"), Some(vec![0]));
        assert_eq!(parse_cpuset("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpuset("2-1"), None);
        assert_eq!(parse_cpuset(""), None);
        assert_eq!(parse_cpuset("8191"), Some(vec![8191]));
        // fuzz/corpus/experiment_file/oom-cpuset-of-10-pow-12-cpus.yaml
        assert_eq!(parse_cpuset("0-999999999999"), None);
        assert_eq!(parse_cpuset("0-8191,0-8191"), None);
    }

    /// Found while writing the `experiment_file` fuzz target (and confirmed on it): tiny files
    /// that asked for billions of steps, a duration no `Duration` holds, or billions of gateway
    /// routes. Each is a case of fuzz/corpus/experiment_file.
    #[test]
    fn a_tiny_file_cannot_ask_for_unbounded_work() {
        let cases = [
            ("repeats: 4294967295\n", "at most 100000 are run"),
            (
                "load:\n  qps: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  connections: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  response_bytes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  jitter: [false, true]\nrepeats: 50\n",
                "200000 steps (2000 load points x 2 variants x 50 repeats)",
            ),
            ("duration_secs: 1e300\n", "duration_secs: expected at most 604800"),
            ("warmup_secs: 1e20\n", "warmup_secs: expected at most"),
            ("gateway:\n  domains: 4000000000\n  paths: 4000000000\n", "at most 1000000 are generated"),
        ];
        for (rest, words) in cases {
            let text = format!("name: t\ntopologies: [baseline, gateway]\n{rest}");
            let err = parse("t.yaml", &text, &[]).unwrap_err().to_string();
            assert!(err.contains(words), "{rest}: {err}");
        }
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [baseline]\nload:\n  mode: closed\n  jitter: [false, true]\nrepeats: 3\n",
            &[],
        )
        .unwrap();
        let size = PlanSize::of(&e);
        assert_eq!((size.load_points, size.variants, size.steps()), (1, 1, 3));
        assert_eq!(crate::Plan::compile(&e).steps.len(), 3);
    }

    #[test]
    fn the_presets_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
                seen += 1;
            }
        }
        assert!(seen >= 5, "{seen} presets");
    }
}
