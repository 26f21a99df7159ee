//! The checks of an experiment beyond its keys' types: ranges, keys that go together, and
//! what a topology rules out. `validate` reports every problem at once, each naming its key.

use meshbench_results::{Class, LoopMode, PeerAuthentication, Protocol, StepKind, Topology};

use super::{
    parse_cpuset, AttributionConfig, Backend, ControlPlaneSection, Experiment, Gateway, Isolation,
    Limits, LoadSection, Proxy, RoleLimits, MAX_CPUS, MAX_SECS,
};
use crate::external::External;
use crate::plan::{PlanSize, MAX_STEPS};
use meshbench_results::role::MAX_BACKEND_REPLICAS;
use meshbench_results::topology::MAX_ROUTES;
use meshbench_results::Program;

/// Adds a problem unless `v` is a finite number above 0.
fn positive(key: &str, v: f64, p: &mut Vec<String>) {
    if !(v.is_finite() && v > 0.0) {
        p.push(format!("{key}: expected a number above 0, found {v}"));
    }
}

impl Experiment {
    /// Checks that need more than one key or a range: every problem, not just the first.
    ///
    /// Every key of the file is named below with the check that covers it beyond its type, so
    /// that a key added to the struct does not compile until someone decides its checks.
    pub fn validate(&self) -> Vec<String> {
        let Experiment {
            name: _,        // validate_plan
            description: _, // free text
            labels: _,      // free text
            topologies: _,  // validate_plan, and every check that depends on a topology
            duration_secs: _,
            warmup_secs: _,
            cooldown_secs: _,
            repeats: _,
            sample_interval_ms: _, // validate_timing
            isolation: _,          // validate_gateway
            load: _,               // validate_load
            control_plane: _,      // validate_control_plane
            proxy: _,
            tunnel: _,  // validate_programs
            gateway: _, // validate_gateway
            // Any delay and thread count its type reads is one.
            backend:
                Backend {
                    delay_ms: _,
                    delay_mode: _,
                    threads: _,
                    replicas: _, // validate_replicas
                },
            limits: _,      // validate_limits
            external: _,    // validate_external
            agents: _,      // FleetConfig::validate
            cluster: _,     // ClusterSection::validate
            attribution: _, // validate_attribution
            changes: _,     // validate_changes
            old_words: _,   // not read from the file
        } = self;
        let mut p = Vec::new();
        self.validate_plan(&mut p);
        self.validate_external(&mut p);
        self.validate_control_plane(&mut p);
        self.validate_timing(&mut p);
        self.validate_load(&mut p);
        self.validate_programs(&mut p);
        self.validate_gateway(&mut p);
        self.validate_limits(&mut p);
        self.validate_replicas(&mut p);
        self.validate_size(&mut p);
        self.validate_attribution(&mut p);
        self.validate_changes(&mut p);
        if let Some(agents) = &self.agents {
            agents.validate(&mut p);
        }
        if let Some(cluster) = &self.cluster {
            cluster.validate(&mut p);
            if self.gateway.runs(Program::Contour) {
                cluster.contour.validate(&mut p);
            }
            self.validate_on_cluster(&mut p);
        }
        p
    }

    /// What of the rest of the file a cluster cannot do (`cluster:` given).
    fn validate_on_cluster(&self, p: &mut Vec<String>) {
        if self.topologies.contains(&StepKind::External) || self.external.is_some() {
            p.push("cluster: realises the lab's topologies on a cluster; an external variant is read as it is, without this section: run it in a file of its own".into());
        }
        let chains: Vec<Topology> = self.topologies.iter().filter_map(|k| k.chain()).collect();
        let sidecars = chains.iter().any(|t| t.has_sidecars());
        if sidecars && self.proxy.kind != Program::Istio {
            p.push(format!(
                "proxy.type: {} has no sidecar on a cluster; Istio injects them there: use proxy.type: istio",
                self.proxy.kind.name()
            ));
        }
        let ambient = chains.iter().any(|t| t.is_ambient());
        if ambient && sidecars {
            p.push("topologies: on a cluster ambient and waypoint share the namespace with the sidecar topologies, and a pod with a sidecar is never in ambient: run them in files of their own".into());
        }
        let gateway = chains.contains(&Topology::Gateway);
        // A cluster run deploys Istio's gateway or borrows the cluster's Contour: one program.
        let kind = self.gateway.of(None);
        if gateway && self.gateway.kinds.len() > 1 {
            p.push("gateway.type: a cluster run measures one gateway (Istio's it deploys, or the cluster's Contour); list one program".into());
        }
        if gateway && !matches!(kind, Program::Istio | Program::Contour) {
            p.push(format!(
                "gateway.type: {} is not realised on a cluster; meshbench deploys Istio's ingress gateway there (gateway.type: istio) or uses the cluster's Contour (gateway.type: contour)",
                kind.name()
            ));
        }
        if gateway && kind == Program::Contour {
            let others: Vec<&str> = chains
                .iter()
                .filter(|t| !matches!(t, Topology::Baseline | Topology::Gateway))
                .map(|t| t.name())
                .collect();
            if !others.is_empty() {
                p.push(format!(
                    "topologies: gateway.type: contour on a cluster runs baseline and gateway only (Contour's Envoy in front of the backend, no Istio); run {} in a file of its own",
                    others.join(", ")
                ));
            }
            if self.attribution.is_some() {
                p.push("attribution: on a cluster the proxies log through Istio's Telemetry, which Contour's Envoy does not read: drop attribution with gateway.type: contour".into());
            }
        }
        if self.isolation != Isolation::Loopback {
            p.push(
                "isolation: on a cluster every role is a pod of its own; remove isolation".into(),
            );
        }
        if self.load.response_bytes.len() > 1 {
            p.push("load.response_bytes: on a cluster the backend is deployed once for the run, with one response size: list one value".into());
        }
        if self.load.protocol == Protocol::Http3 {
            p.push("load.protocol: http3 is not realised on a cluster yet (Istio's gateway and sidecars take HTTP/1.1, HTTP/2 and gRPC); use http1, http2 or grpc".into());
        }
        for (role, r) in [
            ("proxy", &self.limits.proxy),
            ("tunnel", &self.limits.tunnel),
            ("backend", &self.limits.backend),
            ("client", &self.limits.client),
        ] {
            if r.cpuset.is_some() {
                p.push(format!(
                    "limits.{role}.cpuset: a pod's CPUs are the kubelet's to choose; give cpus instead"
                ));
            }
        }
        if self.limits.tunnel != RoleLimits::default() {
            p.push("limits.tunnel: ambient's ztunnel is the cluster's DaemonSet; meshbench does not change its limits".into());
        }
        if let Some(agents) = &self.agents {
            if !agents.addresses.is_empty() {
                p.push("agents.addresses: on a cluster the agents are pods that meshbench starts and reaches; give agents.count".into());
            }
        }
        let client_proxy = chains.iter().any(|t| t.has_client_sidecar());
        if self.limits.proxy.cpus.len() > 1 && client_proxy {
            p.push("limits.proxy.cpus: on a cluster a sweep restarts the swept pods between steps, and the client's sidecar is in the agent pods, which stay for the whole run: sweep with serveronly or gateway, or give one value".into());
        }
    }

    /// Attribution samples a share in (0, 1] of the measured requests, over HTTP/1.1 or
    /// HTTP/2, through proxies whose logs meshbench configures (the lab's, or a cluster's
    /// Istio proxies through a `Telemetry`): not an external variant's.
    fn validate_attribution(&self, p: &mut Vec<String>) {
        let Some(AttributionConfig { sample }) = self.attribution else {
            return;
        };
        if !(sample > 0.0 && sample <= 1.0) {
            p.push(format!(
                "attribution.sample: {sample} is not a share of requests; give a number above 0 and at most 1 (0.01 tags one request in 100)"
            ));
        }
        if self.load.protocol == Protocol::Http3 {
            p.push("attribution: not built for HTTP/3 yet; use load.protocol http1, http2 or grpc, or drop attribution".into());
        }
        if self.topologies.contains(&StepKind::External) {
            p.push("attribution: reads the logs of proxies meshbench configures (the lab's, a cluster's Istio), which an external variant's are not; drop attribution or the external topology".into());
        }
        if self.gateway.runs(Program::Contour)
            && self
                .topologies
                .contains(&StepKind::Chain(Topology::Gateway))
        {
            p.push("attribution: Contour writes its Envoy's access log in its own format, not the one attribution reads; drop attribution or use another gateway.type".into());
        }
    }

    /// The plan has a name and at least one topology.
    fn validate_plan(&self, p: &mut Vec<String>) {
        if self.name.trim().is_empty() {
            p.push("name: must not be empty".into());
        }
        if self.topologies.is_empty() {
            p.push("topologies: expected at least one of baseline, serveronly, clientonly, both, gateway, ambient, waypoint, external, control_plane".into());
        }
    }

    /// Durations, repeats and the sampling interval are in range.
    fn validate_timing(&self, p: &mut Vec<String>) {
        positive("duration_secs", self.duration_secs, p);
        for (key, v) in [
            ("warmup_secs", self.warmup_secs),
            ("cooldown_secs", self.cooldown_secs),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                p.push(format!("{key}: expected 0 or more seconds, found {v}"));
            }
        }
        for (key, v) in [
            ("duration_secs", self.duration_secs),
            ("warmup_secs", self.warmup_secs),
            ("cooldown_secs", self.cooldown_secs),
        ] {
            if v > MAX_SECS {
                p.push(format!(
                    "{key}: expected at most {MAX_SECS} seconds (a week), found {v}"
                ));
            }
        }
        if self.repeats == 0 {
            p.push("repeats: expected at least 1".into());
        }
        if self.sample_interval_ms < 100 {
            p.push(format!(
                "sample_interval_ms: expected at least 100, found {}",
                self.sample_interval_ms
            ));
        }
    }

    /// The `load` section: rates, connections, sizes, streams, pool and timeout.
    fn validate_load(&self, p: &mut Vec<String>) {
        let LoadSection {
            mode,
            rate_rps,
            connections,
            in_flight,
            response_bytes,
            request_bytes: _, // validate_requests
            arrival,
            idle_strategy: _,
            pacing_slack_us: _,
            protocol,
            streams,
            threads: _, // 0 is one per core, any other a count
            timeout_ms,
        } = &self.load;
        if *mode == LoopMode::Open {
            if rate_rps.is_empty() {
                p.push("load.rate_rps: an open loop needs at least one rate".into());
            }
            for (i, q) in rate_rps.iter().enumerate() {
                positive(&format!("load.rate_rps[{i}]"), *q, p);
            }
        }
        if connections.is_empty() {
            p.push("load.connections: expected at least one count".into());
        }
        for (i, c) in connections.iter().enumerate() {
            if *c == 0 {
                p.push(format!("load.connections[{i}]: expected at least 1"));
            }
        }
        if response_bytes.is_empty() {
            p.push("load.response_bytes: expected at least one size".into());
        }
        if arrival.is_empty() {
            p.push("load.arrival: expected [uniform], [poisson] or [uniform, poisson]".into());
        }
        if *streams == 0 {
            p.push("load.streams: expected at least 1".into());
        }
        if *streams > 1 && !protocol.is_multiplexed() {
            p.push(
                "load.streams: more than 1 stream needs load.protocol: http2, grpc or h3".into(),
            );
        }
        if !in_flight.is_empty() && *mode != LoopMode::Closed {
            p.push(
                "load.in_flight: caps a closed loop (load.mode: closed); an open loop's rate sets its own"
                    .into(),
            );
        }
        for (i, n) in in_flight.iter().enumerate() {
            if *n == 0 {
                p.push(format!("load.in_flight[{i}]: expected at least 1"));
            }
        }
        let carried = connections.iter().min().map(|c| c * streams.max(&1));
        if let (Some(&most), Some(carried)) = (in_flight.iter().max(), carried) {
            if most > carried {
                p.push(format!(
                    "load.in_flight: {most} is more than {carried} connections (x load.streams) carry; raise load.connections"
                ));
            }
        }
        if *timeout_ms == 0 {
            p.push("load.timeout_ms: expected at least 1".into());
        }
    }

    /// The proxy and tunnel programs: `command` goes with type command only; a tunnel needs L4.
    fn validate_programs(&self, p: &mut Vec<String>) {
        for (section, proxy) in [("proxy", &self.proxy), ("tunnel", &self.tunnel)] {
            let Proxy {
                kind: _,
                workers: _, // 0 follows the CPU allotment, any other a count
                mtls: _,
                peer_authentication,
                command: _,
                config_template: _,
                fallback: _, // any program may stand in
                istio_telemetry: _,
            } = proxy;
            if !peer_authentication.is_empty() && proxy.kind != Program::Istio {
                p.push(format!(
                    "{section}.peer_authentication: only for type istio (this one is {})",
                    proxy.kind.name()
                ));
            }
            if proxy.kind == Program::Istio {
                self.validate_istio_sidecars(section, p);
            } else if proxy.kind == Program::Contour {
                p.push(format!(
                    "{section}.type: contour configures a gateway (gateway.type: contour), not a {section}; use envoy, or istio for Istio's sidecars"
                ));
            } else if proxy.kind == Program::Command {
                if proxy.command.is_empty() {
                    p.push(format!(
                        "{section}.command: type command needs the program and its arguments"
                    ));
                }
            } else if !proxy.command.is_empty() || !proxy.config_template.is_empty() {
                p.push(format!(
                    "{section}.command: only for type command (this one is {})",
                    proxy.kind.name()
                ));
            }
        }
        let tunnels = self.topologies.iter().any(|t| t.has(Class::Tunnel));
        if tunnels && self.tunnel.kind == Program::Caddy {
            p.push("tunnel.type: caddy has no L4 proxy in Debian's package; use haproxy, nginx, envoy or command".into());
        }
    }

    /// `proxy.type: istio`: Istio's sidecars, which run in pods (network namespaces), for the
    /// sidecar topologies only.
    fn validate_istio_sidecars(&self, section: &str, p: &mut Vec<String>) {
        if section != "proxy" {
            p.push(format!(
                "{section}.type: istio runs Istio's sidecars (proxy.type) and gateway (gateway.type); use envoy for the tunnels"
            ));
            return;
        }
        let others: Vec<&str> = self
            .topologies
            .iter()
            .filter(|t| {
                !t.chain().is_some_and(|c| {
                    c.has_sidecars() || matches!(c, Topology::Baseline | Topology::Gateway)
                })
            })
            .map(|t| t.name())
            .collect();
        let lab = self.cluster.is_none();
        if lab && !others.is_empty() {
            p.push(format!(
                "proxy.type: istio runs Istio's sidecars (baseline, serveronly, clientonly, both), not {}; use envoy there",
                others.join(", ")
            ));
        }
        let sidecars = self
            .topologies
            .iter()
            .any(|t| t.chain().is_some_and(Topology::has_mesh_proxy));
        if lab && sidecars && self.isolation != Isolation::Netns {
            p.push("proxy.type: istio runs each workload in a pod of its own, captured by Istio's iptables: add isolation: netns".into());
        }
        if lab && self.agents.is_some() {
            p.push("proxy.type: istio sends the load from inside the client pod, from this process: remove the agents section".into());
        }
        let modes = &self.proxy.peer_authentication;
        if self.proxy.mtls
            && !modes.is_empty()
            && modes.iter().all(|m| *m == PeerAuthentication::Strict)
            && self
                .topologies
                .contains(&StepKind::Chain(Topology::Serveronly))
        {
            p.push("proxy.peer_authentication: strict refuses plaintext, and serveronly's client has no sidecar to send mutual TLS; list permissive too (serveronly then runs under it only), or leave serveronly out".into());
        }
        if modes.contains(&PeerAuthentication::Disable) {
            p.push("proxy.peer_authentication: expected permissive or strict (plaintext is proxy.mtls: false)".into());
        }
        let mut distinct = modes.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != modes.len() {
            p.push("proxy.peer_authentication: a value is listed twice".into());
        }
        if modes.len() > 1 && !self.proxy.mtls {
            p.push("proxy.peer_authentication: several values need proxy.mtls: true (without it the mesh is plaintext)".into());
        }
    }

    /// The gateway topology: its program and how many routes it generates.
    fn validate_gateway(&self, p: &mut Vec<String>) {
        let Gateway {
            kinds: _,
            fallback: _, // any program may stand in, for one listed program
            domains: _,
            paths: _,
            workers: _, // 0 follows the CPU allotment, any other a count
            haproxy_reload,
        } = &self.gateway;
        if !haproxy_reload.is_empty() && !self.gateway.runs(Program::Haproxy) {
            p.push("gateway.haproxy_reload: only with type haproxy; add haproxy to gateway.type or remove the key".into());
        }
        let mut distinct = haproxy_reload.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != haproxy_reload.len() {
            p.push("gateway.haproxy_reload: a value is listed twice; list each once".into());
        }
        if self
            .topologies
            .contains(&StepKind::Chain(Topology::Gateway))
        {
            let kinds = &self.gateway.kinds;
            if kinds.is_empty() || self.gateway.runs(Program::Command) {
                p.push(
                    "gateway.type: expected nginx, haproxy, caddy, envoy, istio or contour, or a list of them".into(),
                );
            }
            let distinct: std::collections::BTreeSet<&str> =
                kinds.iter().map(|k| k.name()).collect();
            if distinct.len() < kinds.len() {
                p.push("gateway.type: a program is listed twice; list each once".into());
            }
            if kinds.len() > 1 && self.gateway.fallback.is_some() {
                p.push("gateway.fallback: stands in for one gateway.type; with a list, each listed program must be installed: drop fallback".into());
            }
            for controlled in kinds
                .iter()
                .filter(|k| matches!(k, Program::Istio | Program::Contour))
            {
                if self.isolation == Isolation::Netns {
                    p.push(format!("gateway.type: {controlled} runs its control plane on loopback, which a role in its own network namespace cannot reach; use isolation: loopback"));
                }
            }
            if self.gateway.runs(Program::Contour) && self.load.protocol == Protocol::Http3 {
                p.push("gateway.type: contour serves no HTTP/3 here; use caddy or envoy for HTTP/3, or load.protocol http1, http2 or grpc".into());
            }
            if self.gateway.domains == 0 || self.gateway.paths == 0 {
                p.push("gateway: domains and paths must be at least 1".into());
            }
            let routes = u64::from(self.gateway.domains) * u64::from(self.gateway.paths);
            if routes > MAX_ROUTES {
                p.push(format!(
                    "gateway: {} domains x {} paths is {routes} routes; at most {MAX_ROUTES} are generated",
                    self.gateway.domains, self.gateway.paths
                ));
            }
        }
    }

    /// The per-role `limits`: CPUs, cpusets, memory, and at most one CPU sweep.
    fn validate_limits(&self, p: &mut Vec<String>) {
        let Limits {
            proxy: _,
            tunnel: _,
            backend: _,
            client: _,
            control_plane: _, // below, and validate_control_plane_limits
        } = &self.limits; // each one below
        for (role, r) in [
            ("proxy", &self.limits.proxy),
            ("tunnel", &self.limits.tunnel),
            ("backend", &self.limits.backend),
            ("client", &self.limits.client),
            ("control_plane", &self.limits.control_plane),
        ] {
            let RoleLimits {
                cpus: _,
                cpuset: _,
                memory_mib: _,
            } = r;
            for (i, c) in r.cpus.iter().enumerate() {
                positive(&format!("limits.{role}.cpus[{i}]"), *c, p);
            }
            if let Some(set) = &r.cpuset {
                if parse_cpuset(set).is_none() {
                    p.push(format!(
                        "limits.{role}.cpuset: '{set}' is not a CPU list such as 0, 0-1 or 0,2 (CPUs 0 to {})",
                        MAX_CPUS - 1
                    ));
                }
            }
            if r.memory_mib == Some(0) {
                p.push(format!("limits.{role}.memory_mib: expected at least 1"));
            }
        }
        let client_limited =
            !self.limits.client.cpus.is_empty() || self.limits.client.memory_mib.is_some();
        if client_limited && self.cluster.is_some() {
            p.push("limits.client: on a cluster the agent pods send the load; give cluster.agent_cpu and cluster.agent_memory".into());
        } else if client_limited {
            p.push(
                "limits.client: the load generator runs in this process; only cpuset applies"
                    .into(),
            );
        }
        let sweeps = [
            &self.limits.proxy.cpus,
            &self.limits.tunnel.cpus,
            &self.limits.backend.cpus,
            &self.limits.control_plane.cpus,
        ]
        .iter()
        .filter(|c| c.len() > 1)
        .count();
        if sweeps > 1 {
            p.push("limits: only one role's cpus may list several values (the CPU sweep)".into());
        }
        self.validate_control_plane_limits(p);
    }

    /// `backend.replicas`: 1 to the most, and more than one only where a gateway balances over
    /// them, in the lab.
    fn validate_replicas(&self, p: &mut Vec<String>) {
        let n = self.backend.replicas;
        if !(1..=MAX_BACKEND_REPLICAS).contains(&n) {
            p.push(format!(
                "backend.replicas: expected a whole number from 1 to {MAX_BACKEND_REPLICAS}, found {n}"
            ));
            return;
        }
        if n == 1 {
            return;
        }
        if self.cluster.is_some() {
            p.push("backend.replicas: on a cluster the backend is one pod (not built yet); drop it or run the file in the lab".into());
        }
        let without = self.topologies.iter().find(|t| {
            matches!(t, StepKind::Chain(c) if !matches!(c, Topology::Gateway | Topology::Baseline))
        });
        if let Some(t) = without {
            p.push(format!(
                "backend.replicas: {n} replicas stand behind the gateway, which balances over them; topology {t} runs one backend: list gateway (and baseline) only, or drop backend.replicas"
            ));
        }
        if !self
            .topologies
            .contains(&StepKind::Chain(Topology::Gateway))
        {
            p.push("backend.replicas: only the gateway topology balances over replicas; list gateway, or drop backend.replicas".into());
        }
    }

    /// `limits.control_plane`: limits the control plane the lab runs, so there must be one.
    fn validate_control_plane_limits(&self, p: &mut Vec<String>) {
        let r = &self.limits.control_plane;
        if r.cpus.is_empty() && r.cpuset.is_none() && r.memory_mib.is_none() {
            return;
        }
        // On a cluster only Contour's Deployment is limited by a run (and put back after it);
        // istiod is the cluster's.
        let on_cluster = self.cluster.is_some();
        if on_cluster && !self.gateway.runs(Program::Contour) {
            p.push("limits.control_plane: on a cluster it limits the cluster's Contour (gateway.type: contour); istiod is the cluster's, meshbench does not change it".into());
            return;
        }
        if on_cluster && r.cpuset.is_some() {
            // limits.control_plane.cpuset: said with the other roles' cpusets.
            p.push("limits.control_plane.cpuset: a pod's CPUs are the kubelet's to choose; give cpus instead".into());
        }
        let runs = self
            .topologies
            .iter()
            .any(|t| matches!(t, StepKind::Chain(c) if self.runs_control_plane(*c)));
        if !runs {
            p.push("limits.control_plane: no control plane runs in this experiment; it limits istiod or Contour (gateway.type: istio or contour, proxy.type: istio): drop it or name one".into());
        }
    }

    /// The plan is not more steps than are run.
    fn validate_size(&self, p: &mut Vec<String>) {
        let size = PlanSize::of(self);
        if size.steps() <= MAX_STEPS {
            return;
        }
        let (factors, lists) = match (size.variants, size.mesh_points) {
            (_, 0) => (
                format!(
                    "{} load points x {} variants x {} repeats",
                    size.load_points, size.variants, size.repeats
                ),
                "a list of load or limits",
            ),
            (0, mesh) => (
                format!("{mesh} control-plane cells x {} repeats", size.repeats),
                "a list of control_plane",
            ),
            (variants, mesh) => (
                format!(
                    "({} load points x {variants} variants + {mesh} control-plane cells) x {} repeats",
                    size.load_points, size.repeats
                ),
                "a list of load, limits or control_plane",
            ),
        };
        p.push(format!(
            "the plan has {} steps ({factors}); at most {MAX_STEPS} are run: shorten {lists}, or lower repeats",
            size.steps()
        ));
    }

    /// Topology `control_plane` runs alone: no other topology, no section that is about load
    /// or where it is sent from, no CPU sweep. Its section goes with it, in range.
    fn validate_control_plane(&self, p: &mut Vec<String>) {
        let listed = self.topologies.contains(&StepKind::ControlPlane);
        if let Some(section) = &self.control_plane {
            if !listed {
                p.push("control_plane: given, but topologies does not list control_plane (the section would be ignored)".into());
            }
            section.validate(p);
        }
        if !listed {
            return;
        }
        let mut others: Vec<&str> = self
            .topologies
            .iter()
            .filter(|t| **t != StepKind::ControlPlane)
            .map(|t| t.name())
            .collect();
        others.dedup();
        if !others.is_empty() {
            p.push(format!(
                "topologies: control_plane runs alone (it sends no load); put it in its own file, without {}",
                others.join(", ")
            ));
        }
        let why = "a control_plane step runs istiod and its simulated proxies on this machine";
        for (key, given) in [
            ("cluster", self.cluster.is_some()),
            ("agents", self.agents.is_some()),
            ("external", self.external.is_some()),
            ("attribution", self.attribution.is_some()),
        ] {
            if given {
                p.push(format!(
                    "{key}: {why}, with no load; drop this section or the control_plane topology"
                ));
            }
        }
        for (role, r) in [
            ("proxy", &self.limits.proxy),
            ("tunnel", &self.limits.tunnel),
            ("backend", &self.limits.backend),
        ] {
            if r.cpus.len() > 1 {
                p.push(format!(
                    "limits.{role}.cpus: a control_plane step sweeps no CPU; list one value at most"
                ));
            }
        }
    }

    /// The control-plane matrix the plan walks: the file's section, else its defaults.
    pub fn control_plane_matrix(&self) -> ControlPlaneSection {
        self.control_plane.clone().unwrap_or_default()
    }

    /// Whether a chain of topology `t` runs a control plane the lab starts: istiod for
    /// Istio's sidecars or gateway, Contour for its gateway. It is what `limits.control_plane`
    /// limits, and what a sweep of `limits.control_plane.cpus` varies.
    pub fn runs_control_plane(&self, t: Topology) -> bool {
        if t == Topology::Gateway {
            self.gateway.controlled()
        } else {
            t.has_sidecars() && self.proxy.kind == Program::Istio
        }
    }

    /// Whether the chain of topology `t` has a role of `class` to limit (or sweep).
    pub fn limits_in(&self, t: Topology, class: Class) -> bool {
        match class {
            Class::ControlPlane => self.runs_control_plane(t),
            Class::Proxy | Class::Tunnel | Class::Backend => t.has(class),
        }
    }
}

impl Experiment {
    /// The rules of `external`: the section and the topology go together, the section's own
    /// rules, and what of the rest of the file cannot apply to systems meshbench does not
    /// start.
    fn validate_external(&self, p: &mut Vec<String>) {
        let listed = self.topologies.contains(&StepKind::External);
        match (&self.external, listed) {
            (None, true) => p.push(
                "external: topologies lists external; this section is needed (prometheus_url, variants)"
                    .into(),
            ),
            // With control_plane listed, validate_control_plane refuses the section.
            (Some(_), false) if self.topologies.contains(&StepKind::ControlPlane) => {}
            (Some(_), false) => {
                p.push("external: given, but topologies does not list external".into())
            }
            (Some(x), true) => {
                x.validate(self.warmup_secs, self.sample_interval_ms, p);
                self.validate_requests(x, p);
                if self.load.response_bytes.len() > 1 {
                    p.push("load.response_bytes: the external variants' servers choose their responses; list one value".into());
                }
                if self.topologies.iter().all(|t| *t == StepKind::External) {
                    for (role, r) in [
                        ("proxy", &self.limits.proxy),
                        ("tunnel", &self.limits.tunnel),
                        ("backend", &self.limits.backend),
                    ] {
                        if *r != RoleLimits::default() {
                            p.push(format!("limits.{role}: meshbench limits the roles it starts; the external roles are not among them"));
                        }
                    }
                }
            }
            (None, false) => {}
        }
    }
}

impl Experiment {
    /// What each external variant sends: a `.proto` describes gRPC calls, a gRPC body is the
    /// JSON of the `.proto`'s message, and one body at a time.
    fn validate_requests(&self, x: &External, p: &mut Vec<String>) {
        let grpc = self.load.protocol == Protocol::Grpc;
        for (i, v) in x.variants.iter().enumerate() {
            let at = format!("external.variants[{i}]");
            if v.proto.is_some() && !grpc {
                p.push(format!(
                    "{at}.proto: a .proto describes gRPC calls; set load.protocol: grpc"
                ));
            }
            if v.body.is_some() && grpc && v.proto.is_none() {
                p.push(format!(
                    "{at}.body: a gRPC body is JSON of the request message; give the service's .proto in {at}.proto (or drop body: the ping's payload is load.request_bytes)"
                ));
            }
            if self.load.request_bytes > 0 && (v.body.is_some() || v.proto.is_some()) {
                p.push(format!(
                    "load.request_bytes: {at} sends its own request (body, proto); drop one of them"
                ));
            }
        }
    }
}
