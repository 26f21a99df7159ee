//! The generator's self-check carried into every answer. A run the check calls INVALID (its
//! figures may be the generator's, not the target's: `generator.check`) marks each figure
//! taken from it, and each answer built on it (a row, a point, a fit, a ranking), with the
//! word INVALID and the cause as the result names it: `INVALID: cpu_contention`, the words
//! `results show` marks a step with ([`mark`]). A run's verdict is its first invalidating
//! finding (`SelfCheck::why_invalid`), as that table's.

use std::fmt;

use meshbench_results::{Cause, RunResult};

/// A step's mark: `INVALID: cpu_contention`.
pub fn mark(cause: Cause) -> String {
    format!("INVALID: {}", cause.name())
}

/// Why a run's figures may not be the target's, if the self-check says so.
pub fn of_result(r: &RunResult) -> Option<Cause> {
    r.generator.check.why_invalid().map(|f| f.cause)
}

/// What the self-check says against the runs an answer rests on: the causes of the runs it
/// calls INVALID, and how many of them there are. Absent (`None` where it is held) when every
/// run is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Each cause once, in the order the runs first give it.
    pub causes: Vec<Cause>,
    /// How many runs the check calls INVALID...
    pub runs: usize,
    /// ...of how many the answer rests on.
    pub of: usize,
}

impl Invalid {
    /// The verdict on an answer built on the runs of `results`; `None` when the check calls
    /// none INVALID. (An answer's groups: `Invalid::of_groups`, beside `Group`.)
    pub fn of_results<'a>(results: impl IntoIterator<Item = &'a RunResult>) -> Option<Invalid> {
        let mut found = Invalid {
            causes: Vec::new(),
            runs: 0,
            of: 0,
        };
        for r in results {
            found.of += 1;
            if let Some(cause) = of_result(r) {
                found.runs += 1;
                if !found.causes.contains(&cause) {
                    found.causes.push(cause);
                }
            }
        }
        (found.runs > 0).then_some(found)
    }

    /// The causes as a step's mark says them: `INVALID: cpu_contention, timer_lateness`.
    pub fn marks(causes: &[Cause]) -> String {
        let names: Vec<&str> = causes.iter().map(|c| c.name()).collect();
        format!("INVALID: {}", names.join(", "))
    }
}

/// `INVALID: cpu_contention`, and `in 1 of 3 runs` when the answer rests on valid runs too.
impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Invalid::marks(&self.causes))?;
        if self.runs < self.of {
            write!(f, " in {} of {} runs", self.runs, self.of)?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use meshbench_results::{Finding, SelfCheck};

    /// `r` as the self-check would leave it had it found `causes` (a slow target is a note,
    /// the others invalidate).
    pub(crate) fn judged(r: &mut RunResult, causes: &[Cause]) {
        let findings: Vec<Finding> = causes
            .iter()
            .map(|&cause| Finding {
                cause,
                message: format!("{} here", cause.name()),
            })
            .collect();
        r.generator.check = SelfCheck {
            valid: !causes.iter().any(|c| c.invalidates()),
            findings,
        };
    }

    fn run(causes: &[Cause]) -> RunResult {
        let mut r = meshbench_results::fixtures::run_result();
        judged(&mut r, causes);
        r
    }

    #[test]
    fn the_mark_is_the_word_and_the_cause_as_the_result_names_it() {
        assert_eq!(mark(Cause::CpuContention), "INVALID: cpu_contention");
        let all = [
            run(&[Cause::CpuContention]),
            run(&[]),
            run(&[Cause::SlowTarget]),
        ];
        let i = Invalid::of_results(&all).unwrap();
        assert_eq!(i.to_string(), "INVALID: cpu_contention in 1 of 3 runs");
        assert_eq!(
            Invalid::of_results(&all[..1]).unwrap().to_string(),
            "INVALID: cpu_contention"
        );
        // A slow target is a note about the target, not a doubt about the figures.
        assert_eq!(Invalid::of_results(&all[1..]), None);
        // A run's verdict is its first invalidating finding, as `results show` marks it.
        let two = [
            run(&[
                Cause::SlowTarget,
                Cause::TimerLateness,
                Cause::CpuContention,
            ]),
            run(&[Cause::CpuContention]),
        ];
        assert_eq!(
            Invalid::of_results(&two).unwrap().to_string(),
            "INVALID: timer_lateness, cpu_contention"
        );
    }
}
