//! From an experiment step to the rig the lab starts for it: which programs play which roles,
//! their limits (the swept CPU quota included), the backend's settings, isolation, and the
//! version line of every program the experiment starts (stored with each step).

use std::collections::BTreeMap;
use std::path::PathBuf;

use meshbench_experiment::config::{Experiment, HttpVersion, ProxyType, Topology};
use meshbench_experiment::plan::CpuRole;
use meshbench_experiment::Step;
use meshbench_lab::cgroup::Limits;
use meshbench_lab::gateway::Flavor;
use meshbench_lab::hop::{self, ProxyKind};
use meshbench_lab::rig::{GatewaySpec, RigSpec, Shape};

pub fn proxy_kind(t: ProxyType, p: &meshbench_experiment::config::Proxy) -> ProxyKind {
    match t {
        ProxyType::Nginx => ProxyKind::Nginx,
        ProxyType::Haproxy => ProxyKind::Haproxy,
        ProxyType::Caddy => ProxyKind::Caddy,
        ProxyType::Envoy => ProxyKind::Envoy,
        ProxyType::Command => ProxyKind::Command {
            argv: p.command.clone(),
            template: p.config_template.clone(),
        },
    }
}

/// The version line of each program the experiment starts.
pub fn program_versions(e: &Experiment) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert(
        "meshbench".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    let proxies = e.topologies.iter().any(|t| {
        matches!(
            t,
            Topology::Serveronly | Topology::Clientonly | Topology::Both | Topology::Waypoint
        )
    });
    let tunnels = e
        .topologies
        .iter()
        .any(|t| matches!(t, Topology::Ambient | Topology::Waypoint));
    if proxies {
        let k = proxy_kind(e.proxy.kind, &e.proxy);
        v.insert(format!("proxy:{}", k.name()), hop::version(&k));
    }
    if tunnels {
        let k = proxy_kind(e.tunnel.kind, &e.tunnel);
        v.insert(format!("tunnel:{}", k.name()), hop::version(&k));
    }
    if e.topologies.contains(&Topology::Gateway) {
        let k = proxy_kind(e.gateway.kind, &e.proxy);
        v.insert(format!("gateway:{}", k.name()), hop::version(&k));
    }
    v
}

fn limits(r: &meshbench_experiment::config::RoleLimits, swept: Option<f64>) -> Limits {
    Limits {
        cpus: swept.or_else(|| r.cpus.first().copied()),
        // The file was checked: its CPU lists parse.
        cpuset: r
            .cpuset
            .as_deref()
            .and_then(meshbench_experiment::config::parse_cpuset),
        memory_mib: r.memory_mib,
    }
}

/// The rig of one step.
pub fn rig_spec(e: &Experiment, step: &Step, id: i64, exe: PathBuf) -> RigSpec {
    let swept = |role: CpuRole| step.cpu.filter(|(r, _)| *r == role).map(|(_, c)| c);
    let mut backend_args = vec![
        "--size".to_string(),
        step.load.response_bytes.to_string(),
        "--threads".to_string(),
        match e.backend.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n as usize,
        }
        .to_string(),
    ];
    if e.backend.delay_ms > 0 {
        backend_args.extend(["--delay".into(), format!("{}ms", e.backend.delay_ms)]);
    }
    RigSpec {
        shape: match step.topology {
            Topology::Baseline => Shape::Baseline,
            Topology::Serveronly => Shape::Serveronly,
            Topology::Clientonly => Shape::Clientonly,
            Topology::Both => Shape::Both,
            Topology::Gateway => Shape::Gateway,
            Topology::Ambient => Shape::Ambient,
            Topology::Waypoint => Shape::Waypoint,
        },
        proxy: proxy_kind(e.proxy.kind, &e.proxy),
        proxy_workers: e.proxy.workers,
        proxy_mtls: e.proxy.mtls,
        tunnel: proxy_kind(e.tunnel.kind, &e.tunnel),
        tunnel_workers: e.tunnel.workers,
        tunnel_mtls: e.tunnel.mtls,
        gateway: GatewaySpec {
            flavor: match e.gateway.kind {
                ProxyType::Haproxy => Flavor::Haproxy,
                ProxyType::Caddy => Flavor::Caddy,
                ProxyType::Envoy => Flavor::Envoy,
                _ => Flavor::Nginx,
            },
            domains: e.gateway.domains as usize,
            paths: e.gateway.paths as usize,
            workers: e.gateway.workers,
        },
        backend_exe: exe,
        backend_args,
        proxy_limits: limits(&e.limits.proxy, swept(CpuRole::Proxy)),
        tunnel_limits: limits(&e.limits.tunnel, swept(CpuRole::Tunnel)),
        backend_limits: limits(&e.limits.backend, swept(CpuRole::Backend)),
        http2: e.load.protocol == HttpVersion::Http2,
        netns: e.isolation == meshbench_experiment::config::Isolation::Netns,
        id: format!("{}-{id}-{}", std::process::id(), step.index),
        dir: std::env::temp_dir().join(format!(
            "meshbench-{}-{id}-{}",
            std::process::id(),
            step.index
        )),
    }
}
