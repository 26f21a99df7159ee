//! The generator's verdict on its own run: were the figures the target's, and if not, why.
//!
//! A symptom has more than one cause, and each cause wants different advice. Sends that went
//! out late may come from a thread that had no CPU left (add threads), from other processes
//! that took its CPU (the kernel's run-queue delay says so: pin it, or quiet the machine), or
//! from a machine whose sleeps end late while the CPU idles (change the idle strategy, or the
//! machine). Requests
//! that waited for a free connection may come from a target that slowed down under the rate
//! (that is a finding about the target) or from too few connections for the target's ordinary
//! service time (Little's law: rate × service time connections are busy on average; that is a
//! mistake in the run). [`judge`] tells them apart from figures the run measured anyway, so a
//! user reads one line naming the cause and what to do, and a program reads [`Cause`].

use serde::{Deserialize, Serialize};

/// Share of sends (late, or waiting for a connection) above which a symptom counts.
pub const SYMPTOM_SHARE: f64 = 0.01;
/// A worker thread this busy (spinning excluded) had no CPU to spare.
pub const CPU_BOUND: f64 = 0.9;
/// A worker thread that waited this share of its time for a CPU shared it with other work.
pub const CPU_CONTENDED: f64 = 0.1;
/// Late sends are put down to other processes rather than the clock when a worker waited this
/// share of its time for a CPU: a wait of a few milliseconds now and then is what makes the
/// 99th percentile of schedule lag, long before it is a tenth of the run.
pub const CPU_CONTENDED_WHEN_LATE: f64 = 0.01;
/// Sleeps ending this late at the 99th percentile make a clock slow.
pub const SLOW_CLOCK_US: u64 = 100;
/// Connections are too few when even the target's fastest tenth of answers would keep more
/// than this share of them busy.
pub const CONNECTIONS_BUSY: f64 = 0.5;

/// Why a run's figures may not be the target's alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Sends went out late while the CPU idled: the machine's sleeps end late.
    TimerLateness,
    /// The busiest worker thread had no CPU to spare.
    CpuSaturation,
    /// Other processes took the generator's CPU: its threads waited to run.
    CpuContention,
    /// The target slowed down under the rate: requests waited for connections that would have
    /// sufficed at its ordinary speed. A finding about the target, not a fault of the run.
    SlowTarget,
    /// Too few connections to carry the rate even at the target's ordinary speed.
    TooFewConnections,
}

impl Cause {
    /// The name the JSON uses.
    pub fn name(self) -> &'static str {
        match self {
            Cause::TimerLateness => "timer_lateness",
            Cause::CpuSaturation => "cpu_saturation",
            Cause::CpuContention => "cpu_contention",
            Cause::SlowTarget => "slow_target",
            Cause::TooFewConnections => "too_few_connections",
        }
    }

    /// Whether this cause makes the figures the generator's rather than the target's.
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

    /// The generator, not the target, limited the run (a capacity search must not trust it).
    pub fn generator_limited(&self) -> bool {
        self.findings.iter().any(|f| {
            matches!(
                f.cause,
                Cause::TimerLateness | Cause::CpuSaturation | Cause::CpuContention
            )
        })
    }
}

/// What [`judge`] looks at, all measured by the run itself.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Open loop at this rate; `None` for a closed loop (nothing is late or queued there).
    pub rate_rps: Option<f64>,
    pub connections: usize,
    pub sends: u64,
    /// Sends more than 1 ms late while a connection was free.
    pub late_sends: u64,
    /// Sends that waited for a free connection.
    pub queued_sends: u64,
    pub lag_p99_us: u64,
    /// How late sleeps ended, 99th percentile (0 when none was measured).
    pub wake_error_p99_us: u64,
    /// The busiest worker thread's CPU over its wall time, spinning on purpose excluded.
    pub busiest_thread_busy: f64,
    /// The largest share of its wall time a worker thread waited for a CPU.
    pub most_waiting_thread: f64,
    pub service_p10_us: u64,
    pub service_p50_us: u64,
    pub service_p99_us: u64,
}

/// Judges a run from its figures.
pub fn judge(f: &Figures) -> SelfCheck {
    let share = |n: u64| n as f64 / f.sends.max(1) as f64;
    let cpu_bound = f.busiest_thread_busy >= CPU_BOUND;
    let late = f.rate_rps.is_some() && share(f.late_sends) > SYMPTOM_SHARE;
    let contended = f.most_waiting_thread >= CPU_CONTENDED
        || (late && !cpu_bound && f.most_waiting_thread >= CPU_CONTENDED_WHEN_LATE);
    let mut findings = Vec::new();
    let mut add = |cause, message| findings.push(Finding { cause, message });
    if contended {
        add(
            Cause::CpuContention,
            format!(
                "CPU contention: a generator thread waited {:.1} % of the run for a CPU that other processes held ({:.1} % of sends more than 1 ms late, schedule lag p99 {} µs); its sends and reads were late for that, not for the target: pin the generator to CPUs of its own (taskset, the experiment's client_cpus) or run it on a quieter machine",
                100.0 * f.most_waiting_thread,
                100.0 * share(f.late_sends),
                f.lag_p99_us
            ),
        );
    }
    if let Some(rate) = f.rate_rps {
        if late && !cpu_bound && !contended {
            add(
                Cause::TimerLateness,
                format!(
                    "timer lateness: {:.1} % of sends went out more than 1 ms late while the busiest thread was only {:.0} % busy; this machine's sleeps end late (p99 {} µs, schedule lag p99 {} µs): use --idle-strategy hybrid or spin, or a machine with a steadier clock",
                    100.0 * share(f.late_sends),
                    100.0 * f.busiest_thread_busy,
                    f.wake_error_p99_us,
                    f.lag_p99_us
                ),
            );
        }
        if share(f.queued_sends) > SYMPTOM_SHARE {
            let busy_at_best = rate * f.service_p10_us as f64 / 1e6;
            let busy_typical = rate * f.service_p50_us as f64 / 1e6;
            if busy_at_best > CONNECTIONS_BUSY * f.connections as f64 {
                add(
                    Cause::TooFewConnections,
                    format!(
                        "too few connections: {} connections cannot carry {rate} req/s at the target's service time (p50 {:.3} ms keeps about {:.0} busy); {:.1} % of requests waited for one: raise -c to at least {:.0}",
                        f.connections,
                        f.service_p50_us as f64 / 1e3,
                        busy_typical,
                        100.0 * share(f.queued_sends),
                        (2.0 * busy_typical).ceil().max(f.connections as f64 + 1.0)
                    ),
                );
            } else {
                add(
                    Cause::SlowTarget,
                    format!(
                        "slow target: the target did not keep up with {rate} req/s: {:.1} % of requests waited for a free connection, though {} connections carry the rate at its ordinary speed (service p10 {:.3} ms); its service time rose to p99 {:.3} ms. This is the target's limit at this rate (see `meshbench capacity`); latency includes the wait",
                        100.0 * share(f.queued_sends),
                        f.connections,
                        f.service_p10_us as f64 / 1e3,
                        f.service_p99_us as f64 / 1e3
                    ),
                );
            }
        }
    }
    if cpu_bound {
        add(
            Cause::CpuSaturation,
            format!(
                "CPU saturation: the busiest generator thread was {:.0} % busy (spinning excluded): the figures may show the generator's limit rather than the target's; add --threads or split the load across generators",
                100.0 * f.busiest_thread_busy
            ),
        );
    }
    SelfCheck {
        valid: !findings.iter().any(|f| f.cause.invalidates()),
        findings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_kept_waiting_is_contention_not_the_clock() {
        let check = judge(&Figures {
            late_sends: 300,
            wake_error_p99_us: 8_000,
            most_waiting_thread: 0.4,
            ..open(200.0)
        });
        let found: Vec<Cause> = check.findings.iter().map(|f| f.cause).collect();
        assert_eq!(found, [Cause::CpuContention]);
        assert!(!check.valid && check.why_invalid().unwrap().message.contains("taskset"));
        // A little waiting explains late sends; without them it is no finding.
        let causes = |waiting: f64, late_sends: u64| -> Vec<Cause> {
            let figures = Figures {
                late_sends,
                most_waiting_thread: waiting,
                ..open(5000.0)
            };
            judge(&figures).findings.iter().map(|f| f.cause).collect()
        };
        assert_eq!(causes(0.025, 300), [Cause::CpuContention]);
        assert_eq!(causes(0.025, 0), []);
        assert_eq!(causes(0.005, 300), [Cause::TimerLateness]);
    }

    fn open(rate: f64) -> Figures {
        Figures {
            rate_rps: Some(rate),
            connections: 50,
            sends: 10_000,
            lag_p99_us: 40,
            wake_error_p99_us: 60,
            busiest_thread_busy: 0.2,
            service_p10_us: 100,
            service_p50_us: 150,
            service_p99_us: 400,
            ..Figures::default()
        }
    }

    #[test]
    fn each_symptom_gets_its_cause() {
        let cases: Vec<(&str, Figures, Vec<Cause>, bool)> = vec![
            ("a clean open loop", open(1000.0), vec![], true),
            (
                "late sends on an idle CPU: the clock",
                Figures {
                    late_sends: 300,
                    wake_error_p99_us: 1_500,
                    lag_p99_us: 1_400,
                    ..open(5000.0)
                },
                vec![Cause::TimerLateness],
                false,
            ),
            (
                "late sends on a busy CPU: the CPU, not the clock",
                Figures {
                    late_sends: 300,
                    busiest_thread_busy: 0.95,
                    ..open(5000.0)
                },
                vec![Cause::CpuSaturation],
                false,
            ),
            (
                "queued at 5,000 rps with 50 connections and 100 µs answers: the target slowed",
                Figures {
                    queued_sends: 500,
                    service_p99_us: 40_000,
                    ..open(5000.0)
                },
                vec![Cause::SlowTarget],
                true,
            ),
            (
                "queued at 1,000 rps, 50 connections, 80 ms answers: too few connections",
                Figures {
                    queued_sends: 500,
                    service_p10_us: 80_000,
                    service_p50_us: 90_000,
                    ..open(1000.0)
                },
                vec![Cause::TooFewConnections],
                false,
            ),
            (
                "closed loop: lateness and queueing are not judged",
                Figures {
                    rate_rps: None,
                    late_sends: 5_000,
                    queued_sends: 5_000,
                    ..open(1.0)
                },
                vec![],
                true,
            ),
            (
                "closed loop at a full core",
                Figures {
                    rate_rps: None,
                    busiest_thread_busy: 0.97,
                    ..open(1.0)
                },
                vec![Cause::CpuSaturation],
                false,
            ),
            (
                "1 % is tolerated",
                Figures {
                    late_sends: 100,
                    queued_sends: 100,
                    ..open(1000.0)
                },
                vec![],
                true,
            ),
        ];
        for (name, figures, causes, valid) in cases {
            let check = judge(&figures);
            let found: Vec<Cause> = check.findings.iter().map(|f| f.cause).collect();
            assert_eq!(found, causes, "{name}");
            assert_eq!(check.valid, valid, "{name}");
            assert_eq!(check.why_invalid().is_none(), valid, "{name}");
        }
    }

    #[test]
    fn the_advice_fits_the_cause() {
        let said = |f: Figures| judge(&f).findings[0].message.clone();
        let clock = said(Figures {
            late_sends: 300,
            wake_error_p99_us: 1_500,
            ..open(5000.0)
        });
        assert!(
            clock.contains("--idle-strategy") && !clock.contains("--threads"),
            "{clock}"
        );
        let cpu = said(Figures {
            busiest_thread_busy: 0.95,
            ..open(5000.0)
        });
        assert!(cpu.contains("--threads"), "{cpu}");
        let conns = said(Figures {
            queued_sends: 500,
            service_p10_us: 80_000,
            service_p50_us: 90_000,
            ..open(1000.0)
        });
        assert!(conns.contains("raise -c to at least 180"), "{conns}");
        for message in [clock, cpu, conns] {
            assert!(!message.contains('\n'), "one line: {message}");
        }
    }
}
