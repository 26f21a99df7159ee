//! `meshbench size`: how many replicas of a proxy, with how many cores each, carry a target
//! load with headroom. Headroom is the share of each replica's CPU kept free, so a replica runs
//! at most at (1 - headroom) of what its cores carry. Every assumption made is listed with the
//! answer.
//!
//! What one replica carries comes, in this order, from:
//! 1. the proxy at its CPU limit (90 % of its allotment or more, e.g. a closed loop through a
//!    limited gateway): the RPS its allotted cores carried, per core, is its capacity, measured;
//! 2. a line of millicores against RPS over three loads or more that rises (`trend`): CPU =
//!    idle + slope x RPS, so C cores carry (C x 1000 - idle) / slope;
//! 3. figures given by hand (`--rps-per-core`).
//!
//! A proxy measured at one or two loads, never at its limit, has no model, and says what to
//! measure. The variants of a CPU sweep are one proxy (their topology's): each allotment is
//! one more measurement of it. A replica's capacity more than [`EXTRAPOLATE_UP_TO`] times the
//! highest load measured is refused unless asked for ([`Request::extrapolate`]), naming the
//! step that would measure it.

use meshbench_results::{Class, Role, Subject};
use meshbench_stats::Line;
use thiserror::Error;

use crate::headline::{trend_of, Cost, Headline, PerCoreFigure};
use crate::runs::{distinct, Group};
use crate::trend::{Trend, MIN_LOADS};

/// How far past the highest load measured a replica's capacity may reach unasked.
pub const EXTRAPOLATE_UP_TO: f64 = 2.0;

/// A proxy's CPU against the load it carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cpu {
    /// Millicores = idle + slope x RPS, a rising line over three loads or more.
    Line(Line),
    /// Requests per second one core carries (measured at the CPU limit, or given); CPU is
    /// proportional to load.
    PerCore(f64),
    /// Requests per second one core carries at least: a proxy that never reached its CPU
    /// limit carried this much per allotted core. CPU is taken as proportional to load at the
    /// millicores per RPS it used there. A replica count from it is the most needed.
    AtLeast {
        per_core: f64,
        millicores_per_rps: f64,
    },
}

impl Cpu {
    /// Requests per second `cores` carry at full use.
    pub fn rps_at(&self, cores: f64) -> f64 {
        match self {
            Cpu::Line(l) => (cores * 1000.0 - l.intercept) / l.slope,
            Cpu::PerCore(rps) => rps * cores,
            Cpu::AtLeast { per_core, .. } => per_core * cores,
        }
    }

    /// Millicores used at `rps`.
    pub fn millicores_at(&self, rps: f64) -> f64 {
        match self {
            Cpu::Line(l) => l.at(rps),
            Cpu::PerCore(per_core) => rps / per_core * 1000.0,
            Cpu::AtLeast {
                millicores_per_rps, ..
            } => rps * millicores_per_rps,
        }
    }
}

/// A proxy's memory against the load it carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Memory {
    /// MiB = base + slope x RPS, a rising line over three loads or more.
    Line(Line),
    /// The same at every load: the most measured, or given (NaN: not measured).
    Fixed(f64),
}

impl Memory {
    pub fn mib_at(&self, rps: f64) -> f64 {
        match self {
            Memory::Line(l) => l.at(rps),
            Memory::Fixed(mib) => *mib,
        }
    }
}

/// What an experiment measured of a proxy, to say which step would measure further: the
/// open-loop rates, and the CPU class that can be limited with the allotments swept.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measured {
    /// The offered rates, lowest first (empty for a closed loop).
    pub rate_rps: Vec<f64>,
    /// The class `limits.CLASS.cpus` limits (`proxy`, `tunnel`), when known.
    pub class: Option<Class>,
    /// The allotments swept, fewest cores first (empty when not swept).
    pub cores: Vec<f64>,
    /// The most cores the proxy used at any load.
    pub most_cores_used: f64,
}

/// `[300,600,1200]`.
fn list(values: &[f64]) -> String {
    let v: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
    format!("[{}]", v.join(","))
}

/// `x` rounded up to two significant digits (23,337 -> 24,000).
fn round_up(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x;
    }
    let step = 10f64.powf((x.log10().floor() - 1.0).max(0.0));
    (x / step).ceil() * step
}

impl Measured {
    fn with_load(&self, rate_rps: f64) -> String {
        let mut v = self.rate_rps.clone();
        v.push(rate_rps);
        format!("--set 'load.rate_rps={}'", list(&v))
    }

    fn with_cores(&self, class: Class, cores: f64) -> String {
        let mut v = self.cores.clone();
        v.push(cores);
        format!("--set 'limits.{class}.cpus={}'", list(&v))
    }

    /// What to measure so that a replica carrying `capacity` RPS on `cores` cores is measured,
    /// not extrapolated.
    pub fn to_reach(&self, cpu: &Cpu, capacity: f64, cores: f64) -> String {
        let load = round_up(capacity);
        let add_load = format!(
            "add a load of {load} to the experiment's loads: {}",
            self.with_load(load)
        );
        // An allotment swept already was measured, only not at its limit.
        let with_cores = |class: Class| {
            if self.cores.contains(&cores) {
                format!("its {cores}-core step did not reach its limit: give that step more load (more connections, or a higher rate) or the generator CPUs of its own (limits.client.cpuset)")
            } else {
                self.with_cores(class, cores)
            }
        };
        match (cpu, &self.class) {
            (Cpu::PerCore(_) | Cpu::AtLeast { .. }, Some(class)) if !self.rate_rps.is_empty() => {
                format!(
                    "measure it with {cores} cores at its limit: {} {}",
                    with_cores(*class),
                    self.with_load(load)
                )
            }
            (Cpu::PerCore(_) | Cpu::AtLeast { .. }, Some(class)) => format!(
                "measure it with {cores} cores at its limit: {}",
                with_cores(*class)
            ),
            _ if !self.rate_rps.is_empty() => format!("measure up to {load} RPS: {add_load}"),
            (_, Some(class)) => format!("measure it at its CPU limit: {}", with_cores(*class)),
            _ => format!("measure up to {load} RPS"),
        }
    }

    /// What to measure when nothing measured says what one replica carries.
    pub fn to_model(&self) -> String {
        match (self.rate_rps.last(), &self.class) {
            (Some(&top), _) => {
                let mut more = self.rate_rps.clone();
                let mut next = top;
                while more.len() < MIN_LOADS {
                    next *= 2.0;
                    more.push(next);
                }
                if more.len() == self.rate_rps.len() {
                    // Loads enough, but the CPU did not grow over them: go higher.
                    more.push(top * 2.0);
                    more.push(top * 4.0);
                }
                format!(
                    "measure it at {MIN_LOADS} loads or more, higher ones included: --set 'load.rate_rps={}'",
                    list(&more)
                )
            }
            (None, Some(class)) => {
                let below = ((self.most_cores_used * 0.5 * 20.0).floor() / 20.0).max(0.05);
                format!(
                    "measure it at its CPU limit: --set 'limits.{class}.cpus=[{below}]' (it used at most {:.2} cores)",
                    self.most_cores_used
                )
            }
            (None, None) => format!("measure it at {MIN_LOADS} loads or more"),
        }
    }
}

/// The measured cost model of one proxy role.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub cpu: Cpu,
    pub memory: Memory,
    /// Highest RPS measured (beyond it the model is extrapolated; infinite when given).
    pub measured_up_to: f64,
    /// Where the model comes from, in a phrase.
    pub source: String,
    /// What was measured, to say what to measure further.
    pub measured: Measured,
}

impl Model {
    /// A model from figures given: `rps_per_core` requests per second per core and a fixed
    /// memory footprint.
    pub fn from_figures(rps_per_core: f64, memory_mib: f64) -> Model {
        Model {
            cpu: Cpu::PerCore(rps_per_core),
            memory: Memory::Fixed(memory_mib),
            measured_up_to: f64::INFINITY,
            source: format!("given: {rps_per_core} RPS per core, {memory_mib} MiB per replica"),
            measured: Measured::default(),
        }
    }
}

/// Why a proxy of an experiment gives no model.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Unmeasured {
    #[error("its CPU was not measured")]
    NoCpu,
    #[error("it never ran at its CPU limit{} and was measured at {}, fewer than the {MIN_LOADS} a line needs; {advice}", limit_phrase(*most_of_limit), if *loads == 1 { "1 load".to_string() } else { format!("{loads} loads") })]
    NotEnoughLoads {
        loads: usize,
        /// The largest share of its allotment it used, when limited.
        most_of_limit: Option<f64>,
        advice: String,
    },
    #[error("it never ran at its CPU limit{} and its CPU did not grow over the {loads} loads measured (flat at {level:.0} millicores); {advice}", limit_phrase(*most_of_limit))]
    Flat {
        loads: usize,
        level: f64,
        most_of_limit: Option<f64>,
        advice: String,
    },
}

fn limit_phrase(most_of_limit: Option<f64>) -> String {
    most_of_limit.map_or(String::new(), |u| {
        format!(" (at most {:.0} % of its allotment)", u * 100.0)
    })
}

/// One proxy of an experiment and what it can be sized from.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// `TOPOLOGY ROLE`.
    pub name: String,
    pub model: Result<Model, Unmeasured>,
}

/// Which proxies to size: `--role`, `--variant` (a variant, or a topology for all its CPU
/// allotments).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Only {
    pub role: Option<String>,
    pub variant: Option<String>,
}

impl Only {
    fn keeps(&self, c: &Cost) -> bool {
        self.role.as_ref().is_none_or(|r| r == c.usage.role.name())
            && self
                .variant
                .as_ref()
                .is_none_or(|v| *v == c.variant || v == c.topology.name())
    }

    fn keeps_group(&self, g: &Group) -> bool {
        self.variant
            .as_ref()
            .is_none_or(|v| *v == g.variant || v == g.topology.name())
    }
}

/// The class whose `limits` key limits a role (`server_proxy` -> `proxy`): a proxy's or a
/// tunnel's; the backend, the sampler and an external role have none to size by.
fn class_of(role: &Role) -> Option<Class> {
    match role {
        Role::Chain(r) => match r.class() {
            class @ (Class::Proxy | Class::Tunnel) => Some(class),
            Class::Backend | Class::ControlPlane => None,
        },
        Role::Sampler | Role::External(_) | Role::Istiod | Role::Contour => None,
    }
}

/// Every proxy of an experiment (one per topology and role, the CPU allotments of a sweep
/// together) with its model or why there is none; `source` names the experiment in phrases
/// (`experiment 3 'gateway-cpu-sweep'`). The figure at the limit is taken at the allotment
/// closest to `cores_per_replica`.
pub fn candidates(
    h: &Headline,
    source: &str,
    cores_per_replica: f64,
    only: &Only,
) -> Vec<Candidate> {
    let keys = distinct(
        h.costs
            .iter()
            .filter(|c| only.keeps(c))
            .map(|c| (c.topology.clone(), c.usage.role.clone())),
    );
    keys.into_iter()
        .map(|(topology, role)| {
            let costs: Vec<&Cost> = h
                .costs
                .iter()
                .filter(|c| only.keeps(c) && c.topology == topology && c.usage.role == role)
                .collect();
            let groups: Vec<&Group> = h
                .groups
                .iter()
                .filter(|g| only.keeps_group(g) && g.topology == topology)
                .collect();
            Candidate {
                name: format!("{topology} {role}"),
                model: model(source, &topology, &role, &costs, &groups, cores_per_replica),
            }
        })
        .collect()
}

fn model(
    source: &str,
    topology: &Subject,
    role: &Role,
    costs: &[&Cost],
    groups: &[&Group],
    cores_per_replica: f64,
) -> Result<Model, Unmeasured> {
    let measured = measured(role, costs, groups);
    if finite_max(costs, |c| c.usage.cpu_millicores).is_none() {
        return Err(Unmeasured::NoCpu);
    }
    match cpu_of(source, topology, role, costs, cores_per_replica) {
        Ok((cpu, source)) => Ok(Model {
            cpu,
            memory: memory_of(costs),
            measured_up_to: finite_max(costs, |c| c.throughput_rps).unwrap_or(0.0),
            source,
            measured,
        }),
        Err(trend) => Err(unmeasured(trend, costs, &measured)),
    }
}

/// The largest finite value of `f` over the costs; `None` when none is finite.
fn finite_max(costs: &[&Cost], f: impl Fn(&Cost) -> f64) -> Option<f64> {
    costs
        .iter()
        .map(|c| f(c))
        .filter(|v| v.is_finite())
        .reduce(f64::max)
}

/// What the experiment measured of the proxy: its open-loop rates (none when any load was a
/// closed loop), its class, the allotments swept and the most cores it used.
fn measured(role: &Role, costs: &[&Cost], groups: &[&Group]) -> Measured {
    let mut rate_rps: Vec<f64> = distinct(groups.iter().filter_map(|g| g.load.rate_rps_milli()))
        .into_iter()
        .map(|m| m as f64 / 1000.0)
        .collect();
    if groups.iter().any(|g| g.load.rate_rps_milli().is_none()) {
        rate_rps.clear();
    }
    rate_rps.sort_by(f64::total_cmp);
    // The allotments of the proxy's own class: a sweep of another (the control plane's)
    // gave it none.
    let class = class_of(role);
    let mut cores: Vec<f64> = groups
        .iter()
        .filter_map(|g| g.cpu.as_ref())
        .filter(|c| Some(c.role) == class)
        .map(|c| c.cores)
        .collect();
    cores.sort_by(f64::total_cmp);
    cores.dedup();
    Measured {
        rate_rps,
        class,
        cores,
        most_cores_used: finite_max(costs, |c| c.usage.cpu_millicores).unwrap_or(0.0) / 1000.0,
    }
}

/// The proxy's memory: a line when it rises with load, else the most it used.
fn memory_of(costs: &[&Cost]) -> Memory {
    match trend_of(costs, |c| c.usage.memory_mib) {
        Trend::Rising(l) => Memory::Line(l),
        _ => Memory::Fixed(finite_max(costs, |c| c.usage.memory_mib).unwrap_or(f64::NAN)),
    }
}

/// How the proxy's CPU grows with load, and the phrase saying where that comes from, in order
/// of trust: RPS per core at its CPU limit, a line fitted over the loads, a lower bound below
/// the limit. When none of them is measured, the CPU's trend, to say why.
fn cpu_of(
    source: &str,
    topology: &Subject,
    role: &Role,
    costs: &[&Cost],
    cores_per_replica: f64,
) -> Result<(Cpu, String), Trend> {
    if let Some((c, per_core)) = per_core_at(costs, cores_per_replica, PerCoreKind::AtLimit) {
        return Ok((
            Cpu::PerCore(per_core),
            format!(
                "{source}, {} at {}: {role} at its CPU limit ({:.0} % of {} cores) carried {:.0} req/s: {per_core:.0} RPS per core, measured",
                c.variant,
                c.load,
                c.cpu_utilization().unwrap_or(f64::NAN) * 100.0,
                c.usage.cpu_limit.unwrap_or(f64::NAN),
                c.throughput_rps
            ),
        ));
    }
    let trend = trend_of(costs, |c| c.usage.cpu_millicores);
    if let Trend::Rising(line) = trend {
        return Ok((
            Cpu::Line(line),
            format!("{source}, {topology} {role} fitted over {} loads", line.n),
        ));
    }
    if let Some((c, per_core)) = per_core_at(costs, cores_per_replica, PerCoreKind::AtLeast) {
        return Ok((
            Cpu::AtLeast {
                per_core,
                millicores_per_rps: c.usage.cpu_millicores / c.throughput_rps,
            },
            format!(
                "{source}, {} at {}: {role} below its CPU limit ({:.0} % of {} cores) carried {:.0} req/s: at least {per_core:.0} RPS per core, a lower bound",
                c.variant,
                c.load,
                c.cpu_utilization().unwrap_or(f64::NAN) * 100.0,
                c.usage.cpu_limit.unwrap_or(f64::NAN),
                c.throughput_rps
            ),
        ));
    }
    Err(trend)
}

/// Which RPS per core [`per_core_at`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PerCoreKind {
    /// Measured with the proxy at its CPU limit.
    AtLimit,
    /// A lower bound, the proxy below its limit (and using some CPU).
    AtLeast,
}

/// Of the costs with a positive RPS per core of `kind`, the one [`closest`] to
/// `cores_per_replica`, with that figure.
fn per_core_at<'a>(
    costs: &[&'a Cost],
    cores_per_replica: f64,
    kind: PerCoreKind,
) -> Option<(&'a Cost, f64)> {
    closest(
        costs
            .iter()
            .filter_map(|c| match (kind, c.per_core()) {
                (PerCoreKind::AtLimit, Some(PerCoreFigure::AtLimit(v))) if v > 0.0 => Some((*c, v)),
                (PerCoreKind::AtLeast, Some(PerCoreFigure::AtLeast(v)))
                    if v > 0.0 && c.usage.cpu_millicores > 0.0 =>
                {
                    Some((*c, v))
                }
                _ => None,
            })
            .collect(),
        cores_per_replica,
    )
}

/// Why the proxy has no model, from its CPU's `trend` (never rising: that is a model), with
/// the most of its limit it used and which step would measure it.
fn unmeasured(trend: Trend, costs: &[&Cost], measured: &Measured) -> Unmeasured {
    let most_of_limit = costs
        .iter()
        .filter_map(|c| c.cpu_utilization())
        .filter(|u| u.is_finite())
        .reduce(f64::max);
    match trend {
        Trend::Flat { level, loads } => Unmeasured::Flat {
            loads,
            level,
            most_of_limit,
            advice: measured.to_model(),
        },
        // (A rising line is a model, never this.)
        trend => Unmeasured::NotEnoughLoads {
            loads: trend.loads(),
            most_of_limit,
            advice: measured.to_model(),
        },
    }
}

/// Of the costs found (each with its RPS per core), the one whose allotment is closest to
/// `cores_per_replica`, the one that carried most among equals.
fn closest(found: Vec<(&Cost, f64)>, cores_per_replica: f64) -> Option<(&Cost, f64)> {
    let distance = |c: &Cost| {
        c.usage
            .cpu_limit
            .map_or(f64::INFINITY, |l| (l - cores_per_replica).abs())
    };
    found.into_iter().min_by(|a, b| {
        distance(a.0)
            .total_cmp(&distance(b.0))
            .then(b.0.throughput_rps.total_cmp(&a.0.throughput_rps))
    })
}

/// The sizing asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub target_rps: f64,
    /// Share of each replica's CPU kept free (0.3 for 30 %).
    pub headroom: f64,
    pub cores_per_replica: f64,
    /// Size from the model even when a replica's capacity is more than
    /// [`EXTRAPOLATE_UP_TO`] times the highest load measured (`--extrapolate`).
    pub extrapolate: bool,
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    pub replicas: u64,
    pub cores_per_replica: f64,
    /// RPS one replica carries at full use of its cores.
    pub replica_capacity_rps: f64,
    /// RPS each replica carries at the target.
    pub load_per_replica_rps: f64,
    /// CPU each replica uses at the target, in millicores.
    pub cpu_per_replica_mc: f64,
    pub memory_per_replica_mib: f64,
    pub total_cores: f64,
    /// The capacity is a lower bound ([`Cpu::AtLeast`]): `replicas` is the most needed.
    pub at_most: bool,
    pub assumptions: Vec<String>,
}

#[derive(Debug, Error, PartialEq)]
pub enum SizingError {
    #[error("{0} cores per replica carry no load: the proxy idles at {1:.0} millicores; give more cores per replica")]
    TooSmall(f64, f64),
    #[error("--headroom must be from 0 % to below 100 %")]
    Headroom,
    #[error("--target-rps must be above 0")]
    Target,
    #[error("one replica of {cores} cores would carry {capacity:.0} RPS, {:.1} times the highest load measured ({measured_up_to:.0} RPS), and the model is not known that far: {advice}; or pass --extrapolate to size from the model anyway", capacity / measured_up_to)]
    Extrapolated {
        cores: f64,
        capacity: f64,
        measured_up_to: f64,
        /// The step that would measure it.
        advice: String,
    },
}

pub fn size(model: &Model, req: &Request) -> Result<Sizing, SizingError> {
    if !(0.0..1.0).contains(&req.headroom) {
        return Err(SizingError::Headroom);
    }
    if req.target_rps.is_nan() || req.target_rps <= 0.0 {
        return Err(SizingError::Target);
    }
    let capacity = model.cpu.rps_at(req.cores_per_replica);
    if capacity.is_nan() || capacity <= 0.0 {
        let idle = match model.cpu {
            Cpu::Line(l) => l.intercept,
            Cpu::PerCore(_) | Cpu::AtLeast { .. } => 0.0,
        };
        return Err(SizingError::TooSmall(req.cores_per_replica, idle));
    }
    let beyond = capacity / model.measured_up_to;
    if beyond > EXTRAPOLATE_UP_TO && !req.extrapolate {
        return Err(SizingError::Extrapolated {
            cores: req.cores_per_replica,
            capacity,
            measured_up_to: model.measured_up_to,
            advice: model
                .measured
                .to_reach(&model.cpu, capacity, req.cores_per_replica),
        });
    }
    let usable = capacity * (1.0 - req.headroom);
    let replicas = (req.target_rps / usable).ceil().max(1.0) as u64;
    let per_replica = req.target_rps / replicas as f64;
    let cpu = match model.cpu {
        Cpu::Line(l) => format!(
            "CPU grows linearly with load: {:.0} millicores idle + {:.3} vCPU per 1000 RPS (fit over {} loads, r² {:.3})",
            l.intercept, l.slope, l.n, l.r2
        ),
        Cpu::PerCore(rps) => format!(
            "CPU is proportional to load: {rps:.0} RPS per core, with no idle cost"
        ),
        Cpu::AtLeast {
            per_core,
            millicores_per_rps,
        } => format!(
            "capacity is a lower bound: the proxy never ran at its CPU limit, so one core carries at least {per_core:.0} RPS and the replica count is the most needed; CPU is proportional to load at the {:.3} vCPU per 1000 RPS it used; for the exact count, {}",
            millicores_per_rps,
            model.measured.to_model()
        ),
    };
    let memory = match model.memory {
        Memory::Line(l) => format!(
            "memory grows linearly with load: {:.1} MiB + {:.2} MiB per 1000 RPS (fit over {} loads, r² {:.3})",
            l.intercept,
            l.slope * 1000.0,
            l.n,
            l.r2
        ),
        Memory::Fixed(m) if m.is_finite() => {
            format!("memory is the same at every load: {m:.1} MiB per replica")
        }
        Memory::Fixed(_) => "memory was not measured".to_string(),
    };
    let mut assumptions = vec![
        format!("model: {}", model.source),
        cpu,
        memory,
        format!(
            "headroom {:.0} %: each replica runs at most at {:.0} % of the {:.0} RPS its {} cores carry",
            req.headroom * 100.0,
            (1.0 - req.headroom) * 100.0,
            capacity,
            req.cores_per_replica
        ),
        "load is spread evenly over the replicas; no spare replica for a failure (add one for N+1)"
            .to_string(),
        "only the proxy's own CPU and memory are counted, not the application's".to_string(),
    ];
    if beyond > 1.1 {
        assumptions.push(format!(
            "extrapolated: one replica's capacity ({capacity:.0} RPS) is {beyond:.1} times the highest load measured ({:.0} RPS){}",
            model.measured_up_to,
            if beyond > EXTRAPOLATE_UP_TO {
                ", as --extrapolate asked"
            } else {
                ", within the 2 times sized without --extrapolate"
            }
        ));
    }
    Ok(Sizing {
        replicas,
        cores_per_replica: req.cores_per_replica,
        replica_capacity_rps: capacity,
        load_per_replica_rps: per_replica,
        cpu_per_replica_mc: model.cpu.millicores_at(per_replica),
        memory_per_replica_mib: model.memory.mib_at(per_replica),
        total_cores: replicas as f64 * req.cores_per_replica,
        at_most: matches!(model.cpu, Cpu::AtLeast { .. }),
        assumptions,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn request(target_rps: f64, headroom: f64, cores_per_replica: f64) -> Request {
        Request {
            target_rps,
            headroom,
            cores_per_replica,
            extrapolate: false,
        }
    }

    #[test]
    fn the_issue_example_with_headroom() {
        // 4k RPS per core, 25k RPS target, 30 % headroom: 25000 / (4000 x 0.7) = 8.9 -> 9.
        let m = Model::from_figures(4000.0, 50.0);
        let s = size(&m, &request(25_000.0, 0.3, 1.0)).unwrap();
        assert_eq!(s.replicas, 9);
        assert!((s.replica_capacity_rps - 4000.0).abs() < 1e-9);
        assert!((s.load_per_replica_rps - 25_000.0 / 9.0).abs() < 1e-9);
        assert!((s.cpu_per_replica_mc - 694.444).abs() < 0.01);
        assert_eq!(s.memory_per_replica_mib, 50.0);
        // Two cores per replica halve the count (rounded up).
        let s2 = size(&m, &request(25_000.0, 0.3, 2.0)).unwrap();
        assert_eq!(s2.replicas, 5);
    }

    fn line_model(measured_up_to: f64) -> Model {
        Model {
            cpu: Cpu::Line(Line {
                slope: 0.5, // 0.5 vCPU per 1000 RPS
                intercept: 100.0,
                r2: 0.99,
                n: 4,
            }),
            memory: Memory::Line(Line {
                slope: 0.01,
                intercept: 40.0,
                r2: 0.9,
                n: 4,
            }),
            measured_up_to,
            source: "test".into(),
            measured: Measured {
                rate_rps: vec![250.0, 500.0, 1000.0, 2000.0],
                class: Some(Class::Proxy),
                cores: Vec::new(),
                most_cores_used: 1.1,
            },
        }
    }

    #[test]
    fn idle_cost_lowers_what_a_replica_carries() {
        let m = line_model(2000.0);
        // One core: (1000 - 100) / 0.5 = 1800 RPS.
        let s = size(&m, &request(5000.0, 0.0, 1.0)).unwrap();
        assert_eq!(s.replicas, 3);
        assert!((s.replica_capacity_rps - 1800.0).abs() < 1e-9);
        assert!(!s.assumptions.iter().any(|a| a.starts_with("extrapolated")));
        let bad = |r: Request| size(&m, &r).unwrap_err();
        assert_eq!(bad(request(1.0, 1.0, 1.0)), SizingError::Headroom);
        assert!(matches!(
            bad(request(1.0, 0.1, 0.05)),
            SizingError::TooSmall(..)
        ));
    }

    #[test]
    fn a_capacity_past_twice_the_highest_load_is_refused_unless_asked() {
        let m = line_model(2000.0);
        // Four cores: (4000 - 100) / 0.5 = 7800 RPS, 3.9 times the 2000 measured.
        let err = size(&m, &request(5000.0, 0.0, 4.0)).unwrap_err();
        let SizingError::Extrapolated {
            capacity, advice, ..
        } = &err
        else {
            panic!("{err}")
        };
        assert!((capacity - 7800.0).abs() < 1e-9);
        assert_eq!(
            advice,
            "measure up to 7800 RPS: add a load of 7800 to the experiment's loads: --set 'load.rate_rps=[250,500,1000,2000,7800]'"
        );
        assert!(err.to_string().contains("3.9 times"), "{err}");
        let asked = Request {
            extrapolate: true,
            ..request(5000.0, 0.0, 4.0)
        };
        let s = size(&m, &asked).unwrap();
        assert_eq!(s.replicas, 1);
        assert!(s.assumptions.iter().any(|a| a.starts_with("extrapolated")));
        assert!(s
            .assumptions
            .iter()
            .any(|a| a.ends_with("as --extrapolate asked")));
        // Twice is within reach, and said to be extrapolated.
        let s = size(&line_model(3900.0), &request(5000.0, 0.0, 4.0)).unwrap();
        assert!(s
            .assumptions
            .iter()
            .any(|a| a.ends_with("within the 2 times sized without --extrapolate")));
        // A capacity measured at 0.5 cores asked of 4: the sweep needs 4 cores.
        let mut at_limit = line_model(2000.0);
        at_limit.cpu = Cpu::PerCore(2000.0);
        at_limit.measured.rate_rps.clear();
        at_limit.measured.cores = vec![0.5, 1.0];
        let err = size(&at_limit, &request(50_000.0, 0.3, 4.0)).unwrap_err();
        assert!(
            err.to_string().contains(
                "measure it with 4 cores at its limit: --set 'limits.proxy.cpus=[0.5,1,4]'"
            ),
            "{err}"
        );
        // Asked of an allotment swept already: it was measured, only not at its limit.
        at_limit.cpu = Cpu::PerCore(5000.0);
        let err = size(&at_limit, &request(50_000.0, 0.3, 1.0)).unwrap_err();
        assert!(
            err.to_string()
                .contains("its 1-core step did not reach its limit"),
            "{err}"
        );
    }

    /// A run of `variant` (topology: its first word) at `rate_rps` (None: closed loop) carrying
    /// `rps`, its gateway using `mc` millicores and `mib` MiB of `limit` cores (swept).
    pub(crate) fn measured(
        variant: &str,
        rate_rps: Option<f64>,
        rps: f64,
        mc: f64,
        mib: f64,
        limit: Option<f64>,
    ) -> crate::Run {
        let mut r: meshbench_results::RunResult = meshbench_results::fixtures::run_result();
        r.throughput_rps = rps;
        let mut run = crate::Run::from_result(variant, r).unwrap();
        run.topology = meshbench_results::Subject::Lab(
            meshbench_results::Topology::from_word(variant.split(' ').next().unwrap())
                .expect("a topology"),
        );
        run.load.offer = rate_rps.map_or(
            meshbench_results::Offer::Closed,
            meshbench_results::Offer::open,
        );
        run.cpu = limit.map(|cores| meshbench_results::CpuAllotment {
            role: Class::Proxy,
            cores,
        });
        run.usage = vec![serde_json::from_value(serde_json::json!({
            "role": "gateway", "program": "envoy", "workers": 1, "cpu_limit": limit,
            "samples": 10, "cpu_millicores_avg": mc, "cpu_millicores_max": mc,
            "rss_mib_avg": mib, "rss_mib_max": mib, "working_set_mib_avg": mib,
            "working_set_mib_max": mib, "rx_bytes_per_sec": 0.0, "tx_bytes_per_sec": 0.0,
            "connections_avg": 1.0, "connections_max": 1
        }))
        .unwrap()];
        run
    }

    fn only_candidate(runs: Vec<crate::Run>, cores: f64) -> Candidate {
        let h = Headline::of(crate::group(runs));
        let mut c = candidates(&h, "experiment 1 'x'", cores, &Only::default());
        assert_eq!(c.len(), 1, "{c:?}");
        c.remove(0)
    }

    #[test]
    fn two_loads_below_the_limit_give_no_model_and_say_what_to_add() {
        let c = only_candidate(
            vec![
                measured("gateway", Some(300.0), 299.0, 40.0, 9.2, None),
                measured("gateway", Some(600.0), 598.0, 53.0, 9.0, None),
            ],
            1.0,
        );
        assert_eq!(c.name, "gateway gateway");
        let why = c.model.unwrap_err();
        assert!(
            matches!(why, Unmeasured::NotEnoughLoads { loads: 2, .. }),
            "{why}"
        );
        assert!(
            why.to_string()
                .ends_with("--set 'load.rate_rps=[300,600,1200]'"),
            "{why}"
        );
    }

    #[test]
    fn a_cpu_sweep_is_sized_from_the_allotment_at_its_limit() {
        // The README's gateway sweep: a closed loop; at 0.5 cores the gateway is at its limit,
        // at 1 core the generator could not fill it (59 %).
        let c = only_candidate(
            vec![
                measured("gateway proxy=0.5cpu", None, 9320.0, 499.0, 23.7, Some(0.5)),
                measured("gateway proxy=1cpu", None, 11360.0, 588.0, 23.3, Some(1.0)),
            ],
            1.0,
        );
        let m = c.model.unwrap();
        assert_eq!(m.cpu, Cpu::PerCore(9320.0 / 0.5));
        assert_eq!(m.measured_up_to, 11360.0);
        assert_eq!(m.memory, Memory::Fixed(23.7));
        assert!(m.source.contains("at its CPU limit"), "{}", m.source);
        // 18,640 RPS per core: 25,000 RPS with 30 % headroom is 2 replicas of 1 core.
        let s = size(&m, &request(25_000.0, 0.3, 1.0)).unwrap();
        assert_eq!(s.replicas, 2);
    }

    #[test]
    fn a_sweep_below_its_limit_is_sized_from_a_lower_bound_and_says_so() {
        // A busy machine's generator filled neither allotment (75 % and 40 %): the 1-core
        // step carried 7,600 req/s, so a core carries at least that.
        let c = only_candidate(
            vec![
                measured("gateway proxy=0.5cpu", None, 7000.0, 375.0, 23.7, Some(0.5)),
                measured("gateway proxy=1cpu", None, 7600.0, 400.0, 23.3, Some(1.0)),
            ],
            1.0,
        );
        let m = c.model.unwrap();
        assert_eq!(
            m.cpu,
            Cpu::AtLeast {
                per_core: 7600.0,
                millicores_per_rps: 400.0 / 7600.0
            }
        );
        assert!(m.source.contains("a lower bound"), "{}", m.source);
        // 25,000 / (7,600 x 0.7) = 4.7: at most 5 replicas.
        let s = size(&m, &request(25_000.0, 0.3, 1.0)).unwrap();
        assert_eq!((s.replicas, s.at_most), (5, true));
        assert!(
            s.assumptions
                .iter()
                .any(|a| a.starts_with("capacity is a lower bound")),
            "{:?}",
            s.assumptions
        );
    }

    #[test]
    fn round_up_keeps_two_digits() {
        assert_eq!(round_up(23_337.0), 24_000.0);
        assert_eq!(round_up(7800.0), 7800.0);
        assert_eq!(round_up(56.2), 57.0);
        assert_eq!(round_up(3.2), 4.0);
    }
}
