//! One step on the cluster: its shape applied and waited for (each rollout, each Envoy's
//! configuration read from its admin through a port-forward), its load from the agent pods,
//! each single-pod Envoy's own counts around it (the witness), and each role read from
//! Prometheus over the steady window; every failure ends up in the record.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use meshbench_engine::Stop;
use meshbench_experiment::config::Experiment;
use meshbench_experiment::external::promql::with_window;
use meshbench_experiment::external::{Preset, Role as PromRole};
use meshbench_experiment::Step;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::system::{self, Path as Through, Shape};
use meshbench_lab::istio::ready::{self, Awaited, Expected, SidecarExpected};
use meshbench_lab::program::envoy::admin::{self, AdminError};
use meshbench_lab::sampler;
use meshbench_results::{
    ChainRole, Class, Figure, PlayedBy, Program, ProxyCounters, Role, StepFailure, Topology,
};
use meshbench_store::StepRecord;

use crate::external::prometheus::Prometheus;
use crate::load::{LoadOptions, TargetSource};
use crate::observer::{Observer, StepAt};
use crate::steps::{aim_at_gateway, keep_witness, load_for, resolve_at};
use crate::{measure, ClientPlace, Lab};

use super::{shape_of, ClusterSite, AGENTS, ENVOY_ADMIN};

/// What an Envoy of the step must hold before the step's load.
enum Holds {
    Gateway(Expected),
    Sidecar(SidecarExpected),
}

impl Holds {
    fn awaited(&self) -> Awaited {
        match self {
            Holds::Gateway(e) => Awaited::Gateway(e.clone()),
            Holds::Sidecar(e) => Awaited::Sidecar(e.clone()),
        }
    }
}

impl ClusterSite {
    /// Brings the system to `shape`: applies what changed, waits for each rollout and for
    /// each Envoy of the step to hold its configuration. One line on failure.
    fn realise(&self, step: &Step, shape: &Shape, stop: &Stop) -> Result<(), String> {
        let timeout = Duration::from_secs_f64(self.section.rollout_timeout_secs);
        let mut applied = self.applied.lock().expect("not poisoned");
        if applied.as_ref() != Some(shape) {
            self.client
                .apply_all(self.system.render(shape))
                .map_err(|e| e.to_string())?;
            *applied = Some(shape.clone());
        }
        drop(applied);
        for d in self.system.deployments() {
            self.client
                .wait_rollout(&self.section.namespace, d, timeout, || !stop.requested())
                .map_err(|e| e.to_string())?;
        }
        self.wait_acked(step.topology, timeout, stop)
    }

    /// The Envoys of `topology` with one pod each, by role: the pod and what it must hold.
    fn envoys(&self, topology: Topology) -> Result<Vec<(ChainRole, String, Holds)>, String> {
        let ns = &self.section.namespace;
        let backend = self.pods("app=backend").map_err(|e| e.to_string())?;
        let Some(backend_pod) = backend.first() else {
            return Err("no backend pod".into());
        };
        let backend_ip = backend_pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref()?.parse::<IpAddr>().ok())
            .ok_or("the backend pod has no address yet")?;
        let backend = SocketAddr::new(backend_ip, system::CAPTURED);
        let host = format!("{}.{ns}.svc.cluster.local", system::BACKEND);
        let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
        let mut out = Vec::new();
        for r in topology.chain() {
            match r.role {
                ChainRole::ServerProxy => out.push((
                    r.role,
                    name(backend_pod),
                    Holds::Sidecar(SidecarExpected::server(system::CAPTURED)),
                )),
                ChainRole::ClientProxy => {
                    let agents = self
                        .pods(&self.agents.agent_selector())
                        .map_err(|e| e.to_string())?;
                    if let [only] = agents.as_slice() {
                        out.push((
                            r.role,
                            name(only),
                            Holds::Sidecar(SidecarExpected::client(
                                system::CAPTURED,
                                &host,
                                backend,
                            )),
                        ));
                    }
                }
                ChainRole::Gateway => {
                    let g = self
                        .gateway
                        .as_ref()
                        .expect("a gateway topology has its assets");
                    let pods = self.pods("app=gateway").map_err(|e| e.to_string())?;
                    let Some(pod) = pods.first() else {
                        return Err("no gateway pod".into());
                    };
                    out.push((
                        r.role,
                        name(pod),
                        Holds::Gateway(Expected {
                            listener: "0.0.0.0_443".into(),
                            filter_chains: g.domains,
                            routes: g.routes,
                            certificates: g.domains,
                            endpoint: format!("{host}::{backend}::"),
                        }),
                    ));
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Waits until every Envoy of the step holds its configuration, read from its admin
    /// through its pod; fails at once on an update it rejected.
    fn wait_acked(&self, topology: Topology, limit: Duration, stop: &Stop) -> Result<(), String> {
        let began = Instant::now();
        for (role, pod, holds) in self.envoys(topology)? {
            let forward = self
                .client
                .port_forward(&self.section.namespace, &pod, ENVOY_ADMIN)
                .map_err(|e| format!("{role}: {e}"))?;
            let admin = forward.addr();
            loop {
                let rejected = ready::rejected(admin);
                if !rejected.is_empty() {
                    return Err(format!(
                        "{role} (pod {pod}): Envoy rejected {}",
                        rejected.join(", ")
                    ));
                }
                let last = match ready::missing_at(admin, &holds.awaited()) {
                    Ok(m) if m.is_empty() => break,
                    Ok(m) => m.join("; "),
                    Err(e) => e.to_string(),
                };
                if began.elapsed() >= limit || stop.requested() {
                    return Err(format!(
                        "{role} (pod {pod}): Envoy did not receive its configuration within {} s; still missing: {last}",
                        limit.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        Ok(())
    }

    /// The load of `step`, aimed at the system through the Services' addresses.
    fn load_options(&self, e: &Experiment, step: &Step) -> LoadOptions {
        let through = match step.topology {
            Topology::Serveronly => Through::ServerSidecar,
            Topology::Clientonly => Through::ClientSidecar,
            Topology::Both => Through::BothSidecars,
            _ => Through::Direct,
        };
        match (&self.gateway, step.topology) {
            (Some(g), Topology::Gateway) => {
                let mut o = load_for(e, step, TargetSource::File(g.targets.clone()));
                aim_at_gateway(&mut o, g.ca.clone(), g.entry, true);
                o
            }
            _ => load_for(
                e,
                step,
                TargetSource::Url(format!("http://{}:{}/", self.backend_vip, through.port())),
            ),
        }
    }

    /// The roles of `topology` and the backend, as Prometheus reads them (cAdvisor).
    ///
    /// The backend's and the gateway's pods are named as they are now: a pod of the template
    /// before (gone since the rollout) has series that end before the window, and a series
    /// that comes or goes in a window makes the role missing (`external::read`).
    fn roles(&self, topology: Topology) -> Vec<PromRole> {
        let ns = self.section.namespace.as_str();
        let now = |app: &str, fallback: &str| -> String {
            let names: Vec<String> = self
                .pods(&format!("app={app}"))
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            match names.is_empty() {
                true => fallback.to_string(),
                // Pod names are DNS labels: nothing in them is special to a regular expression.
                false => names.join("|"),
            }
        };
        let backend_pods = now(system::BACKEND, "backend-.*");
        let gateway_pods = now(system::GATEWAY, "gateway-.*");
        let role = |r: ChainRole, preset: Preset, matches: &[(&str, &str)]| PromRole {
            name: r.name().to_string(),
            preset: Some(preset),
            matches: matches
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..PromRole::default()
        };
        let agents_pods = format!("{AGENTS}-agents-.*");
        let mut roles: Vec<PromRole> = topology
            .chain()
            .iter()
            .filter_map(|r| match r.role {
                ChainRole::ClientProxy => Some(role(
                    r.role,
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &agents_pods)],
                )),
                ChainRole::ServerProxy => Some(role(
                    r.role,
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &backend_pods)],
                )),
                ChainRole::Gateway => Some(role(
                    r.role,
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &gateway_pods)],
                )),
                ChainRole::Waypoint => Some(role(
                    r.role,
                    Preset::Waypoint,
                    &[("namespace", ns), ("pod", "waypoint-.*")],
                )),
                // One DaemonSet: its pods are read once, as the client's tunnel.
                ChainRole::ZtunnelClient => Some(role(r.role, Preset::Ztunnel, &[])),
                ChainRole::ZtunnelServer | ChainRole::Backend => None,
            })
            .collect();
        roles.push(role(
            ChainRole::Backend,
            Preset::IstioSidecar,
            &[
                ("namespace", ns),
                ("pod", &backend_pods),
                ("container", "backend|backend-direct"),
            ],
        ));
        roles
    }

    /// Waits until Prometheus has every role's series of the pods as they are now, and has had
    /// them for a rate window (less the warm-up, which comes before the steady window): a pod
    /// a rollout just made is scraped a scrape interval or more later, and a series that is
    /// not there for the whole window makes its role missing. At most four scrape intervals
    /// and half a minute; then why not.
    fn wait_observable(
        &self,
        e: &Experiment,
        roles: &[PromRole],
        stop: &Stop,
    ) -> Result<(), String> {
        let x = self.section.prometheus();
        let window = x.window_ms(e.sample_interval_ms);
        let timeout = Duration::from_secs_f64(x.query_timeout_secs);
        let limit = Duration::from_secs_f64(4.0 * x.scrape_interval_secs + 30.0);
        let began = Instant::now();
        let prom = Prometheus::new(&x.prometheus_url, timeout, limit + timeout);
        let queries: Vec<(String, String)> = roles
            .iter()
            .filter_map(|r| {
                let q = r.queries().get(Figure::Cpu).ok()?.expr.clone();
                Some((r.name.clone(), with_window(&q, window)))
            })
            .collect();
        let mut waiting: Vec<String> = Vec::new();
        loop {
            waiting.clear();
            let now = sampler::now_ms() as f64 / 1000.0;
            for (name, q) in &queries {
                match prom.query(q, now) {
                    Ok(series) if !series.is_empty() => {}
                    Ok(_) => waiting.push(format!("{name}: no series yet")),
                    Err(e) if e.is_fatal() => return Err(format!("Prometheus: {e}")),
                    Err(e) => waiting.push(format!("{name}: {e}")),
                }
            }
            if waiting.is_empty() {
                break;
            }
            if began.elapsed() >= limit || stop.requested() {
                return Err(format!(
                    "Prometheus did not have the roles' series within {} s ({})",
                    limit.as_secs(),
                    waiting.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        // Seen now: a rate over the window's first point needs a window of samples.
        let settle =
            Duration::from_millis(window).saturating_sub(Duration::from_secs_f64(e.warmup_secs));
        let end = Instant::now() + settle;
        while Instant::now() < end && !stop.requested() {
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Each single-pod Envoy's admin, through its pod, for the witness.
    fn admins(&self, topology: Topology) -> Vec<(ChainRole, meshbench_k8s::Forward)> {
        let Ok(envoys) = self.envoys(topology) else {
            return Vec::new();
        };
        envoys
            .into_iter()
            .filter_map(|(role, pod, _)| {
                self.client
                    .port_forward(&self.section.namespace, &pod, ENVOY_ADMIN)
                    .ok()
                    .map(|f| (role, f))
            })
            .collect()
    }
}

impl Lab {
    /// Runs one step on the cluster; every failure ends up in the record.
    pub(crate) fn run_cluster_step(
        &self,
        site: &ClusterSite,
        e: &Experiment,
        at: &StepAt,
        stop: &Stop,
        observer: &mut dyn Observer,
    ) -> StepRecord {
        let step = at.step;
        let mut record = self.new_record(e, step);
        let shape = shape_of(e, step);
        if let Err(why) = site.realise(step, &shape, stop) {
            record.fail(StepFailure::RigDidNotStart(why));
            return record;
        }
        let roles = site.roles(step.topology);
        if let Err(why) = site.wait_observable(e, &roles, stop) {
            observer.warning(&format!(
                "{}: {why}; the step goes on, those roles may be missing",
                at.tag(&record.variant)
            ));
        }
        let options = site.load_options(e, step);
        let load = match resolve_at(&options, at) {
            Ok(load) => load,
            Err(failure) => {
                record.fail(failure);
                return record;
            }
        };
        let admins = site.admins(step.topology);
        let read = |admins: &[(ChainRole, meshbench_k8s::Forward)]| -> BTreeMap<ChainRole, Result<ProxyCounters, AdminError>> {
            admins.iter().map(|(r, f)| (*r, admin::read(f.addr()))).collect()
        };
        let before = read(&admins);
        let measured = measure(
            self.load_source(&options),
            &load,
            None,
            ClientPlace::default(),
            stop.clone(),
            |l, roles| observer.live(at, l, roles),
        );
        let after = read(&admins);
        let measured = match measured {
            Ok(m) => m,
            Err(err) => {
                record.fail(StepFailure::LoadGeneratorFailed(err.to_string()));
                return record;
            }
        };
        let window_ms = measured.window_ms;
        record.set_result(measured.result);
        let x = site.section.prometheus();
        let reading = crate::external::read_window(e, &x, &roles, window_ms, stop);
        for w in &reading.warnings {
            observer.warning(&format!("{}: {w}", at.tag(&record.variant)));
        }
        for mut r in reading.roles {
            let Role::Chain(chain) = r.usage.role.clone() else {
                continue;
            };
            r.usage.program = match chain {
                ChainRole::Backend => PlayedBy::Backend,
                _ => PlayedBy::Proxy(Program::Istio),
            };
            r.usage.cpu_limit = match (chain, chain.class()) {
                (ChainRole::ClientProxy, _) => shape.client_proxy.cpu_cores,
                (_, Class::Proxy) => shape.proxy.cpu_cores,
                (_, Class::Backend) => shape.backend.cpu_cores,
                (_, Class::Tunnel) => None,
            };
            keep_witness(&mut r.usage, chain, &before, &after, observer);
            if !r.samples.is_empty() {
                record.samples.insert(r.usage.role.clone(), r.samples);
            }
            record.usage.push(r.usage);
        }
        record
    }
}
