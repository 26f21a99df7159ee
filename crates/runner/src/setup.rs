//! From an experiment step to the rig the lab starts for it: which programs play which roles,
//! their limits (the swept CPU quota included), the backend's settings, isolation, and the
//! version line of every program the experiment starts (stored with each step).

use std::collections::BTreeMap;
use std::path::PathBuf;

use meshbench_experiment::config::{DelayMode, Experiment};
use meshbench_experiment::{ChainVariant, Step};
use meshbench_lab::cgroup::Limits;
use meshbench_lab::istio::sidecars;
use meshbench_lab::program::{envoy, CommandTemplate, LabProgram, ProgramSpec};
use meshbench_lab::rig::{GatewaySpec, RigSpec};
use meshbench_lab::Program;
use meshbench_results::{Class, LoadPoint, StepKind, Topology};

/// The program of a `proxy` or `tunnel` section, with its command template.
fn program_spec(p: &meshbench_experiment::config::Proxy) -> ProgramSpec {
    ProgramSpec {
        program: p.kind,
        command: CommandTemplate {
            argv: p.command.clone(),
            config: p.config_template.clone(),
        },
    }
}

/// Which of the experiment's program sections its topologies use.
struct Sections {
    proxies: bool,
    tunnels: bool,
    gateway: bool,
}

impl Sections {
    fn used(e: &Experiment) -> Sections {
        Sections {
            proxies: e
                .topologies
                .iter()
                .any(|t| t.chain().is_some_and(Topology::has_mesh_proxy)),
            tunnels: e.topologies.iter().any(|t| t.has(Class::Tunnel)),
            gateway: e.topologies.contains(&StepKind::Chain(Topology::Gateway)),
        }
    }
}

/// What to do about a program an experiment needs that is not installed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provision {
    /// A run: install a missing Envoy (scripts/install-envoy.sh, embedded in the binary), as
    /// a missing nginx is installed with apt-get; the section's `fallback` takes its place
    /// only where that fails.
    Install,
    /// A dry run: install nothing; say that the run will install Envoy, and stand in only
    /// where it could not.
    Plan,
}

/// Installs Envoy where a section the experiment's topologies use names it and it is missing
/// ([`Provision::Install`]), and puts the section's `fallback` in place of a program that
/// still cannot run here; one line per install refused or substitution says what is measured
/// instead and why. (The install itself says so in one line of its own.)
pub fn stand_ins(e: &mut Experiment, provision: Provision) -> Vec<String> {
    let Sections {
        proxies,
        tunnels,
        gateway,
    } = Sections::used(e);
    let mut notes = Vec::new();
    let mut swap = |section: &str, used: bool, kind: &mut Program, fallback: Option<Program>| {
        if !used || kind.runs_here() {
            return;
        }
        let installable = *kind == Program::Envoy && envoy::not_installable().is_none();
        let refused = match (installable, provision) {
            (false, _) => None,
            (true, Provision::Plan) => {
                notes.push(format!(
                    "{section}: envoy is not installed here; the run will install Envoy {} first (scripts/install-envoy.sh)",
                    envoy::pinned_version()
                ));
                return;
            }
            (true, Provision::Install) => match envoy::install() {
                Ok(_) => return,
                Err(e) => Some(e.to_string()),
            },
        };
        let Some(instead) = fallback else {
            if let Some(why) = refused {
                notes.push(format!(
                    "{section}: {kind} could not be installed here ({why}); the steps that need it will fail"
                ));
            }
            return;
        };
        notes.push(match refused {
            Some(why) => format!(
                "{section}: {kind} could not be installed here ({why}), so this run measures {instead} in its place"
            ),
            None => {
                let why = ProgramSpec::from(*kind)
                    .unavailable()
                    .map_or_else(|| envoy::INSTALL_HINT.to_string(), |e| e.to_string());
                format!(
                    "{section}: {kind} is not installed here, so this run measures {instead} in its place ({why})"
                )
            }
        });
        *kind = instead;
    };
    swap("proxy", proxies, &mut e.proxy.kind, e.proxy.fallback);
    swap("tunnel", tunnels, &mut e.tunnel.kind, e.tunnel.fallback);
    let fallback = e.gateway.fallback;
    for kind in &mut e.gateway.kinds {
        swap("gateway", gateway, kind, fallback);
    }
    notes
}

/// One line for each program the experiment's topologies need that cannot run here and that
/// no `fallback` took the place of (call [`stand_ins`] first): which section, why, and what to
/// do. Nothing is installed or started, so `--dry-run` can ask.
pub fn missing_programs(e: &Experiment) -> Vec<String> {
    let Sections {
        proxies,
        tunnels,
        gateway,
    } = Sections::used(e);
    // A list of gateways takes no fallback: what is missing is left out of the list instead.
    let runnable: Vec<String> = e
        .gateway
        .kinds
        .iter()
        .filter(|k| ProgramSpec::from(**k).unavailable().is_none())
        .map(|k| k.to_string())
        .collect();
    let listed = e.gateway.kinds.len() > 1;
    let mut lines = [
        ("proxy", proxies, program_spec(&e.proxy)),
        ("tunnel", tunnels, program_spec(&e.tunnel)),
    ]
    .into_iter()
    .chain(
        (e.gateway.kinds.iter()).map(|kind| ("gateway", gateway, ProgramSpec::from(*kind))),
    )
    .filter(|(_, used, _)| *used)
    .filter_map(|(section, _, spec)| {
        // Istio's sidecars also write Istio's capture, with the iptables tools.
        let capture = (section == "proxy" && spec.program == Program::Istio)
            .then(sidecars::iptables_missing)
            .flatten()
            .map(|what| format!("Istio's capture needs {what}"));
        let why = match (spec.unavailable(), capture) {
            (Some(e), _) => e.to_string(),
            (None, Some(capture)) => capture,
            (None, None) => return None,
        };
        // A fallback stands in only for a program that is not installed (Envoy).
        let instead = match spec.program {
            _ if section == "gateway" && listed => String::new(),
            Program::Envoy => format!(
                "; or name a program to measure in its place (`fallback: nginx` in the file's {section} section)"
            ),
            Program::Istio | Program::Contour => format!(
                "; or name a program to measure in its place (`fallback: envoy` in the file's {section} section)"
            ),
            Program::Nginx | Program::Haproxy | Program::Caddy | Program::Command => String::new(),
        };
        Some(format!("{section}: {why}{instead}"))
    })
    .chain(
        // istiod, the API server and the real Envoy of a control-plane step.
        e.topologies
            .contains(&StepKind::ControlPlane)
            .then(meshbench_lab::istio::unavailable)
            .flatten()
            .map(|why| format!("control_plane: {why}")),
    )
    .collect::<Vec<String>>();
    // Said once, after the list's last missing gateway.
    if let Some(last) = lines.iter_mut().rev().find(|l| l.starts_with("gateway:")) {
        if listed && !runnable.is_empty() {
            last.push_str(&format!(
                "; or run the others ({}): --installed-only",
                runnable.join(", ")
            ));
        }
    }
    lines
}

/// With a list of gateways, leaves out those not installed here (`--installed-only`): one line
/// each, naming it and why (the script that installs it). A list with none installed is kept
/// whole, for [`missing_programs`] to refuse.
pub fn leave_out_missing_gateways(e: &mut Experiment) -> Vec<String> {
    let why = |kind: &Program| {
        ProgramSpec::from(*kind)
            .unavailable()
            .map(|w| w.to_string())
    };
    let kinds = &mut e.gateway.kinds;
    if kinds.len() < 2 || kinds.iter().all(|k| why(k).is_some()) {
        return Vec::new();
    }
    let left_out = kinds
        .iter()
        .filter_map(|k| why(k).map(|w| format!("gateway {k} left out: {w}")))
        .collect();
    kinds.retain(|k| why(k).is_none());
    left_out
}

/// `--dry-run`'s `needs:` line: each program the plan starts, once, and where it comes from.
pub fn needs(e: &Experiment) -> String {
    let Sections {
        proxies,
        tunnels,
        gateway,
    } = Sections::used(e);
    let mut used: Vec<Program> = Vec::new();
    let sections = [(proxies, e.proxy.kind), (tunnels, e.tunnel.kind)];
    let gateways = e.gateway.kinds.iter().map(|k| (gateway, *k));
    let control_plane = (
        e.topologies.contains(&StepKind::ControlPlane),
        Program::Istio,
    );
    for (_, p) in sections
        .into_iter()
        .chain(gateways)
        .chain([control_plane])
        .filter(|s| s.0)
    {
        if !used.contains(&p) {
            used.push(p);
        }
    }
    if used.is_empty() {
        return "needs: nothing but meshbench (its own backend)".into();
    }
    let from = |p: Program| match p {
        Program::Nginx | Program::Haproxy | Program::Caddy => "Debian's, apt-get by the run",
        Program::Envoy => "a pinned wheel, fetched by the run",
        Program::Istio => "scripts/install-istio.sh",
        Program::Contour => "scripts/install-contour.sh",
        Program::Command => "the file's command",
    };
    // Programs from one source share its words: `nginx, haproxy (Debian's, ...)`.
    let mut listed: Vec<(Vec<String>, &str)> = Vec::new();
    for p in used {
        match listed.last_mut() {
            Some((names, source)) if *source == from(p) => names.push(p.to_string()),
            _ => listed.push((vec![p.to_string()], from(p))),
        }
    }
    let listed: Vec<String> = listed
        .iter()
        .map(|(names, source)| format!("{} ({source})", names.join(", ")))
        .collect();
    format!("needs: {}", listed.join(", "))
}

/// The version line of each program the experiment starts.
pub fn program_versions(e: &Experiment) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert(
        "meshbench".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    // The gateway's program is listed on its own.
    let Sections {
        proxies,
        tunnels,
        gateway,
    } = Sections::used(e);
    if proxies {
        let p = program_spec(&e.proxy);
        v.insert(format!("proxy:{}", p.program), p.version());
    }
    if tunnels {
        let p = program_spec(&e.tunnel);
        v.insert(format!("tunnel:{}", p.program), p.version());
    }
    if gateway {
        for kind in &e.gateway.kinds {
            let p = ProgramSpec::from(*kind);
            v.insert(format!("gateway:{}", p.program), p.version());
        }
    }
    if e.topologies.contains(&StepKind::ControlPlane) {
        // istiod and pilot-agent, and the Envoy of the real proxy.
        let p = ProgramSpec::from(Program::Istio);
        v.insert(format!("control_plane:{}", p.program), p.version());
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

/// `meshbench backend`'s arguments besides where it listens: the response size, its threads
/// (`None`: the backend's default), the file's delay.
pub fn backend_args(e: &Experiment, size: u64, threads: Option<usize>) -> Vec<String> {
    let mut args = vec!["--size".to_string(), size.to_string()];
    if let Some(n) = threads {
        args.extend(["--threads".into(), n.to_string()]);
    }
    if e.backend.delay_ms > 0 {
        args.extend(["--delay".into(), format!("{}ms", e.backend.delay_ms)]);
    }
    if e.backend.delay_mode != DelayMode::default() {
        args.extend(["--delay-mode".into(), e.backend.delay_mode.word().into()]);
    }
    args
}

/// The rig of one step: `variant` under `load`.
pub fn rig_spec(
    e: &Experiment,
    step: &Step,
    (variant, load): (&ChainVariant, &LoadPoint),
    id: i64,
    exe: PathBuf,
) -> RigSpec {
    let swept = |class: Class| variant.cpu.filter(|(c, _)| *c == class).map(|(_, c)| c);
    // A lab step always asks for a size (only an external variant's server chooses).
    let backend_args = backend_args(
        e,
        load.response_bytes.unwrap_or_default(),
        Some(match e.backend.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n as usize,
        }),
    );
    RigSpec {
        topology: variant.topology,
        proxy: program_spec(&e.proxy),
        proxy_workers: e.proxy.workers,
        proxy_mtls: e.proxy.mtls,
        proxy_peer_authentication: variant
            .peer_authentication
            .or(e.proxy.peer_authentication.first().copied())
            .unwrap_or_default(),
        proxy_istio_telemetry: e.proxy.istio_telemetry,
        attribution: e.attribution.is_some(),
        tunnel: program_spec(&e.tunnel),
        tunnel_workers: e.tunnel.workers,
        tunnel_mtls: e.tunnel.mtls,
        gateway: GatewaySpec {
            program: e.gateway.of(variant.gateway),
            domains: e.gateway.domains as usize,
            paths: e.gateway.paths as usize,
            workers: e.gateway.workers,
            changeable: variant.changes.is_some(),
            haproxy_reload: (variant.haproxy_reload)
                .or(e.gateway.haproxy_reload.first().copied())
                .unwrap_or_default(),
        },
        backend_exe: exe,
        backend_args,
        backend_replicas: match variant.topology {
            Topology::Gateway => e.backend.replicas,
            _ => 1,
        },
        proxy_limits: limits(&e.limits.proxy, swept(Class::Proxy)),
        tunnel_limits: limits(&e.limits.tunnel, swept(Class::Tunnel)),
        backend_limits: limits(&e.limits.backend, swept(Class::Backend)),
        control_plane_limits: limits(&e.limits.control_plane, swept(Class::ControlPlane)),
        http2: e.load.protocol.is_http2(),
        grpc: e.load.protocol == meshbench_results::Protocol::Grpc,
        http3: e.load.protocol == meshbench_results::Protocol::Http3,
        netns: e.isolation == meshbench_experiment::config::Isolation::Netns,
        id: format!("{}-{id}-{}", std::process::id(), step.index),
        dir: std::env::temp_dir().join(format!(
            "meshbench-{}-{id}-{}",
            std::process::id(),
            step.index
        )),
    }
}
