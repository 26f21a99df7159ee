//! The capacity search: the highest open-loop rate that meets an SLO. Doubling from a start
//! rate until a step fails (halving instead when the first one fails), then bisecting between
//! the highest pass and the lowest failure until they are within the precision asked for, then
//! a confirmation run at the answer. A step passes when every SLO threshold holds and the
//! target carried at least 95 % of the offered rate. A failed step in which the load generator
//! itself limited the run (its own check: saturated or throttled CPU, contention, a late timer)
//! is run once more (a busy machine can delay a generator for a moment; a confirmation has its
//! own second chance, apart from the step that first found the rate); when it is limited again
//! the search ends with a refusal naming the cause, since nothing above it was measured,
//! unless a rate above it already failed the SLO with the generator keeping up: then the
//! answer is already bracketed, and the search stops refining and confirms the highest pass at
//! the precision it reached (the answer says so). A step that passed is a pass whatever the
//! generator said: the target kept up.
//!
//! The search is a state machine fed by the caller: [`Search::next`] says which rate to run,
//! [`Search::observe`] takes what happened. The binary runs real steps; the tests feed it
//! known curves.

use meshbench_results::self_check::Cause;

/// What one step at a rate showed.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub rate: f64,
    pub achieved_rps: f64,
    /// Every SLO threshold held.
    pub slo_met: bool,
    /// The generator's own check found that it, not the target, limited the step: why.
    pub generator_limit: Option<Cause>,
    /// The failed thresholds, for the log.
    pub failures: Vec<String>,
    pub confirmation: bool,
}

/// Share of the offered rate that must be carried for a step to pass.
pub const CARRIED: f64 = 0.95;

impl Probe {
    pub fn passed(&self) -> bool {
        self.slo_met && self.achieved_rps >= CARRIED * self.rate
    }
}

/// How the search ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The highest rate that met the SLO; `confirmed` when the confirmation run passed too.
    /// `refinement_stopped_at`: the generator limited the step twice at this rate, between the
    /// answer and a rate that failed the SLO, so the answer is only as precise as that bracket.
    Found {
        rate: f64,
        confirmed: bool,
        refinement_stopped_at: Option<f64>,
    },
    /// Even the lowest rate tried failed.
    BelowFloor { floor: f64 },
    /// Every rate up to the ceiling passed.
    AboveCeiling { ceiling: f64 },
    /// The generator limited the step at this rate twice, for `cause` the second time: the
    /// answer is unknown above it.
    GeneratorLimited { rate: f64, cause: Cause },
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Run { rate: f64, confirmation: bool },
    Done(Answer),
}

/// The search's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub start: f64,
    /// No rate above this is tried.
    pub ceiling: f64,
    /// No rate below this is tried.
    pub floor: f64,
    /// Stop bisecting when (fail - pass) / pass is at most this (0.02 for 2 %).
    pub precision: f64,
    /// Confirmation runs before giving an unconfirmed answer.
    pub confirmations: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            start: 100.0,
            ceiling: 1_000_000.0,
            floor: 1.0,
            precision: 0.02,
            confirmations: 2,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Search {
    pub settings: Settings,
    pub probes: Vec<Probe>,
    pass: Option<f64>,
    fail: Option<f64>,
    confirmations: u32,
    /// A failed step the generator limited, to run once more: its rate, and whether it is a
    /// confirmation.
    retry: Option<(f64, bool)>,
    retried: Vec<(f64, bool)>,
    /// The generator limited two steps at this rate inside the bracket: refine no further.
    refinement_stopped_at: Option<f64>,
    done: Option<Answer>,
}

impl Search {
    pub fn new(settings: Settings) -> Search {
        Search {
            settings,
            probes: Vec::new(),
            pass: None,
            fail: None,
            confirmations: 0,
            retry: None,
            retried: Vec::new(),
            refinement_stopped_at: None,
            done: None,
        }
    }

    /// The rate to run next, or the answer.
    pub fn next(&self) -> Next {
        if let Some(a) = &self.done {
            return Next::Done(a.clone());
        }
        if let Some((rate, confirmation)) = self.retry {
            return Next::Run { rate, confirmation };
        }
        let s = &self.settings;
        let run = |rate: f64| Next::Run {
            rate: (rate * 100.0).round() / 100.0,
            confirmation: false,
        };
        match (self.pass, self.fail) {
            (None, None) => run(s.start.clamp(s.floor, s.ceiling)),
            (Some(p), None) => {
                if p >= s.ceiling {
                    Next::Done(Answer::AboveCeiling { ceiling: s.ceiling })
                } else {
                    run((p * 2.0).min(s.ceiling))
                }
            }
            (None, Some(f)) => {
                if f <= s.floor {
                    Next::Done(Answer::BelowFloor { floor: s.floor })
                } else {
                    run((f / 2.0).max(s.floor))
                }
            }
            (Some(p), Some(f)) => {
                if (f - p) / p <= s.precision || self.refinement_stopped_at.is_some() {
                    Next::Run {
                        rate: p,
                        confirmation: true,
                    }
                } else {
                    run((p + f) / 2.0)
                }
            }
        }
    }

    /// A rate below `rate` passed and one above it failed with the generator keeping up.
    fn bracketed_around(&self, rate: f64) -> bool {
        matches!((self.pass, self.fail), (Some(p), Some(f)) if p < rate && rate < f)
    }

    /// Takes the outcome of the step [`Search::next`] asked for.
    pub fn observe(&mut self, probe: Probe) {
        let passed = probe.passed();
        let (rate, confirmation, limit) = (probe.rate, probe.confirmation, probe.generator_limit);
        self.probes.push(probe);
        self.retry = None;
        if let Some(cause) = limit.filter(|_| !passed) {
            if !self.retried.contains(&(rate, confirmation)) {
                self.retried.push((rate, confirmation));
                self.retry = Some((rate, confirmation));
            } else if !confirmation && self.bracketed_around(rate) {
                self.refinement_stopped_at = Some(rate);
            } else {
                self.done = Some(Answer::GeneratorLimited { rate, cause });
            }
            return;
        }
        if confirmation {
            self.confirmations += 1;
            if passed {
                self.done = Some(Answer::Found {
                    rate,
                    confirmed: true,
                    refinement_stopped_at: self.refinement_stopped_at,
                });
                return;
            }
            // The boundary is noisier than the precision: search again below.
            self.fail = Some(rate);
            self.pass = self
                .probes
                .iter()
                .filter(|p| p.passed() && p.rate < rate)
                .map(|p| p.rate)
                .reduce(f64::max);
            if self.confirmations >= self.settings.confirmations {
                self.done = Some(match self.pass {
                    Some(p) => Answer::Found {
                        rate: p,
                        confirmed: false,
                        refinement_stopped_at: self.refinement_stopped_at,
                    },
                    None => Answer::BelowFloor {
                        floor: self.settings.floor,
                    },
                });
            }
            return;
        }
        if passed {
            self.pass = Some(self.pass.map_or(rate, |p| p.max(rate)));
        } else {
            self.fail = Some(self.fail.map_or(rate, |f| f.min(rate)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a target that carries `capacity` req/s and meets the SLO below
    /// `slo_limit`; returns the answer and the probes.
    fn search(capacity: f64, slo_limit: f64, gen_limit: f64, s: Settings) -> (Answer, Vec<f64>) {
        let mut search = Search::new(s);
        for _ in 0..100 {
            match search.next() {
                Next::Done(a) => return (a, search.probes.iter().map(|p| p.rate).collect()),
                Next::Run { rate, confirmation } => search.observe(Probe {
                    rate,
                    // A saturated generator cannot send the whole rate.
                    achieved_rps: rate.min(capacity).min(gen_limit),
                    slo_met: rate <= slo_limit,
                    generator_limit: (rate > gen_limit).then_some(Cause::CpuSaturation),
                    failures: Vec::new(),
                    confirmation,
                }),
            }
        }
        panic!("the search did not end in 100 steps");
    }

    #[test]
    fn finds_the_rate_within_the_precision_and_confirms_it() {
        let (a, probes) = search(1e9, 3_333.0, 1e9, Settings::default());
        let Answer::Found {
            rate, confirmed, ..
        } = a
        else {
            panic!("{a:?}")
        };
        assert!(confirmed);
        assert!((3_333.0 * 0.98..=3_333.0).contains(&rate), "{rate}");
        // Doubling 100 -> 6400 is 7 steps, bisection to 2 % about 6, one confirmation.
        assert!(probes.len() <= 15, "{probes:?}");
        assert_eq!(&probes[..4], &[100.0, 200.0, 400.0, 800.0]);
    }

    #[test]
    fn a_target_that_cannot_carry_the_rate_fails_even_within_the_slo() {
        // Latency always fine, but only 500 req/s carried.
        let (a, _) = search(500.0, 1e9, 1e9, Settings::default());
        let Answer::Found { rate, .. } = a else {
            panic!("{a:?}")
        };
        assert!((500.0 * 0.98..=500.0 / CARRIED).contains(&rate), "{rate}");
    }

    #[test]
    fn starts_too_high_goes_down() {
        let s = Settings {
            start: 10_000.0,
            ..Settings::default()
        };
        let (a, probes) = search(1e9, 700.0, 1e9, s);
        assert!(
            matches!(a, Answer::Found { rate, confirmed: true, .. } if (686.0..=700.0).contains(&rate))
        );
        assert_eq!(&probes[..5], &[10_000.0, 5_000.0, 2_500.0, 1_250.0, 625.0]);
    }

    #[test]
    fn refuses_when_the_generator_saturates_twice() {
        let (a, probes) = search(1e9, 1e9, 1_000.0, Settings::default());
        assert_eq!(
            a,
            Answer::GeneratorLimited {
                rate: 1_600.0,
                cause: Cause::CpuSaturation
            }
        );
        assert_eq!(
            &probes[4..],
            &[1_600.0, 1_600.0],
            "run once more, then refused"
        );
    }

    #[test]
    fn a_generator_that_saturates_once_is_given_a_second_chance() {
        let mut s = Search::new(Settings::default());
        let probe = |rate: f64, saturated: bool, achieved: f64| Probe {
            rate,
            achieved_rps: achieved,
            slo_met: true,
            generator_limit: saturated.then_some(Cause::CpuSaturation),
            failures: Vec::new(),
            confirmation: false,
        };
        s.observe(probe(100.0, true, 60.0));
        assert_eq!(
            s.next(),
            Next::Run {
                rate: 100.0,
                confirmation: false
            }
        );
        s.observe(probe(100.0, false, 100.0));
        assert_eq!(
            s.next(),
            Next::Run {
                rate: 200.0,
                confirmation: false
            }
        );
        // A pass counts even when the generator called itself saturated.
        s.observe(probe(200.0, true, 200.0));
        assert_eq!(
            s.next(),
            Next::Run {
                rate: 400.0,
                confirmation: false
            }
        );
    }

    #[test]
    fn a_generator_saturating_inside_the_bracket_stops_the_refinement_not_the_answer() {
        // The target meets the SLO up to 500; the generator saturates above 510 but not at 525.
        let mut s = Search::new(Settings::default());
        let mut rates = Vec::new();
        for _ in 0..30 {
            let Next::Run { rate, confirmation } = s.next() else {
                break;
            };
            rates.push(rate);
            let saturated = rate > 510.0 && rate < 520.0;
            s.observe(Probe {
                rate,
                achieved_rps: rate.min(500.0),
                slo_met: rate <= 500.0,
                generator_limit: saturated.then_some(Cause::TimerLateness),
                failures: Vec::new(),
                confirmation,
            });
        }
        let Next::Done(answer) = s.next() else {
            panic!("the search did not end: {rates:?}")
        };
        let Answer::Found {
            rate,
            confirmed,
            refinement_stopped_at: Some(stopped),
        } = answer
        else {
            panic!("{answer:?} after {rates:?}")
        };
        assert!(confirmed, "{rates:?}");
        assert!((490.0..=500.0).contains(&rate), "{rate} after {rates:?}");
        assert!((510.0..520.0).contains(&stopped), "{stopped}");
        assert_eq!(rates.iter().filter(|r| **r == stopped).count(), 2);
    }

    #[test]
    fn edges_are_reported() {
        let s = Settings {
            ceiling: 1_000.0,
            ..Settings::default()
        };
        assert_eq!(
            search(1e9, 1e9, 1e9, s).0,
            Answer::AboveCeiling { ceiling: 1_000.0 }
        );
        assert_eq!(
            search(1e9, 0.5, 1e9, Settings::default()).0,
            Answer::BelowFloor { floor: 1.0 }
        );
    }

    #[test]
    fn a_confirmation_the_generator_limits_has_its_own_second_chance() {
        // 487.5 passed only on its second run (a late timer the first time); its confirmation
        // is limited once more, then passes: the answer stands, confirmed.
        let mut s = Search::new(Settings {
            start: 487.5,
            ceiling: 487.5,
            ..Settings::default()
        });
        let probe = |confirmation: bool, limit: Option<Cause>| Probe {
            rate: 487.5,
            achieved_rps: 480.0,
            slo_met: limit.is_none(),
            generator_limit: limit,
            failures: Vec::new(),
            confirmation,
        };
        s.observe(probe(false, Some(Cause::TimerLateness)));
        s.observe(probe(false, None));
        s.fail = Some(493.75);
        let confirm = Next::Run {
            rate: 487.5,
            confirmation: true,
        };
        assert_eq!(s.next(), confirm);
        s.observe(probe(true, Some(Cause::TimerLateness)));
        assert_eq!(s.next(), confirm, "the confirmation is run once more");
        s.observe(probe(true, None));
        assert_eq!(
            s.next(),
            Next::Done(Answer::Found {
                rate: 487.5,
                confirmed: true,
                refinement_stopped_at: None
            })
        );
        // Limited twice, it is refused, with the cause.
        let mut twice = Search::new(Settings::default());
        twice.pass = Some(487.5);
        twice.fail = Some(493.75);
        twice.observe(probe(true, Some(Cause::CpuContention)));
        twice.observe(probe(true, Some(Cause::CpuContention)));
        assert_eq!(
            twice.next(),
            Next::Done(Answer::GeneratorLimited {
                rate: 487.5,
                cause: Cause::CpuContention
            })
        );
    }
}
