//! From an experiment to the ordered list of steps it runs. A variant is one rig (topology and
//! CPU allotment); a load point is one cell of the load matrix. Repeats are interleaved: every
//! repeat walks every load point, and at every load point every variant runs in turn, so slow
//! drift of the machine spreads across the variants instead of landing on one. Topology
//! `control_plane` sends no load: its steps are the cells of the control-plane matrix
//! ([`MeshScale`]), walked once per repeat in the same way.

use std::collections::BTreeSet;
use std::sync::Arc;

use meshbench_results::{
    Arrival, Class, HaproxyReload, LoadPoint, LoopMode, MeshScale, Offer, PeerAuthentication,
    Program, Protocol, StepKind, Topology,
};

use crate::config::{ControlPlaneSection, Experiment};
use crate::external::{self, External};

/// One step: a variant under a load point, or a control-plane cell, in one repeat.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// 0-based position in the run order.
    pub index: usize,
    /// 0-based repeat.
    pub repeat: u32,
    /// What the step measures, decided here: the runner matches it and finds nothing missing.
    pub work: Work,
}

/// What a step measures: a chain of roles under a load, systems meshbench does not start under
/// a load, or istiod serving a mesh (no load).
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// A variant of a chain (realised in the lab or on a cluster) under a load point.
    Chain(ChainVariant, LoadPoint),
    /// An external variant, found in the file when the plan was made, under a load point with
    /// no response size (its server chooses).
    External(ExternalVariant, LoadPoint),
    /// A cell of the control-plane matrix: the mesh istiod serves.
    ControlPlane(MeshScale),
}

/// An external variant as the plan found it: the file's `external` section and the variant's
/// place in its `variants`. A step holds it instead of the variant's name, so that nothing
/// looks the name up while the run goes on.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalVariant {
    section: Arc<External>,
    index: usize,
}

impl ExternalVariant {
    /// Every variant of `e`'s `external` section, in the file's order.
    fn all(e: &Experiment) -> Vec<ExternalVariant> {
        let Some(x) = &e.external else {
            return Vec::new();
        };
        let section = Arc::new(x.clone());
        (0..x.variants.len())
            .map(|index| ExternalVariant {
                section: Arc::clone(&section),
                index,
            })
            .collect()
    }

    /// The file's `external` section it is in (Prometheus, the query settings).
    pub fn section(&self) -> &External {
        &self.section
    }

    /// The variant: its URL, request and roles.
    pub fn variant(&self) -> &external::Variant {
        &self.section.variants[self.index]
    }

    /// Its name in the file.
    pub fn name(&self) -> &str {
        &self.variant().name
    }
}

/// One rig of a chain: its topology, the swept CPU allotment and Istio's PeerAuthentication.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainVariant {
    pub topology: Topology,
    /// The swept class's CPU quota in cores, when `limits.<class>.cpus` lists values.
    pub cpu: Option<(Class, f64)>,
    /// Istio's sidecars' PeerAuthentication, when `proxy.peer_authentication` lists several.
    pub peer_authentication: Option<PeerAuthentication>,
    /// The gateway program, when `gateway.type` lists several.
    pub gateway: Option<Program>,
    /// How haproxy's gateway is reloaded, when `gateway.haproxy_reload` lists several.
    pub haproxy_reload: Option<HaproxyReload>,
    /// With a `changes` section, whether this gateway step applies them (its pair does not):
    /// `None` without the section.
    pub changes: Option<bool>,
}

impl Step {
    /// Its kind, as the file lists it and the store keeps it.
    pub fn kind(&self) -> StepKind {
        match &self.work {
            Work::Chain(v, _) => StepKind::Chain(v.topology),
            Work::External(..) => StepKind::External,
            Work::ControlPlane(_) => StepKind::ControlPlane,
        }
    }

    /// The load it sends; `None` for a control-plane step.
    pub fn load(&self) -> Option<&LoadPoint> {
        match &self.work {
            Work::Chain(_, load) | Work::External(_, load) => Some(load),
            Work::ControlPlane(_) => None,
        }
    }

    /// The chain it starts, if it starts one.
    pub fn chain(&self) -> Option<&ChainVariant> {
        match &self.work {
            Work::Chain(v, _) => Some(v),
            Work::External(..) | Work::ControlPlane(_) => None,
        }
    }

    /// The same step at another open-loop rate (a capacity search's probe); a control-plane
    /// step, which sends no load, is returned as it is.
    pub fn at_rate(&self, index: usize, rate_rps: f64) -> Step {
        let at = |load: &LoadPoint| LoadPoint {
            offer: load.offer.with_rate(rate_rps),
            ..*load
        };
        let work = match &self.work {
            Work::Chain(v, load) => Work::Chain(*v, at(load)),
            Work::External(name, load) => Work::External(name.clone(), at(load)),
            Work::ControlPlane(m) => Work::ControlPlane(*m),
        };
        Step {
            index,
            repeat: self.repeat,
            work,
        }
    }

    /// What the step asks, as progress lines and the dry run name it: its mesh (a
    /// control-plane step's), else its load.
    pub fn asks(&self) -> String {
        match &self.work {
            Work::ControlPlane(mesh) => mesh.to_string(),
            Work::Chain(_, load) | Work::External(_, load) => load.to_string(),
        }
    }

    /// A short name of the variant: topology, and the CPU allotment when swept; an external
    /// variant's own name; a control-plane step's topology (`control_plane`: its cell is
    /// `mesh`, as a load point is `load`).
    pub fn variant(&self) -> String {
        let v = match &self.work {
            Work::Chain(v, _) => v,
            Work::External(x, _) => return x.name().to_string(),
            Work::ControlPlane(_) => return StepKind::ControlPlane.to_string(),
        };
        let mut name = v.topology.to_string();
        if let Some(program) = v.gateway {
            name.push(' ');
            name.push_str(program.name());
        }
        if let Some(reload) = v.haproxy_reload {
            name.push(' ');
            name.push_str(&reload.variant());
        }
        if let Some((role, c)) = v.cpu {
            name.push_str(&format!(" {}={}cpu", role.name(), c));
        }
        if let Some(mode) = v.peer_authentication {
            name.push(' ');
            name.push_str(mode.name());
        }
        if v.changes == Some(true) {
            name.push(' ');
            name.push_str(meshbench_results::change::CHANGED);
        }
        name
    }

    /// Istio perf/benchmark's label: `{id}_qps_{q}_c_{c}_{size}_{variant}_{mode}`; a
    /// control-plane step's, in the same manner:
    /// `{id}_cp_p{proxies}_s{services}_o{objects}_e{endpoint churn}_c{config churn}_{kind}`.
    pub fn istio_label(&self, id: &str, protocol: Protocol) -> String {
        let (chain, load) = match &self.work {
            Work::Chain(v, load) => (Some(v), load),
            Work::External(_, load) => (None, load),
            Work::ControlPlane(m) => {
                return format!(
                    "{id}_cp_p{}_s{}_o{}_e{}_c{}_{}",
                    m.proxies,
                    m.services,
                    m.istio_objects,
                    label_number(m.endpoint_churn_per_s),
                    label_number(m.config_churn_per_s),
                    m.kind.name()
                )
            }
        };
        let q = match load.rate_rps() {
            Some(q) => label_number(q),
            None => "max".into(),
        };
        let mut variant = Vec::new();
        if let Some(program) = chain.and_then(|v| v.gateway) {
            variant.push(program.name().to_string());
        }
        if let Some(reload) = chain.and_then(|v| v.haproxy_reload) {
            variant.push(reload.variant());
        }
        if let Some((role, c)) = chain.and_then(|v| v.cpu) {
            variant.push(format!("{}{c}cpu", role.name()));
        }
        if let Some(mode) = chain.and_then(|v| v.peer_authentication) {
            variant.push(mode.name().to_string());
        }
        if chain.and_then(|v| v.changes) == Some(true) {
            variant.push(meshbench_results::change::CHANGED.into());
        }
        if load.offer.is_poisson() {
            variant.push("jitter".into());
        }
        match protocol {
            Protocol::Http2 => variant.push("h2".into()),
            Protocol::Grpc => variant.push("grpc".into()),
            Protocol::Http3 => variant.push("h3".into()),
            Protocol::Http1 => {}
        }
        let variant = if variant.is_empty() {
            "default".to_string()
        } else {
            variant.join("-")
        };
        // An external variant is its own mode (name it `both`, `serveronly`, `ingress`... for
        // Istio's graph_plotter).
        let mode = match &self.work {
            Work::External(x, _) => x.name(),
            _ => self.kind().istio_mode(),
        };
        let size = load.response_bytes.unwrap_or(0);
        format!(
            "{id}_qps_{q}_c_{}_{size}_{variant}_{mode}",
            load.connections,
        )
    }
}

/// A number as labels write it: a whole one without decimals (`100`), else as it is (`0.5`).
fn label_number(n: f64) -> String {
    if n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{n}")
    }
}

/// Most steps a plan may hold. At a second per step that is more than a day; a file that asks
/// for more (a long list, a large `repeats`, lists multiplied together) is refused by
/// [`Experiment::validate`] before a step is made.
pub const MAX_STEPS: u64 = 100_000;

/// How many steps an experiment plans, counted without making them (products saturate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSize {
    /// Cells of the load matrix (duplicate list values counted).
    pub load_points: u64,
    /// Topologies that carry load, each CPU value of a sweep counting for the topologies it
    /// applies to.
    pub variants: u64,
    /// Cells of the control-plane matrix when topologies lists `control_plane` (duplicate list
    /// values counted), else 0: that topology's steps per repeat, instead of load points.
    pub mesh_points: u64,
    pub repeats: u64,
}

impl PlanSize {
    pub fn of(e: &Experiment) -> PlanSize {
        let len = |n: usize| n as u64;
        let rates = match e.load.mode {
            LoopMode::Open => len(e.load.rate_rps.len()),
            LoopMode::Closed => 1,
        };
        let load_points = [
            len(e.load.connections.len()),
            len(e.load.in_flight.len().max(1)),
            len(e.load.response_bytes.len()),
            len(arrivals(e).len()),
        ]
        .into_iter()
        .fold(rates, u64::saturating_mul);
        let sweep = sweep(e);
        let variants = e
            .topologies
            .iter()
            .map(|k| match (*k, sweep) {
                (StepKind::ControlPlane, _) => 0,
                (StepKind::External, _) => len(e.external.as_ref().map_or(0, |x| x.variants.len())),
                (StepKind::Chain(t), Some((role, cpus))) if e.limits_in(t, role) => len(cpus.len())
                    .saturating_mul(len(peer_authentications(e, t).len()))
                    .saturating_mul(len(gateways(e, t).len()))
                    .saturating_mul(len(changes(e, t).len())),
                (StepKind::Chain(t), _) => len(peer_authentications(e, t).len())
                    .saturating_mul(len(gateways(e, t).len()))
                    .saturating_mul(len(changes(e, t).len())),
            })
            .fold(0, u64::saturating_add);
        let mesh_points = if e.topologies.contains(&StepKind::ControlPlane) {
            let m = e.control_plane_matrix();
            [
                m.proxies.len(),
                m.istio_objects.len(),
                m.endpoint_churn_per_s.len(),
                m.config_churn_per_s.len(),
            ]
            .into_iter()
            .map(len)
            .fold(len(m.services.len()), u64::saturating_mul)
        } else {
            0
        };
        PlanSize {
            load_points,
            variants,
            mesh_points,
            repeats: u64::from(e.repeats),
        }
    }

    /// The steps of the plan (at most: [`Plan::compile`] drops repeated load points and
    /// control-plane cells).
    pub fn steps(&self) -> u64 {
        self.load_points
            .saturating_mul(self.variants)
            .saturating_add(self.mesh_points)
            .saturating_mul(self.repeats)
    }
}

/// The cells of the control-plane matrix in run order: services outermost, then proxies,
/// Istio objects, endpoint churn and configuration churn; a cell listed twice runs once.
fn mesh_cells(m: &ControlPlaneSection) -> Vec<MeshScale> {
    let mut cells = Vec::new();
    for &services in &m.services {
        for &proxies in &m.proxies {
            for &istio_objects in &m.istio_objects {
                for &endpoint_churn_per_s in &m.endpoint_churn_per_s {
                    for &config_churn_per_s in &m.config_churn_per_s {
                        cells.push(MeshScale {
                            kind: m.kind,
                            proxies,
                            services,
                            istio_objects,
                            endpoint_churn_per_s,
                            config_churn_per_s,
                        });
                    }
                }
            }
        }
    }
    let mut seen = BTreeSet::new();
    cells.retain(|c| seen.insert(*c));
    cells
}

/// Estimated seconds before a control-plane step's window opens: istiod and the API server
/// start (about 10 s), then the proxies connect and the services are registered (about 5 ms a
/// proxy and 10 ms a service). An estimate for the plan's total, not measured.
fn control_plane_start_secs(m: &MeshScale) -> f64 {
    10.0 + 0.005 * f64::from(m.proxies) + 0.01 * f64::from(m.services)
}

/// Arrivals are an open loop's: a closed loop plans `uniform` only.
fn arrivals(e: &Experiment) -> &[Arrival] {
    match e.load.mode {
        LoopMode::Open => &e.load.arrival,
        LoopMode::Closed => &[Arrival::Uniform],
    }
}

/// The names of the external variants (none without an `external` section).
/// The swept role and its CPU values, when one role's `cpus` lists several.
fn sweep(e: &Experiment) -> Option<(Class, &Vec<f64>)> {
    [
        (Class::Proxy, &e.limits.proxy.cpus),
        (Class::Tunnel, &e.limits.tunnel.cpus),
        (Class::Backend, &e.limits.backend.cpus),
        (Class::ControlPlane, &e.limits.control_plane.cpus),
    ]
    .into_iter()
    .find(|(_, c)| c.len() > 1)
}

/// The PeerAuthentications a topology runs under, one variant each: every listed one for
/// Istio's sidecars when the file lists several (STRICT not for `serveronly`, whose client has
/// no sidecar), else one unnamed.
fn peer_authentications(e: &Experiment, t: Topology) -> Vec<Option<PeerAuthentication>> {
    let modes = &e.proxy.peer_authentication;
    if e.proxy.kind != Program::Istio || !t.has_sidecars() || modes.len() < 2 {
        return vec![None];
    }
    modes
        .iter()
        .filter(|m| !(t == Topology::Serveronly && **m == PeerAuthentication::Strict))
        .map(|m| Some(*m))
        .collect()
}

/// Whether a topology's variants apply changes: twice when a stream of the `changes` section
/// applies to its steps (the gateway's; Istio's sidecars' with a client's), still then
/// changed, side by side; every other once, unnamed.
fn changes(e: &Experiment, t: Topology) -> &'static [Option<bool>] {
    match e.pairs_changes(t) {
        true => &[Some(false), Some(true)],
        false => &[None],
    }
}

/// The gateway programs a topology runs under, one variant each: every listed one for the
/// gateway topology when the file lists several, else one unnamed; haproxy once per listed
/// reload when the file lists several.
fn gateways(e: &Experiment, t: Topology) -> Vec<(Option<Program>, Option<HaproxyReload>)> {
    let programs: Vec<Option<Program>> = match (t, e.gateway.kinds.len()) {
        (Topology::Gateway, n) if n > 1 => e.gateway.kinds.iter().map(|k| Some(*k)).collect(),
        _ => vec![None],
    };
    let reloads = &e.gateway.haproxy_reload;
    let mut out = Vec::new();
    for program in programs {
        match t == Topology::Gateway && e.gateway.of(program) == Program::Haproxy {
            true if reloads.len() > 1 => out.extend(reloads.iter().map(|r| (program, Some(*r)))),
            _ => out.push((program, None)),
        }
    }
    out
}

/// Seconds a step's rig takes to start and stop: about one, except for an Istio or Contour
/// gateway, whose control plane starts for each step (about 6 s here) and whose routes are
/// applied and pushed before the load (Istio's: about 36 s for 100,000 routes on a 2-core
/// machine, docs/seeds.md; Contour's taken as the same); or for Istio's sidecars in the lab, whose pods,
/// istiod and agents start for each step and are taken down after it (about 11 s a step here:
/// `examples/changes-istio-sidecars.yaml` took 3m33s for 6 steps of 24 s).
fn setup_secs(e: &Experiment) -> f64 {
    let istio_sidecars = e.proxy.kind == Program::Istio
        && e.cluster.is_none()
        && (e.topologies.iter()).any(|t| matches!(t, StepKind::Chain(t) if t.has_sidecars()));
    if e.topologies.contains(&StepKind::Chain(Topology::Gateway)) && e.gateway.controlled() {
        let routes = f64::from(e.gateway.domains) * f64::from(e.gateway.paths);
        6.0 + routes / 2_800.0
    } else if istio_sidecars {
        11.0
    } else {
        1.0
    }
}

/// A variant that carries load: a chain's rig, or an external variant.
enum Variant {
    Chain(ChainVariant),
    External(ExternalVariant),
}

/// Every variant that carries load, in the file's order of topologies: each chain once per
/// swept CPU value (when the sweep's class is in it) and listed PeerAuthentication, each
/// external variant once.
fn variants(e: &Experiment) -> Vec<Variant> {
    let sweep = sweep(e);
    let mut variants = Vec::new();
    for &kind in &e.topologies {
        let topology = match kind {
            StepKind::Chain(t) => t,
            StepKind::External => {
                variants.extend(ExternalVariant::all(e).into_iter().map(Variant::External));
                continue;
            }
            // Its steps are the control-plane matrix's cells.
            StepKind::ControlPlane => continue,
        };
        let cpus: Vec<Option<(Class, f64)>> = match sweep {
            Some((role, cpus)) if e.limits_in(topology, role) => {
                cpus.iter().map(|&c| Some((role, c))).collect()
            }
            _ => vec![None],
        };
        for (gateway, haproxy_reload) in gateways(e, topology) {
            for cpu in &cpus {
                for peer_authentication in peer_authentications(e, topology) {
                    for &changes in changes(e, topology) {
                        variants.push(Variant::Chain(ChainVariant {
                            topology,
                            cpu: *cpu,
                            peer_authentication,
                            gateway,
                            haproxy_reload,
                            changes,
                        }));
                    }
                }
            }
        }
    }
    variants
}

/// The whole run order.
#[derive(Debug, Clone)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Seconds each step takes beyond its load (starting and stopping the rig), for estimates.
    /// For a plan of control-plane steps, which run alone, the mean over its steps of their
    /// start-up and settle time ([`Plan::secs_of`] is each one's).
    pub setup_secs: f64,
    /// `control_plane.settle_secs`: a control-plane step's wait after its window.
    settle_secs: f64,
}

impl Plan {
    /// The steps of `e`, which [`Experiment::validate`] passed (as [`crate::parse`] makes sure):
    /// at most [`MAX_STEPS`] of them.
    pub fn compile(e: &Experiment) -> Plan {
        let mut loads = Vec::new();
        let rates: Vec<Option<f64>> = match e.load.mode {
            LoopMode::Open => e.load.rate_rps.iter().map(|q| Some(*q)).collect(),
            LoopMode::Closed => vec![None],
        };
        // A cap at or above what the connections carry caps nothing: no cap, as it is named.
        let carried = |connections: u32| connections * e.load.streams.max(1);
        let in_flight: Vec<Option<u32>> = match e.load.in_flight.is_empty() {
            true => vec![None],
            false => e.load.in_flight.iter().map(|n| Some(*n)).collect(),
        };
        for &rate_rps in &rates {
            for &connections in &e.load.connections {
                for &cap in &in_flight {
                    for &response_bytes in &e.load.response_bytes {
                        for &arrival in arrivals(e) {
                            // `validate` gives an open loop at least one rate.
                            let offer =
                                Offer::of(e.load.mode, rate_rps, arrival).unwrap_or(Offer::Closed);
                            loads.push(LoadPoint {
                                offer,
                                connections,
                                in_flight: cap.filter(|&n| n < carried(connections)),
                                response_bytes: Some(response_bytes),
                            });
                        }
                    }
                }
            }
        }
        loads.dedup();
        let matrix = e.control_plane_matrix();
        let cells = if e.topologies.contains(&StepKind::ControlPlane) {
            mesh_cells(&matrix)
        } else {
            Vec::new()
        };
        let variants = variants(e);
        let mut steps = Vec::new();
        for repeat in 0..e.repeats {
            for load in &loads {
                for variant in &variants {
                    let work = match variant {
                        Variant::Chain(v) => Work::Chain(*v, *load),
                        // An external server chooses its responses.
                        Variant::External(x) => Work::External(
                            x.clone(),
                            LoadPoint {
                                response_bytes: None,
                                ..*load
                            },
                        ),
                    };
                    steps.push(Step {
                        index: steps.len(),
                        repeat,
                        work,
                    });
                }
            }
            for cell in &cells {
                steps.push(Step {
                    index: steps.len(),
                    repeat,
                    work: Work::ControlPlane(*cell),
                });
            }
        }
        let settle_secs = matrix.settle_secs;
        let mesh_setup: Vec<f64> = cells
            .iter()
            .map(|c| control_plane_start_secs(c) + settle_secs)
            .collect();
        let setup_secs = if variants.is_empty() && !mesh_setup.is_empty() {
            mesh_setup.iter().sum::<f64>() / mesh_setup.len() as f64
        } else {
            setup_secs(e)
        };
        Plan {
            steps,
            setup_secs,
            settle_secs,
        }
    }

    /// Seconds one step takes, start to end (a control-plane step's on average:
    /// [`Plan::secs_of`] is each one's).
    pub fn step_secs(&self, e: &Experiment) -> f64 {
        e.warmup_secs + e.duration_secs + e.cooldown_secs + self.setup_secs
    }

    /// Seconds `step` takes, start to end: a control-plane step's warm-up, window, settle time,
    /// cool-down and estimated start-up (which grows with its proxies and services).
    pub fn secs_of(&self, step: &Step, e: &Experiment) -> f64 {
        match &step.work {
            Work::ControlPlane(m) => {
                e.warmup_secs
                    + e.duration_secs
                    + e.cooldown_secs
                    + self.settle_secs
                    + control_plane_start_secs(m)
            }
            Work::Chain(..) | Work::External(..) => {
                e.warmup_secs + e.duration_secs + e.cooldown_secs + setup_secs(e)
            }
        }
    }

    pub fn total_secs(&self, e: &Experiment) -> f64 {
        self.steps.iter().map(|s| self.secs_of(s, e)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use meshbench_results::{ProxyKind, StepParams};

    const MINIMAL_LAB: &str = "name: t\ntopologies: [baseline]\n";

    /// A control-plane step's cell.
    fn mesh(s: &Step) -> MeshScale {
        match s.work {
            Work::ControlPlane(m) => m,
            _ => panic!("not a control-plane step: {s:?}"),
        }
    }

    #[test]
    fn repeats_interleave_variants_at_every_load_point() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [baseline, both]\nrepeats: 2\nload:\n  rate_rps: [100, 200]\n  connections: [4]\n",
            &[],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        let order: Vec<(u32, Option<f64>, &str)> = plan
            .steps
            .iter()
            .map(|s| (s.repeat, s.load().unwrap().rate_rps(), s.kind().name()))
            .collect();
        assert_eq!(
            order,
            vec![
                (0, Some(100.0), "baseline"),
                (0, Some(100.0), "both"),
                (0, Some(200.0), "baseline"),
                (0, Some(200.0), "both"),
                (1, Some(100.0), "baseline"),
                (1, Some(100.0), "both"),
                (1, Some(200.0), "baseline"),
                (1, Some(200.0), "both"),
            ]
        );
        assert_eq!(plan.total_secs(&e), 8.0 * (2.0 + 10.0 + 1.0 + 1.0));
    }

    #[test]
    fn an_istio_gateway_step_counts_its_control_plane_and_pushes_in_the_estimate() {
        let gateway = |kind: &str, domains: u32| {
            let text = format!(
                "name: t\ntopologies: [gateway]\ngateway:\n  type: {kind}\n  domains: {domains}\n  paths: 100\n"
            );
            Plan::compile(&parse("t.yaml", &text, &[]).unwrap()).setup_secs
        };
        assert_eq!(gateway("envoy", 1000), 1.0);
        assert!((gateway("istio", 10) - 6.36).abs() < 0.01);
        assert!((gateway("istio", 1000) - 41.7).abs() < 0.1);
    }

    #[test]
    fn a_cpu_sweep_multiplies_only_the_topologies_with_that_role() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [baseline, gateway]\nload:\n  mode: closed\n  connections: [8]\nlimits:\n  proxy:\n    cpus: [0.25, 0.5, 1]\n",
            &[],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        let variants: Vec<String> = plan.steps.iter().map(Step::variant).collect();
        assert_eq!(
            variants,
            [
                "baseline",
                "gateway proxy=0.25cpu",
                "gateway proxy=0.5cpu",
                "gateway proxy=1cpu"
            ]
        );
        assert_eq!(
            plan.steps[2].istio_label("gw", Protocol::Http1),
            "gw_qps_max_c_8_1024_proxy0.5cpu_ingress"
        );
    }

    #[test]
    fn a_control_plane_sweep_multiplies_only_the_chains_that_run_one() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [baseline, gateway]\ngateway:\n  type: contour\nload:\n  mode: closed\n  connections: [8]\nlimits:\n  proxy:\n    cpus: [1]\n  control_plane:\n    cpus: [0.25, 0.5, 1]\n",
            &[],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        let variants: Vec<String> = plan.steps.iter().map(Step::variant).collect();
        assert_eq!(
            variants,
            [
                "baseline",
                "gateway control_plane=0.25cpu",
                "gateway control_plane=0.5cpu",
                "gateway control_plane=1cpu"
            ]
        );
        assert_eq!(PlanSize::of(&e).steps(), 4);
        // nginx's gateway has no control plane: nothing to sweep, and the limit is refused.
        let err = parse(
            "t.yaml",
            "name: t\ntopologies: [gateway]\ngateway:\n  type: nginx\nlimits:\n  control_plane:\n    cpus: [0.25, 0.5]\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("no control plane runs in this experiment"),
            "{err}"
        );
    }

    #[test]
    fn a_list_of_gateways_runs_the_gateway_once_per_program_and_nothing_else_twice() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [baseline, gateway]\ngateway:\n  type: [nginx, contour]\nload:\n  mode: closed\n  connections: [8]\nlimits:\n  proxy:\n    cpus: [0.5, 1]\n",
            &[],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        let variants: Vec<String> = plan.steps.iter().map(Step::variant).collect();
        assert_eq!(
            variants,
            [
                "baseline",
                "gateway nginx proxy=0.5cpu",
                "gateway nginx proxy=1cpu",
                "gateway contour proxy=0.5cpu",
                "gateway contour proxy=1cpu"
            ]
        );
        assert_eq!(PlanSize::of(&e).steps(), 5);
        assert_eq!(
            plan.steps[3].istio_label("gw", Protocol::Http1),
            "gw_qps_max_c_8_1024_contour-proxy0.5cpu_ingress"
        );
        // One program is a word, as before.
        let one = parse(
            "t.yaml",
            "name: t\ntopologies: [gateway]\ngateway:\n  type: envoy\n",
            &[],
        )
        .unwrap();
        assert_eq!(one.gateway.kinds, [Program::Envoy]);
        assert_eq!(Plan::compile(&one).steps[0].variant(), "gateway");
    }

    #[test]
    fn external_variants_are_steps_named_after_them() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [baseline, external]\nrepeats: 2\nwarmup_secs: 4\nload:\n  rate_rps: [100]\n  connections: [4]\nlimits:\n  proxy:\n    cpus: [0.5, 1]\nexternal:\n  prometheus_url: http://127.0.0.1:9090\n  scrape_interval_secs: 1\n  variants:\n    - {name: direct, url: 'http://127.0.0.1:1/'}\n    - name: both\n      url: http://127.0.0.1:2/\n      roles: [{name: p, preset: process, match: {groupname: nginx}}]\n",
            &[],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        let variants: Vec<String> = plan.steps.iter().map(Step::variant).collect();
        // The CPU sweep multiplies no external variant (meshbench limits nothing there).
        assert_eq!(
            variants,
            ["baseline", "direct", "both", "baseline", "direct", "both"]
        );
        assert_eq!(PlanSize::of(&e).steps(), 6);
        let both = &plan.steps[2];
        assert!(matches!(&both.work, Work::External(x, _) if x.name() == "both"));
        assert_eq!(both.kind(), StepKind::External);
        assert_eq!(
            both.istio_label("x", Protocol::Http1),
            "x_qps_100_c_4_0_default_both"
        );
        assert_eq!(both.params(&e).response_bytes, 0);
        assert_eq!(both.asks(), "100 rps x 4 conns");
        // A lab step's size is said when it is not the default.
        let e = parse(
            "t.yaml",
            MINIMAL_LAB,
            &["load.response_bytes=[1024, 0]".into()],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        assert_eq!(plan.steps[0].asks(), "1000 rps x 16 conns");
        assert_eq!(plan.steps[1].asks(), "1000 rps x 16 conns, 0 B");
    }

    #[test]
    fn istio_sidecars_run_once_per_listed_peer_authentication_and_strict_skips_serveronly() {
        let e = crate::config::parse(
            "t.yaml",
            "name: t\ntopologies: [baseline, serveronly, both]\nisolation: netns\nload:\n  rate_rps: [100]\n  connections: [4]\nproxy:\n  type: istio\n  mtls: true\n  peer_authentication: [permissive, strict]\n",
            &[],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        let variants: Vec<String> = plan.steps.iter().map(Step::variant).collect();
        assert_eq!(
            variants,
            [
                "baseline",
                "serveronly permissive",
                "both permissive",
                "both strict"
            ]
        );
        assert_eq!(PlanSize::of(&e).variants, 4);
        assert_eq!(
            plan.steps[3].istio_label("e1", Protocol::Http1),
            "e1_qps_100_c_4_1024_strict_both"
        );
        // One value names no variant: the file's setting for every step.
        let one = crate::config::parse(
            "t.yaml",
            "name: t\ntopologies: [both]\nisolation: netns\nproxy:\n  type: istio\n  mtls: true\n  peer_authentication: strict\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            Plan::compile(&one).steps[0]
                .chain()
                .unwrap()
                .peer_authentication,
            None
        );
        assert_eq!(one.proxy.peer_authentication, [PeerAuthentication::Strict]);
    }

    #[test]
    fn control_plane_steps_are_the_matrix_cells_times_repeats_with_their_scale() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [control_plane]\nrepeats: 2\ncontrol_plane:\n  proxies: [50, 100]\n  services: [10, 20]\n  istio_objects: 4\n  endpoint_churn_per_s: [0, 2]\n  config_churn_per_s: 0.5\n  kind: gateway\n  settle_secs: 20\n",
            &[],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        assert_eq!(plan.steps.len(), 2 * 2 * 2 * 2);
        assert_eq!(PlanSize::of(&e).steps(), 16);
        let cells: Vec<(u32, u32, u32, f64)> = plan.steps[..8]
            .iter()
            .map(|s| {
                let m = mesh(s);
                (s.repeat, m.services, m.proxies, m.endpoint_churn_per_s)
            })
            .collect();
        assert_eq!(
            cells,
            [
                (0, 10, 50, 0.0),
                (0, 10, 50, 2.0),
                (0, 10, 100, 0.0),
                (0, 10, 100, 2.0),
                (0, 20, 50, 0.0),
                (0, 20, 50, 2.0),
                (0, 20, 100, 0.0),
                (0, 20, 100, 2.0),
            ]
        );
        for (i, s) in plan.steps.iter().enumerate() {
            assert_eq!((s.index, s.repeat), (i, (i / 8) as u32));
            assert_eq!(mesh(s), mesh(&plan.steps[i % 8]));
            assert_eq!(s.kind(), StepKind::ControlPlane);
            assert_eq!(s.variant(), "control_plane");
            assert_eq!(s.load(), None);
            assert_eq!(s.chain(), None);
            let m = mesh(s);
            assert_eq!(
                (m.kind, m.istio_objects, m.config_churn_per_s),
                (ProxyKind::Gateway, 4, 0.5)
            );
            let p = s.params(&e);
            assert_eq!(p, StepParams::control_plane(m));
            assert_eq!(
                (p.mesh, p.offer, p.connections),
                (Some(m), Offer::Closed, 0)
            );
            let text = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<StepParams>(&text).unwrap(), p);
        }
        assert_eq!(
            plan.steps[7].istio_label("cp", Protocol::Http1),
            "cp_cp_p100_s20_o4_e2_c0.5_gateway"
        );
        // Each step: warm-up 2, window 10, cool-down 1, settle 20, start-up 10 s plus 5 ms a
        // proxy and 10 ms a service.
        let expected: f64 = plan
            .steps
            .iter()
            .map(|s| {
                let m = mesh(s);
                33.0 + 10.0 + 0.005 * f64::from(m.proxies) + 0.01 * f64::from(m.services)
            })
            .sum();
        assert!((plan.total_secs(&e) - expected).abs() < 1e-9);
        assert!((plan.secs_of(&plan.steps[7], &e) - 43.7).abs() < 1e-9);
        assert!((plan.step_secs(&e) * 16.0 - expected).abs() < 1e-9);
        // A cell listed twice runs once.
        let twice = parse(
            "t.yaml",
            "name: t\ntopologies: [control_plane]\ncontrol_plane:\n  proxies: [50, 50]\n",
            &[],
        )
        .unwrap();
        assert_eq!(Plan::compile(&twice).steps.len(), 1);
        let label = Plan::compile(&twice).steps[0].istio_label("x", Protocol::Http2);
        assert_eq!(label, "x_cp_p50_s50_o0_e0_c0_sidecar");
    }

    #[test]
    fn labels_follow_istio_perf_benchmark() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [baseline, serveronly, both]\nload:\n  rate_rps: [1000]\n  connections: [16]\n  arrival: [uniform, poisson]\n",
            &[],
        )
        .unwrap();
        let labels: Vec<String> = Plan::compile(&e)
            .steps
            .iter()
            .map(|s| s.istio_label("e1", Protocol::Http1))
            .collect();
        assert_eq!(labels[0], "e1_qps_1000_c_16_1024_default_no_istio");
        assert_eq!(labels[1], "e1_qps_1000_c_16_1024_default_serveronly");
        assert_eq!(labels[5], "e1_qps_1000_c_16_1024_jitter_both");
    }
}
