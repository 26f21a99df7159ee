//! One load window, the one measurement: the engine (or the agents) drives a resolved load
//! while, if a system under test is watched, the sampler reads every role over the same time,
//! and, in a step with changes, the gateway is changed on its schedule (`crate::changes`). Every command that sends traffic comes
//! here (`run`, a capacity step, an experiment's lab step), so a step is exactly a run.
//!
//! The generator can be pinned to CPUs for the duration (`limits.client.cpuset`) and run inside
//! a network namespace (an Istio client pod): the engine's worker threads inherit the calling
//! thread's affinity and namespace, both restored afterwards.

use std::sync::Mutex;
use std::time::Duration;

use meshbench_engine::recorder::Interval;
use meshbench_engine::{Live, LoadSpec, RunError, Stop};
use meshbench_lab::sampler::{self, Sampled, Sampler, Watch};
use meshbench_results::{ChangeFigures, Role, RunResult, Sample};
use thiserror::Error;

use crate::agents::{Fleet, FleetError};
use crate::changes::{StepChanges, WindowStart};
use crate::LoadOptions;

/// Who sends the load.
#[derive(Clone, Copy)]
pub enum LoadSource<'a> {
    /// This process's threads.
    Local,
    /// A fleet of agents, each driving its segment of `options` (which resolve to the spec).
    Agents {
        fleet: &'a Mutex<Fleet>,
        options: &'a LoadOptions,
    },
}

/// Why a measurement could not be made (the target's failures are data, not this).
#[derive(Debug, Error)]
pub enum MeasureError {
    #[error(transparent)]
    Engine(#[from] RunError),
    #[error(transparent)]
    Agents(#[from] FleetError),
    #[error(transparent)]
    Load(#[from] crate::load::LoadError),
    /// The client's place could not be entered.
    #[error(transparent)]
    Place(#[from] meshbench_lab::LabError),
}

/// Where a local generator runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOrigin<'a> {
    /// Pinned to these CPUs.
    pub cpus: Option<&'a [usize]>,
    /// Inside this network namespace (its sockets too).
    pub netns: Option<&'a str>,
}

/// Roles to sample while the load runs.
pub struct Sampling {
    pub watches: Vec<Watch>,
    /// How often each role is read (the file's `sample_interval_ms`).
    pub every: Duration,
}

/// What a measurement produced.
pub struct Measured {
    pub result: RunResult,
    /// What the sampler read, when roles were watched.
    pub sampled: Option<Sampled>,
    /// The steady window on the sampler's clock (milliseconds since the Unix epoch): after the
    /// warm-up, for as long as the load was measured.
    pub window_ms: (u64, u64),
    /// What the step's changes cost, when it was one of a changes pair.
    pub changes: Option<ChangeFigures>,
}

/// What runs beside the load: the roles sampled, the gateway changed.
#[derive(Default)]
pub struct Beside {
    pub sampling: Option<Sampling>,
    pub changes: Option<StepChanges>,
}

/// Drives `spec` from `load_source` (until it ends or `stop` is asked), sampling the roles and
/// applying the changes `beside` asks for meanwhile, with a local generator placed at
/// `client`; `on_live` sees the run about every 200 ms, with the newest reading of each role
/// whenever a second of the run is complete.
pub fn measure(
    load_source: LoadSource,
    spec: &LoadSpec,
    beside: Beside,
    client: LoadOrigin,
    stop: Stop,
    mut on_live: impl FnMut(&Live, &[(Role, Sample)]),
) -> Result<Measured, MeasureError> {
    let sampler = beside.sampling.map(|s| Sampler::start(s.watches, s.every));
    let started_ms = sampler::now_ms();
    let window_start_ms = started_ms + spec.warmup.as_millis() as u64;
    // The engine's own clock starts once its connections are made, the agents' once they
    // are prepared and connected: the window's start is the first live report's instant less
    // the time it says has passed, and the warm-up (the engine's seconds count from there).
    let window_start = WindowStart::default();
    let changes = (beside.changes).map(|c| c.start(window_start.clone(), stop.clone()));
    let warmup_ms = spec.warmup.as_millis() as u64;
    // The seconds a change is read over (kept only when there are changes).
    let mut seconds: Vec<Interval> = Vec::new();
    let live = |live: &Live| {
        if live.elapsed_secs > 0.0 {
            let elapsed_ms = (live.elapsed_secs * 1000.0) as u64;
            window_start.set(sampler::now_ms().saturating_sub(elapsed_ms) + warmup_ms);
        }
        if changes.is_some() {
            seconds.extend(live.seconds.iter().cloned());
        }
        let roles = match &sampler {
            Some(s) if !live.seconds.is_empty() => s.latest(),
            _ => Vec::new(),
        };
        on_live(live, &roles)
    };
    let result = match load_source {
        LoadSource::Local => {
            let pinned = client.cpus.map(Pinned::to);
            let inside = client
                .netns
                .map(meshbench_lab::netns::Entered::new)
                .transpose()?;
            let result = meshbench_engine::run(spec, stop, live);
            drop((inside, pinned));
            result.map_err(MeasureError::from)
        }
        // Agents elsewhere do not have this machine's files: they get their contents.
        LoadSource::Agents { fleet, options } => match options.self_contained() {
            Ok(options) => fleet
                .lock()
                .expect("one step at a time")
                .measure(&options, spec, &stop, live)
                .map_err(MeasureError::from),
            Err(e) => Err(MeasureError::Load(e)),
        },
    };
    let sampled = sampler.map(Sampler::finish);
    let changes = changes.map(|c| c.finish(&seconds));
    let result = result?;
    let from = window_start.get().unwrap_or(window_start_ms);
    let to = from + (result.duration_secs * 1000.0) as u64;
    Ok(Measured {
        result,
        sampled,
        window_ms: (from, to),
        changes,
    })
}

/// This thread pinned to some CPUs until dropped (then its old mask is restored).
struct Pinned {
    old: libc::cpu_set_t,
}

impl Pinned {
    fn to(cpus: &[usize]) -> Pinned {
        // SAFETY: plain bit sets and the calling thread's own affinity.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old);
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Pinned { old }
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: restoring the mask read when pinning.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.old) };
    }
}
