//! From an experiment to the ordered list of steps it runs. A variant is one rig (topology and
//! CPU allotment); a load point is one cell of the load matrix. Repeats are interleaved: every
//! repeat walks every load point, and at every load point every variant runs in turn, so slow
//! drift of the machine spreads across the variants instead of landing on one.

use meshbench_results::{
    Arrival, Class, LoadPoint, LoopMode, Offer, PeerAuthentication, Program, Protocol, Topology,
};

use crate::config::Experiment;

/// One step: a variant under a load point, in one repeat.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// 0-based position in the run order.
    pub index: usize,
    /// 0-based repeat.
    pub repeat: u32,
    pub topology: Topology,
    /// The swept class's CPU quota in cores, when `limits.<class>.cpus` lists values.
    pub cpu: Option<(Class, f64)>,
    /// Istio's sidecars' PeerAuthentication, when `proxy.peer_authentication` lists several.
    pub peer_authentication: Option<PeerAuthentication>,
    /// Its load; an external variant's has no response size (its server chooses).
    pub load: LoadPoint,
    /// Topology `external`: the name of its variant in the file's `external.variants`.
    pub external: Option<String>,
}

impl Step {
    /// A short name of the variant: topology, and the CPU allotment when swept; an external
    /// variant's own name.
    pub fn variant(&self) -> String {
        if let Some(name) = &self.external {
            return name.clone();
        }
        let mut name = match self.cpu {
            Some((role, c)) => format!("{} {}={}cpu", self.topology, role.name(), c),
            None => self.topology.to_string(),
        };
        if let Some(mode) = self.peer_authentication {
            name.push(' ');
            name.push_str(mode.name());
        }
        name
    }

    /// Istio perf/benchmark's label: `{id}_qps_{q}_c_{c}_{size}_{variant}_{mode}`.
    pub fn istio_label(&self, id: &str, protocol: Protocol) -> String {
        let q = match self.load.rate_rps() {
            Some(q) if q.fract() == 0.0 => format!("{q:.0}"),
            Some(q) => format!("{q}"),
            None => "max".into(),
        };
        let mut variant = Vec::new();
        if let Some((role, c)) = self.cpu {
            variant.push(format!("{}{c}cpu", role.name()));
        }
        if let Some(mode) = self.peer_authentication {
            variant.push(mode.name().to_string());
        }
        if self.load.offer.is_poisson() {
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
        let mode = self
            .external
            .as_deref()
            .unwrap_or(self.topology.istio_mode());
        let size = self.load.response_bytes.unwrap_or(0);
        format!(
            "{id}_qps_{q}_c_{}_{size}_{variant}_{mode}",
            self.load.connections,
        )
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
    /// Topologies, each CPU value of a sweep counting for the topologies it applies to.
    pub variants: u64,
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
            len(e.load.response_bytes.len()),
            len(arrivals(e).len()),
        ]
        .into_iter()
        .fold(rates, u64::saturating_mul);
        let sweep = sweep(e);
        let variants = e
            .topologies
            .iter()
            .map(|t| match sweep {
                _ if !t.is_lab() => len(external_names(e).len()),
                Some((role, cpus)) if t.has(role) => {
                    len(cpus.len()).saturating_mul(len(peer_authentications(e, *t).len()))
                }
                _ => len(peer_authentications(e, *t).len()),
            })
            .fold(0, u64::saturating_add);
        PlanSize {
            load_points,
            variants,
            repeats: u64::from(e.repeats),
        }
    }

    /// The steps of the plan (at most: [`Plan::compile`] drops repeated load points).
    pub fn steps(&self) -> u64 {
        self.load_points
            .saturating_mul(self.variants)
            .saturating_mul(self.repeats)
    }
}

/// Arrivals are an open loop's: a closed loop plans `uniform` only.
fn arrivals(e: &Experiment) -> &[Arrival] {
    match e.load.mode {
        LoopMode::Open => &e.load.arrival,
        LoopMode::Closed => &[Arrival::Uniform],
    }
}

/// The names of the external variants (none without an `external` section).
fn external_names(e: &Experiment) -> Vec<String> {
    e.external
        .iter()
        .flat_map(|x| x.variants.iter().map(|v| v.name.clone()))
        .collect()
}

/// The swept role and its CPU values, when one role's `cpus` lists several.
fn sweep(e: &Experiment) -> Option<(Class, &Vec<f64>)> {
    [
        (Class::Proxy, &e.limits.proxy.cpus),
        (Class::Tunnel, &e.limits.tunnel.cpus),
        (Class::Backend, &e.limits.backend.cpus),
    ]
    .into_iter()
    .find(|(_, c)| c.len() > 1)
}

/// The PeerAuthentications a topology runs under, one variant each: every listed one for
/// Istio's sidecars when the file lists several (STRICT not for `serveronly`, whose client has
/// no sidecar), else one unnamed.
fn peer_authentications(e: &Experiment, t: Topology) -> Vec<Option<PeerAuthentication>> {
    let modes = &e.proxy.peer_authentication;
    let sidecars = matches!(
        t,
        Topology::Serveronly | Topology::Clientonly | Topology::Both
    );
    if e.proxy.kind != Program::Istio || !sidecars || modes.len() < 2 {
        return vec![None];
    }
    modes
        .iter()
        .filter(|m| !(t == Topology::Serveronly && **m == PeerAuthentication::Strict))
        .map(|m| Some(*m))
        .collect()
}

/// Seconds a step's rig takes to start and stop: about one, except for an Istio gateway, whose
/// control plane starts for each step (about 6 s here) and whose routes are applied and pushed
/// before the load (about 36 s for 100,000 routes on a 2-core machine, docs/seeds.md).
fn setup_secs(e: &Experiment) -> f64 {
    if e.topologies.contains(&Topology::Gateway)
        && e.gateway.kind == meshbench_results::Program::Istio
    {
        let routes = f64::from(e.gateway.domains) * f64::from(e.gateway.paths);
        6.0 + routes / 2_800.0
    } else {
        1.0
    }
}

/// The whole run order.
#[derive(Debug, Clone)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Seconds each step takes beyond its load (starting and stopping the rig), for estimates.
    pub setup_secs: f64,
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
        for &rate_rps in &rates {
            for &connections in &e.load.connections {
                for &response_bytes in &e.load.response_bytes {
                    for &arrival in arrivals(e) {
                        // `validate` gives an open loop at least one rate.
                        let offer =
                            Offer::of(e.load.mode, rate_rps, arrival).unwrap_or(Offer::Closed);
                        loads.push(LoadPoint {
                            offer,
                            connections,
                            response_bytes: Some(response_bytes),
                        });
                    }
                }
            }
        }
        loads.dedup();
        let sweep = sweep(e);
        let mut variants = Vec::new();
        for &t in &e.topologies {
            let cpus: Vec<Option<(Class, f64)>> = match sweep {
                _ if !t.is_lab() => {
                    for name in external_names(e) {
                        variants.push((t, None, None, Some(name)));
                    }
                    continue;
                }
                Some((role, cpus)) if t.has(role) => {
                    cpus.iter().map(|&c| Some((role, c))).collect()
                }
                _ => vec![None],
            };
            for cpu in cpus {
                for mode in peer_authentications(e, t) {
                    variants.push((t, cpu, mode, None));
                }
            }
        }
        let mut steps = Vec::new();
        for repeat in 0..e.repeats {
            for load in &loads {
                for (topology, cpu, peer_authentication, external) in &variants {
                    steps.push(Step {
                        index: steps.len(),
                        repeat,
                        topology: *topology,
                        cpu: *cpu,
                        peer_authentication: *peer_authentication,
                        // An external server chooses its responses.
                        load: LoadPoint {
                            response_bytes: load.response_bytes.filter(|_| external.is_none()),
                            ..*load
                        },
                        external: external.clone(),
                    });
                }
            }
        }
        Plan {
            steps,
            setup_secs: setup_secs(e),
        }
    }

    /// Seconds one step takes, start to end.
    pub fn step_secs(&self, e: &Experiment) -> f64 {
        e.warmup_secs + e.duration_secs + e.cooldown_secs + self.setup_secs
    }

    pub fn total_secs(&self, e: &Experiment) -> f64 {
        self.steps.len() as f64 * self.step_secs(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    const MINIMAL_LAB: &str = "name: t\ntopologies: [baseline]\n";

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
            .map(|s| (s.repeat, s.load.rate_rps(), s.topology.name()))
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
        assert_eq!(both.external.as_deref(), Some("both"));
        assert_eq!(both.topology, Topology::External);
        assert_eq!(
            both.istio_label("x", Protocol::Http1),
            "x_qps_100_c_4_0_default_both"
        );
        assert_eq!(both.params(&e).response_bytes, 0);
        assert_eq!(both.load.to_string(), "100 qps x 4 conns");
        // A lab step's size is said when it is not the default.
        let e = parse(
            "t.yaml",
            MINIMAL_LAB,
            &["load.response_bytes=[1024, 0]".into()],
        )
        .unwrap();
        let plan = Plan::compile(&e);
        assert_eq!(plan.steps[0].load.to_string(), "1000 qps x 16 conns");
        assert_eq!(plan.steps[1].load.to_string(), "1000 qps x 16 conns, 0 B");
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
        assert_eq!(Plan::compile(&one).steps[0].peer_authentication, None);
        assert_eq!(one.proxy.peer_authentication, [PeerAuthentication::Strict]);
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
