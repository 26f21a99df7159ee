//! The progress lines on stderr while load runs: an experiment's ([`Progress`], the runner's
//! observer: a line redrawn on a terminal, warnings and failed steps always, every second to
//! the live faces) and a single load's ([`ProgressLine`], `run` and a capacity search's URL
//! steps), and how they say a duration to a person ([`human_secs`], [`step_secs`]).

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use meshbench_engine::Live;
use meshbench_live::{Hub, Scope, StepInfo};
use meshbench_results::{Role, Sample, StepFailure};
use meshbench_runner::{Observer, StepAt};
use meshbench_store::StepRecord;

/// The experiment's progress on stderr: a line redrawn four times a second on a terminal,
/// warnings and failed steps always; and every second to the live faces' hub, if any.
pub struct Progress<'a> {
    live: bool,
    name: &'a str,
    store: &'a Path,
    last_draw: Instant,
    pub hub: Option<&'a Hub>,
}

impl<'a> Progress<'a> {
    pub fn new(quiet: bool, name: &'a str, store: &'a Path) -> Progress<'a> {
        Progress {
            live: !quiet && std::io::stderr().is_terminal(),
            name,
            store,
            last_draw: Instant::now(),
            hub: None,
        }
    }

    fn draw(&self, at: &StepAt, elapsed: f64, rps: u64) {
        if !self.live {
            return;
        }
        let left = (at.step_secs - elapsed).max(0.0);
        let done = (elapsed / at.step_secs).clamp(0.0, 1.0);
        let filled = (done * 20.0) as usize;
        eprint!(
            "\r\x1b[2K[{}{}] step {}/{} {} · {} · {} req/s · {} left in step, {} in all",
            "#".repeat(filled),
            ".".repeat(20 - filled),
            at.step.index + 1,
            at.steps,
            at.step.variant(),
            at.step.asks(),
            meshbench_report::thousands(rps),
            human_secs(left),
            human_secs(left + at.left_after_secs)
        );
    }

    fn scope(&self, at: &StepAt) -> Scope {
        Scope {
            experiment: self.name.to_string(),
            step: at.step.index as u32,
            variant: at.step.variant(),
        }
    }

    fn step_info(&self, at: &StepAt) -> StepInfo {
        StepInfo {
            scope: self.scope(at),
            load: at.step.asks(),
            target_rps: at.step.load().and_then(|l| l.rate_rps()),
            steps: at.steps,
            step_secs: at.step_secs,
            left_after_secs: at.left_after_secs,
            started_ms: meshbench_lab::sampler::now_ms(),
        }
    }

    fn clear(&self) {
        if self.live {
            eprint!("\r\x1b[2K");
        }
    }
}

impl Observer for Progress<'_> {
    fn experiment_started(&mut self, id: i64, steps: usize, secs: f64) {
        errln!(
            "experiment {id} '{}': {steps} steps, about {}; results in {}",
            self.name,
            human_secs(secs),
            self.store.display()
        );
    }

    fn step_started(&mut self, at: &StepAt) {
        self.draw(at, 0.0, 0);
        if let Some(hub) = self.hub {
            hub.step_started(self.step_info(at));
        }
    }

    fn live(&mut self, at: &StepAt, l: &Live, roles: &[(Role, Sample)]) {
        if self.last_draw.elapsed() >= Duration::from_millis(250) {
            self.last_draw = Instant::now();
            self.draw(at, l.elapsed_secs, l.last_second_rps);
        }
        // The scope is built only when a second came (every 200 ms otherwise).
        if let Some(hub) = self.hub.filter(|_| !l.seconds.is_empty()) {
            hub.seconds(&self.scope(at), l, roles, meshbench_lab::sampler::now_ms());
        }
    }

    fn warning(&mut self, text: &str) {
        self.clear();
        errln!("warning: {text}");
    }

    fn note(&mut self, text: &str) {
        self.clear();
        errln!("{text}");
    }

    fn step_finished(&mut self, at: &StepAt, record: &StepRecord) {
        self.clear();
        if let Some(hub) = self.hub {
            hub.step_finished(&self.scope(at));
        }
        if record.error == Some(StepFailure::StoppedBeforeLoad) {
            // A stop is not the target's failure: said as what happened, once.
            errln!(
                "step {}/{} ({}, {}) stopped before its load: nothing measured",
                at.step.index + 1,
                at.steps,
                at.step.variant(),
                at.step.asks(),
            );
        } else if record.failed() {
            errln!(
                "step {}/{} ({}, {}) failed: {}",
                at.step.index + 1,
                at.steps,
                at.step.variant(),
                at.step.asks(),
                record
                    .error
                    .as_ref()
                    .map_or_else(|| "unknown".into(), StepFailure::to_string)
            );
        }
    }
}

/// `meshbench run`'s live line on stderr, at most four times a second.
pub struct ProgressLine {
    live: bool,
    last: Instant,
    drawn: bool,
}

impl ProgressLine {
    pub fn new(live: bool) -> ProgressLine {
        ProgressLine {
            live,
            last: Instant::now(),
            drawn: false,
        }
    }

    pub fn draw(&mut self, l: &Live) {
        if !self.live || self.last.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.last = Instant::now();
        self.drawn = true;
        let phase = if l.warming_up { "warm-up " } else { "" };
        eprint!(
            "\r\x1b[2K[{phase}{:5.1}s] {} req/s  {} done  {} errors  p50 {} ms  p99 {} ms",
            l.elapsed_secs,
            meshbench_report::thousands(l.last_second_rps),
            meshbench_report::thousands(l.requests),
            meshbench_report::thousands(l.errors),
            meshbench_report::ms(l.p50_us),
            meshbench_report::ms(l.p99_us),
        );
    }

    pub fn clear(&self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
        }
    }
}

/// A part of a step in seconds, as a person writes it: `3s`, `0.5s`, `6.4s` (one decimal at
/// most, never a float's every digit), and `human_secs` from a minute up.
pub fn step_secs(s: f64) -> String {
    if !s.is_finite() || s >= 60.0 {
        return human_secs(s);
    }
    let tenths = (s * 10.0).round() / 10.0;
    if tenths == tenths.trunc() {
        format!("{tenths:.0}s")
    } else {
        format!("{tenths:.1}s")
    }
}

/// A duration in seconds for a person: `42s`, `3m05s`, `1h02m`.
pub fn human_secs(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_parts_read_as_a_person_writes_them() {
        // Issue 33: an Istio gateway's setup estimate was printed as "~6.357142857142857s".
        assert_eq!(step_secs(6.357142857142857), "6.4s");
        assert_eq!(step_secs(1.0), "1s");
        assert_eq!(step_secs(0.5), "0.5s");
        assert_eq!(step_secs(15.0), "15s");
        assert_eq!(step_secs(0.0), "0s");
        assert_eq!(step_secs(90.0), "1m30s");
    }
}
