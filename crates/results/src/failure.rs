//! Why a step failed, typed: each kind the runner produces ([`StepFailure`]), rendered to the
//! one line a table, an export and the store's `error` column show. The store keeps that line
//! (its column has always held text), so a step read back carries it as
//! [`StepFailure::Recorded`]: the kind is known while the step runs, the words once stored.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::role::ChainRole;
use crate::stop::Stop;

/// Why a step measured nothing usable, or why what it measured does not count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepFailure {
    /// The rig did not start (a program missing, a configuration refused, a port taken...):
    /// why.
    RigDidNotStart(String),
    /// The cluster could not be brought to the step's shape (an object refused, a rollout that
    /// did not finish, an Envoy that did not take its configuration): why. Said in the words
    /// [`StepFailure::RigDidNotStart`] has always given it there, so that stored steps and
    /// printed lines read as before.
    ClusterNotShaped(String),
    /// The step's load could not be resolved into what the engine sends: why.
    LoadNotSetUp(String),
    /// The engine (or the agents sending the load) failed: why.
    LoadGeneratorFailed(String),
    /// A role of the rig exited during the step: which, and the last lines of its log.
    RoleExited { role: ChainRole, log_tail: String },
    /// A control-plane step's istiod, API server or real Envoy failed while it was measured:
    /// why.
    ControlPlaneFailed(String),
    /// A stop (Ctrl-C, SIGTERM) came while the step was being set up, before its load began:
    /// nothing was measured. The step is stored so that the run says how far it got.
    StoppedBeforeLoad,
    /// A failure as the store keeps it: its line.
    Recorded(String),
}

impl StepFailure {
    /// A failed setup as the step's failure: [`StepFailure::StoppedBeforeLoad`] when the
    /// setup ended for a stop (`stopped`: its error says so) or a stop was asked by the time it
    /// failed (a Ctrl-C, which the terminal sends to the process's whole group, also kills the
    /// short-lived helpers a setup runs, such as `ip` or `iptables`, so that any failure after
    /// a stop is the stop's); else `failed()`, the failure with the error's words.
    pub fn from_setup(
        stop: &Stop,
        stopped: bool,
        failed: impl FnOnce() -> StepFailure,
    ) -> StepFailure {
        if stopped || stop.requested() {
            StepFailure::StoppedBeforeLoad
        } else {
            failed()
        }
    }
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepFailure::RigDidNotStart(why) | StepFailure::ClusterNotShaped(why) => {
                write!(f, "the rig did not start: {why}")
            }
            StepFailure::LoadNotSetUp(why) => write!(f, "the load could not be set up: {why}"),
            StepFailure::LoadGeneratorFailed(why) => write!(f, "the load generator failed: {why}"),
            StepFailure::RoleExited { role, log_tail } => {
                write!(f, "{role} exited during the step ({log_tail})")
            }
            StepFailure::ControlPlaneFailed(why) => {
                write!(f, "the control plane failed during the step: {why}")
            }
            StepFailure::StoppedBeforeLoad => f.write_str("stopped before its load began"),
            StepFailure::Recorded(line) => f.write_str(line),
        }
    }
}

impl Serialize for StepFailure {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StepFailure {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StepFailure, D::Error> {
        String::deserialize(d).map(StepFailure::Recorded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_failure_after_a_stop_is_the_stops() {
        let stop = Stop::new();
        let failed = || StepFailure::RigDidNotStart("no key".into());
        assert_eq!(StepFailure::from_setup(&stop, false, failed), failed());
        assert_eq!(
            StepFailure::from_setup(&stop, true, failed),
            StepFailure::StoppedBeforeLoad
        );
        // A helper the group's Ctrl-C killed fails its stage: the stop's doing.
        stop.request();
        assert_eq!(
            StepFailure::from_setup(&stop, false, failed),
            StepFailure::StoppedBeforeLoad
        );
    }

    #[test]
    fn each_kind_says_what_it_said_as_text() {
        let cases = [
            (
                StepFailure::RigDidNotStart("envoy is not available".into()),
                "the rig did not start: envoy is not available",
            ),
            (
                StepFailure::ClusterNotShaped("deployment backend: not rolled out".into()),
                "the rig did not start: deployment backend: not rolled out",
            ),
            (
                StepFailure::LoadNotSetUp("bad URL".into()),
                "the load could not be set up: bad URL",
            ),
            (
                StepFailure::LoadGeneratorFailed("no threads".into()),
                "the load generator failed: no threads",
            ),
            (
                StepFailure::RoleExited {
                    role: ChainRole::ServerProxy,
                    log_tail: "killed".into(),
                },
                "server_proxy exited during the step (killed)",
            ),
            (
                StepFailure::StoppedBeforeLoad,
                "stopped before its load began",
            ),
        ];
        for (failure, text) in cases {
            assert_eq!(failure.to_string(), text);
            let json = serde_json::to_string(&failure).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            let back: StepFailure = serde_json::from_str(&json).unwrap();
            assert_eq!(back, StepFailure::Recorded(text.to_string()));
            assert_eq!(back.to_string(), text);
        }
    }
}
