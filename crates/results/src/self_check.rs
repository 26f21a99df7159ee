//! The generator's verdict on its own run, as a result carries it (`generator.check`): valid or
//! not, and each cause found with the line that explains it. The engine's judge
//! (`meshbench_engine::check`) reaches it from the run's figures; every reader of a result
//! (a report, a capacity search, the answers) reads these types.

use serde::{Deserialize, Serialize};

/// Why a run's figures may not be the target's alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// No request succeeded (every one failed, or none finished): there is no figure to read.
    NothingMeasured,
    /// Most requests failed: the figures describe failures more than the target's service.
    TargetErrors,
    /// Sends went out late while the CPU idled: the machine's sleeps end late.
    TimerLateness,
    /// The busiest worker thread had no CPU to spare.
    CpuSaturation,
    /// Other processes took the generator's CPU: its threads waited to run.
    CpuContention,
    /// The generator's cgroup used up its CPU quota (a pod's CPU limit) and the kernel stopped
    /// its threads until the period ended: sends went out late for that.
    CpuThrottled,
    /// The target could not keep up with the rate (its limit): requests waited for connections
    /// that would have sufficed at its ordinary speed. A finding about the target, not a fault
    /// of the run.
    SlowTarget,
    /// Too few connections to carry the rate even at the target's ordinary speed.
    TooFewConnections,
}

impl Cause {
    /// The name the JSON uses.
    pub fn name(self) -> &'static str {
        match self {
            Cause::NothingMeasured => "nothing_measured",
            Cause::TargetErrors => "target_errors",
            Cause::TimerLateness => "timer_lateness",
            Cause::CpuSaturation => "cpu_saturation",
            Cause::CpuContention => "cpu_contention",
            Cause::CpuThrottled => "cpu_throttled",
            Cause::SlowTarget => "slow_target",
            Cause::TooFewConnections => "too_few_connections",
        }
    }

    /// Whether this cause makes the figures unfit to describe the target's service: the
    /// generator's rather than the target's, or failures (or nothing) rather than service.
    pub fn invalidates(self) -> bool {
        !matches!(self, Cause::SlowTarget)
    }
}

/// One cause found, with the line that explains it and says what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub cause: Cause,
    pub message: String,
}

/// The verdict: valid unless a finding invalidates the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfCheck {
    pub valid: bool,
    pub findings: Vec<Finding>,
}

/// Results stored before the self-check existed read as unjudged: valid, nothing found (their
/// `saturated` flag still says what was known then).
impl Default for SelfCheck {
    fn default() -> Self {
        SelfCheck {
            valid: true,
            findings: Vec::new(),
        }
    }
}

impl SelfCheck {
    /// The first finding that invalidates the run: why, in one line.
    pub fn why_invalid(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.cause.invalidates())
    }

    /// No request succeeded: the run measured nothing (`meshbench run` exits 1).
    pub fn measured_nothing(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.cause == Cause::NothingMeasured)
    }

    /// The generator, not the target, limited the run (a capacity search must not trust it).
    pub fn generator_limited(&self) -> bool {
        self.generator_limit().is_some()
    }

    /// What of the generator's limited the run, the first finding that says so.
    pub fn generator_limit(&self) -> Option<Cause> {
        self.findings.iter().map(|f| f.cause).find(|c| {
            matches!(
                c,
                Cause::TimerLateness
                    | Cause::CpuSaturation
                    | Cause::CpuContention
                    | Cause::CpuThrottled
            )
        })
    }
}
