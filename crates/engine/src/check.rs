//! The generator's verdict on its own run: were the figures the target's, and if not, why.
//!
//! Findings are ordered by evidence. First what the target answered: a run in which no request
//! succeeded measured nothing, and one in which most failed measured failures; both name the
//! failure that dominated and what to do about it, and the late or queued sends such a run also
//! shows are put down to the failures (connections that fail are reopened after a back-off, so
//! requests wait), not to the generator. A run that measured nothing gets no finding about the
//! generator at all: there is no figure its CPU could have spoiled. Then the generator.
//!
//! A symptom has more than one cause, and each cause wants different advice. Sends that went
//! out late may come from a thread that had no CPU left (add threads), from other processes
//! that took its CPU (the kernel's run-queue delay says so: pin it, or quiet the machine), or
//! from a machine whose sleeps end late while the CPU idles (change the idle strategy, or the
//! machine). A generator in a cgroup with a CPU quota (a pod's CPU limit) that used the quota
//! up was stopped by the kernel, every thread, until the period ended: that explains late sends
//! before the clock or other processes do, and its threads' wait for a CPU is the quota's (the
//! kernel counts it as run-queue delay), so a throttled run is not also judged for timer
//! lateness, contention or a slow target (connections whose answers a stopped generator read
//! late look busy), and the advice is the limit's. Requests
//! that waited for a free connection may come from a target that slowed down under the rate
//! (its limit: a finding about the target) or from too few connections for the target's
//! ordinary service time (Little's law: rate × service time connections are busy on average;
//! that is a mistake in the run). Under its limit a target queues requests itself, so every
//! answer but the first is slow and its service time says nothing of its ordinary speed: the
//! ordinary speed is the fastest answer seen, in this run or (when the caller knows one) at a
//! lower load. [`judge`] tells them apart from figures the run measured anyway, so a user reads
//! one line naming the cause and what to do, and a program reads [`Cause`].

use std::collections::BTreeMap;

use crate::recorder::{Counts, ErrorKind};
use meshbench_net::grpc::Code;
use meshbench_results::run::CpuQuotaUse;
use meshbench_results::self_check::{Cause, Finding, SelfCheck};

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
/// A CPU quota that stopped the generator in this share of the window's periods, or for this
/// share of the window, delayed sends: each throttled period stops every thread until the
/// period ends (up to 95 ms of every 100 at 0.05 cores), and every send due meanwhile goes out
/// late, so throttling in 1 % of the periods makes about 1 % of the window's sends late, the
/// share at which late sends count ([`SYMPTOM_SHARE`]). Time is the second test because a
/// window with few active periods can be stopped long in each.
pub const THROTTLED_SHARE: f64 = SYMPTOM_SHARE;
/// Sleeps ending this late at the 99th percentile make a clock slow.
pub const SLOW_CLOCK_US: u64 = 100;
/// Connections are too few when even the target's fastest answer would keep more than this
/// share of them busy.
pub const CONNECTIONS_BUSY: f64 = 0.5;
/// More than this share of finished requests failed: the run measured mostly failures.
pub const MOSTLY_FAILED: f64 = 0.5;

/// What failed: a kind of transport failure, an HTTP status, a gRPC status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    Transport(ErrorKind),
    Status(u16),
    Grpc(Code),
}

/// The failure that dominated a run: its kind, how many requests it ended and the message the
/// run kept most often for that kind ("certificate signed by an unknown CA").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub count: u64,
    pub message: Option<String>,
}

impl Failure {
    /// The most frequent failure among `counts` (`None` when nothing failed), with the most
    /// frequent of `messages` (keyed `kind: message`, as the recorder keeps them) for its kind.
    pub fn most_frequent(counts: &Counts, messages: &BTreeMap<String, u64>) -> Option<Failure> {
        let transport = ErrorKind::ALL
            .into_iter()
            .map(|k| (FailureKind::Transport(k), counts.errors(k)));
        let statuses = counts
            .status_codes()
            .filter(|&(code, _)| !(100..400).contains(&code))
            .map(|(code, n)| (FailureKind::Status(code), n));
        let grpc = counts
            .grpc_codes()
            .filter(|(code, _)| !code.is_ok())
            .map(|(code, n)| (FailureKind::Grpc(code), n));
        // The first of the largest: transport failures before statuses, lower codes first.
        let (kind, count) = transport
            .chain(statuses)
            .chain(grpc)
            .filter(|&(_, n)| n > 0)
            .fold(
                None,
                |best: Option<(FailureKind, u64)>, (k, n)| match best {
                    Some((_, m)) if m >= n => best,
                    _ => Some((k, n)),
                },
            )?;
        let message = match kind {
            FailureKind::Transport(k) => {
                let prefix = format!("{}: ", k.name());
                messages
                    .iter()
                    .filter_map(|(m, &n)| m.strip_prefix(&prefix).map(|m| (m, n)))
                    .fold(None, |best: Option<(&str, u64)>, (m, n)| match best {
                        Some((_, most)) if most >= n => best,
                        _ => Some((m, n)),
                    })
                    .map(|(m, _)| m.to_string())
            }
            _ => None,
        };
        Some(Failure {
            kind,
            count,
            message,
        })
    }

    /// What failed, in a few words: "the TLS handshake (certificate signed by an unknown CA)".
    fn what(&self) -> String {
        let kind = match self.kind {
            FailureKind::Transport(ErrorKind::Connect) => "connect".to_string(),
            FailureKind::Transport(ErrorKind::Tls) => "the TLS handshake".to_string(),
            FailureKind::Transport(ErrorKind::PortsExhausted) => {
                "connect, with no free local port".to_string()
            }
            FailureKind::Transport(k) => k.name().replace('_', " "),
            FailureKind::Status(code) => format!("HTTP status {code}"),
            FailureKind::Grpc(code) => format!("gRPC status {}", code.name()),
        };
        match (&self.message, self.kind) {
            (Some(m), _) => format!("{kind} ({m})"),
            (None, FailureKind::Transport(ErrorKind::Connect)) => {
                format!("{kind} (refused, or the address unreachable)")
            }
            (None, _) => kind,
        }
    }

    /// What to do about it, naming only flags `meshbench run` has.
    fn advice(&self) -> &'static str {
        let message = self.message.as_deref().unwrap_or("");
        match self.kind {
            FailureKind::Transport(ErrorKind::Connect) => {
                "check that the target is up and listens at the URL's host and port"
            }
            FailureKind::Transport(ErrorKind::Tls) if message.contains("client certificate") => {
                "give --cert and --key: a client certificate signed by a CA the server trusts"
            }
            FailureKind::Transport(ErrorKind::Tls) if message.contains("ALPN") => {
                "the server does not speak the protocol offered: leave out --http2"
            }
            FailureKind::Transport(ErrorKind::Tls) => {
                "trust the CA that signed the server's certificate with --cacert FILE, or accept any certificate with --insecure"
            }
            FailureKind::Transport(ErrorKind::Timeout) => {
                "the target did not answer within --timeout: check that it answers at all, or give a longer --timeout"
            }
            FailureKind::Transport(ErrorKind::Reset) => {
                "the target closed connections before answering: check that it speaks HTTP on that port (https:// for TLS)"
            }
            FailureKind::Transport(ErrorKind::Protocol) => {
                "the target's answers are not the HTTP asked for: https:// for a TLS port, --http2 for a server that speaks only HTTP/2"
            }
            FailureKind::Transport(ErrorKind::GoAway | ErrorKind::StreamReset) => {
                "the HTTP/2 server refused the streams: fewer --streams, or see its limits"
            }
            FailureKind::Transport(ErrorKind::PortsExhausted) => {
                "see the warning about local ports below"
            }
            FailureKind::Transport(ErrorKind::Other) => "see the error messages above",
            FailureKind::Status(code) if (400..500).contains(&code) => {
                "the target refused the requests: check the URL, method, headers and body"
            }
            FailureKind::Status(_) => "the target (or what is behind it) is failing",
            FailureKind::Grpc(_) => {
                "check the method (the URL's path), the message (--body, --proto) and the server"
            }
        }
    }
}

/// What [`judge`] looks at, all measured by the run itself.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Open loop at this rate; `None` for a closed loop (nothing is late or queued there).
    pub rate_rps: Option<f64>,
    pub connections: usize,
    /// Requests that finished in the measured window, answered or failed.
    pub requests: u64,
    /// Of them, failed: transport failures and failing statuses.
    pub failed: u64,
    /// The failure that ended the most requests.
    pub top_failure: Option<Failure>,
    /// Finished requests per second of the measured window.
    pub throughput_rps: f64,
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
    /// The fastest answer of the run (0 when there was none).
    pub service_min_us: u64,
    /// The fastest answer the caller saw the same target give at a lower load (an earlier step
    /// of a capacity search): its ordinary speed, which a run above its limit cannot show.
    pub service_at_lower_load_us: Option<u64>,
    pub service_p50_us: u64,
    pub service_p99_us: u64,
    /// The measured window, seconds.
    pub window_secs: f64,
    /// The generator's CPU quota and how often it was throttled in the window (`None`: no
    /// quota).
    pub cpu_quota: Option<CpuQuotaUse>,
}

/// Judges a run from its figures: what the target answered first, then the generator.
pub fn judge(f: &Figures) -> SelfCheck {
    let signs = Signs::of(f);
    let findings: Vec<Finding> = [
        failures(f, &signs),
        throttling(f, &signs),
        contention(f, &signs),
        timer_lateness(f, &signs),
        queueing(f, &signs),
        saturation(f, &signs),
    ]
    .into_iter()
    .flatten()
    .collect();
    SelfCheck {
        valid: !findings.iter().any(|f| f.cause.invalidates()),
        findings,
    }
}

/// What the figures show, decided once: the findings are written from these.
struct Signs<'a> {
    succeeded: u64,
    mostly_failed: bool,
    /// Late and queued sends count as the generator's symptoms: some requests succeeded and
    /// most did not fail.
    symptoms_count: bool,
    /// An open loop's sends went out late.
    late: bool,
    /// The generator's CPU quota stopped it (only when something was measured).
    throttled: Option<&'a CpuQuotaUse>,
    /// The busiest thread was busy nearly all the time (only when something was measured).
    cpu_bound: bool,
    /// A thread waited for a CPU that other processes held.
    contended: bool,
}

impl<'a> Signs<'a> {
    fn of(f: &'a Figures) -> Signs<'a> {
        let succeeded = f.requests.saturating_sub(f.failed);
        let mostly_failed = f.failed as f64 > MOSTLY_FAILED * f.requests as f64;
        // Failing connections are reopened after a back-off, so requests wait and go out late:
        // in a run of failures those symptoms are the failures', not the generator's.
        let symptoms_count = succeeded > 0 && !mostly_failed;
        let cpu_bound = f.busiest_thread_busy >= CPU_BOUND;
        let late = symptoms_count && f.rate_rps.is_some() && share(f, f.late_sends) > SYMPTOM_SHARE;
        let throttled = f.cpu_quota.as_ref().filter(|q| {
            q.throttled_periods > 0
                && (q.throttled_share() >= THROTTLED_SHARE
                    || q.throttled_secs >= THROTTLED_SHARE * f.window_secs)
        });
        // A run in which no request succeeded has no figures for the generator to have
        // spoiled: it says that it measured nothing and why, and only that. (A run of a
        // millisecond against a refused port spends its window starting threads, whose wait
        // for a CPU is no contention.)
        let measured = succeeded > 0;
        let throttled = throttled.filter(|_| measured);
        let cpu_bound = measured && cpu_bound;
        let contended = measured
            && throttled.is_none()
            && (f.most_waiting_thread >= CPU_CONTENDED
                || (late && !cpu_bound && f.most_waiting_thread >= CPU_CONTENDED_WHEN_LATE));
        Signs {
            succeeded,
            mostly_failed,
            symptoms_count,
            late,
            throttled,
            cpu_bound,
            contended,
        }
    }
}

/// `n` as a share of the sends.
fn share(f: &Figures, n: u64) -> f64 {
    n as f64 / f.sends.max(1) as f64
}

/// How many requests failed and, when known, at what most of them and what to do.
fn failure_text(f: &Figures) -> String {
    match &f.top_failure {
        Some(top) => format!(
            "{} of {} requests failed, {} at {}; {}",
            f.failed,
            f.requests,
            if top.count == f.failed {
                "every one".to_string()
            } else {
                format!("{} of them", top.count)
            },
            top.what(),
            top.advice()
        ),
        None => format!("{} of {} requests failed", f.failed, f.requests),
    }
}

/// Nothing measured (no request finished, or none succeeded), or mostly target errors.
fn failures(f: &Figures, s: &Signs) -> Option<Finding> {
    if f.requests == 0 {
        Some(Finding {
            cause: Cause::NothingMeasured,
            message: "nothing measured: no request finished in the measured window; check that the target answers, and measure for longer than its answers take (-d, --timeout)".to_string(),
        })
    } else if s.succeeded == 0 {
        Some(Finding {
            cause: Cause::NothingMeasured,
            message: format!("nothing measured: {}", failure_text(f)),
        })
    } else if s.mostly_failed {
        Some(Finding {
            cause: Cause::TargetErrors,
            message: format!(
                "target errors: {}; the latency figures describe failures more than the target's service",
                failure_text(f)
            ),
        })
    } else {
        None
    }
}

/// The generator's CPU quota stopped it.
fn throttling(f: &Figures, s: &Signs) -> Option<Finding> {
    let q = s.throttled?;
    Some(Finding {
        cause: Cause::CpuThrottled,
        message: format!(
            "CPU throttled: the generator's cgroup may use {} cores (its CPU quota) and the kernel stopped it for using them up in {} of {} periods ({:.0} %), {:.2} s over the {:.1} s window; its threads sat stopped until each period ended, so sends and reads were late for that, not for the target: raise the pod's CPU limit, or lower the rate or --threads, and do not use --idle-strategy spin or hybrid under a quota",
            q.cores,
            q.throttled_periods,
            q.periods,
            100.0 * q.throttled_share(),
            q.throttled_secs,
            f.window_secs
        ),
    })
}

/// Other processes held the CPUs a generator thread waited for.
fn contention(f: &Figures, s: &Signs) -> Option<Finding> {
    if !s.contended {
        return None;
    }
    Some(Finding {
        cause: Cause::CpuContention,
        message: format!(
            "CPU contention: a generator thread waited {:.1} % of the run for a CPU that other processes held ({:.1} % of sends more than 1 ms late, schedule lag p99 {} µs); its sends and reads were late for that, not for the target: pin the generator to CPUs of its own (taskset, or the experiment's limits.client.cpuset) or run it on a quieter machine",
            100.0 * f.most_waiting_thread,
            100.0 * share(f, f.late_sends),
            f.lag_p99_us
        ),
    })
}

/// An open loop's sends went out late with no busy, contended or throttled thread to blame:
/// the machine's sleeps end late.
fn timer_lateness(f: &Figures, s: &Signs) -> Option<Finding> {
    f.rate_rps?;
    let the_clock = s.late && !s.cpu_bound && !s.contended && s.throttled.is_none();
    if !the_clock {
        return None;
    }
    Some(Finding {
        cause: Cause::TimerLateness,
        message: format!(
            "timer lateness: {:.1} % of sends went out more than 1 ms late while the busiest thread was only {:.0} % busy; this machine's sleeps end late (p99 {} µs, schedule lag p99 {} µs): use --idle-strategy hybrid or spin, or a machine with a steadier clock",
            100.0 * share(f, f.late_sends),
            100.0 * f.busiest_thread_busy,
            f.wake_error_p99_us,
            f.lag_p99_us
        ),
    })
}

/// An open loop's requests waited for a free connection: too few connections for the rate
/// even at the target's fastest answer, or else (the generator not throttled) the target at
/// its limit.
fn queueing(f: &Figures, s: &Signs) -> Option<Finding> {
    let rate = f.rate_rps?;
    let queued = s.symptoms_count && share(f, f.queued_sends) > SYMPTOM_SHARE;
    if !queued {
        return None;
    }
    let (fastest, seen) = match f.service_at_lower_load_us {
        Some(before) if before < f.service_min_us => (before, " at a lower rate"),
        _ => (f.service_min_us, ""),
    };
    let busy_at_fastest = rate * fastest as f64 / 1e6;
    let busy_typical = rate * f.service_p50_us as f64 / 1e6;
    if busy_at_fastest > CONNECTIONS_BUSY * f.connections as f64 {
        Some(Finding {
            cause: Cause::TooFewConnections,
            message: format!(
                "too few connections: {} connections cannot carry {rate} req/s even at the target's fastest answer ({:.3} ms; p50 {:.3} ms keeps about {:.0} busy); {:.1} % of requests waited for one: raise -c to at least {:.0} (unless the target answers faster at a lower rate: then this rate is past its limit)",
                f.connections,
                fastest as f64 / 1e3,
                f.service_p50_us as f64 / 1e3,
                busy_typical,
                100.0 * share(f, f.queued_sends),
                (2.0 * busy_typical).ceil().max(f.connections as f64 + 1.0)
            ),
        })
    } else if s.throttled.is_none() {
        Some(Finding {
            cause: Cause::SlowTarget,
            message: format!(
                "target at its limit: it did not keep up with {rate} req/s, answering {:.1} req/s while its answers slowed from {:.3} ms (its fastest{seen}) to p50 {:.3} ms, p99 {:.3} ms; the generator had room (busiest thread {:.0} % busy) and {:.1} % of requests waited for one of the {} connections, which carry the rate at the target's fastest answers: more connections would only queue at the target. This is the target's limit, not a fault of the run (`meshbench capacity` finds the highest rate it carries); latency includes the wait",
                f.throughput_rps,
                fastest as f64 / 1e3,
                f.service_p50_us as f64 / 1e3,
                f.service_p99_us as f64 / 1e3,
                100.0 * f.busiest_thread_busy,
                100.0 * share(f, f.queued_sends),
                f.connections,
            ),
        })
    } else {
        None
    }
}

/// The busiest generator thread was nearly always busy: the figures may be its limit.
fn saturation(f: &Figures, s: &Signs) -> Option<Finding> {
    if !s.cpu_bound {
        return None;
    }
    Some(Finding {
        cause: Cause::CpuSaturation,
        message: format!(
            "CPU saturation: the busiest generator thread was {:.0} % busy (spinning excluded): the figures may show the generator's limit rather than the target's; add --threads or split the load across generators",
            100.0 * f.busiest_thread_busy
        ),
    })
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
            requests: 10_000,
            throughput_rps: rate,
            sends: 10_000,
            lag_p99_us: 40,
            wake_error_p99_us: 60,
            busiest_thread_busy: 0.2,
            service_min_us: 80,
            service_p50_us: 150,
            service_p99_us: 400,
            window_secs: 10.0,
            ..Figures::default()
        }
    }

    /// A quota of `cores`, throttled in `throttled` of `periods` for `secs` seconds.
    fn quota(cores: f64, periods: u64, throttled: u64, secs: f64) -> Option<CpuQuotaUse> {
        Some(CpuQuotaUse {
            cores,
            periods,
            throttled_periods: throttled,
            throttled_secs: secs,
        })
    }

    #[test]
    fn a_throttled_generator_is_the_quotas_not_the_clocks_nor_other_processes() {
        // Late sends, a thread kept waiting (the kernel counts a throttled thread's wait as
        // run-queue delay) and sleeps that end late: all the quota's.
        let throttled = Figures {
            late_sends: 3_000,
            most_waiting_thread: 0.6,
            wake_error_p99_us: 40_000,
            lag_p99_us: 90_000,
            queued_sends: 500,
            service_p99_us: 40_000,
            cpu_quota: quota(0.05, 100, 90, 8.5),
            ..open(5000.0)
        };
        assert_eq!(causes(&throttled), [Cause::CpuThrottled]);
        let check = judge(&throttled);
        assert!(!check.valid && check.generator_limited());
        let said = &check.findings[0].message;
        for words in [
            "0.05 cores",
            "90 of 100 periods (90 %)",
            "8.50 s over the 10.0 s window",
            "raise the pod's CPU limit",
            "--threads",
            "--idle-strategy spin or hybrid",
        ] {
            assert!(said.contains(words), "{words:?} in {said}");
        }
        assert!(!said.contains('\n'), "one line: {said}");
        // The same run without a quota: the thread that waited says contention, the queued
        // sends a slow target.
        let unlimited = Figures {
            cpu_quota: None,
            ..throttled.clone()
        };
        assert_eq!(
            causes(&unlimited),
            [Cause::CpuContention, Cause::SlowTarget]
        );
        // A closed loop is judged too: a stopped generator sends and reads late there as well.
        let closed = Figures {
            rate_rps: None,
            ..throttled.clone()
        };
        assert_eq!(causes(&closed), [Cause::CpuThrottled]);
        // What the target answered still comes first; too few connections is arithmetic, and
        // stays.
        let failing_too = Figures {
            cpu_quota: quota(0.5, 100, 50, 2.0),
            ..failing(6_000, FailureKind::Status(503), None)
        };
        assert_eq!(
            causes(&failing_too),
            [Cause::TargetErrors, Cause::CpuThrottled]
        );
        let few = Figures {
            queued_sends: 500,
            service_min_us: 80_000,
            service_p50_us: 90_000,
            cpu_quota: quota(0.5, 100, 50, 2.0),
            ..open(1000.0)
        };
        assert_eq!(
            causes(&few),
            [Cause::CpuThrottled, Cause::TooFewConnections]
        );
    }

    #[test]
    fn throttling_counts_from_one_percent_of_periods_or_of_the_window() {
        let cases = [
            ("no quota", None, vec![]),
            ("a quota never reached", quota(2.0, 100, 0, 0.0), vec![]),
            ("1 of 200 periods, 10 ms", quota(1.0, 200, 1, 0.01), vec![]),
            (
                "2 of 200 periods",
                quota(1.0, 200, 2, 0.02),
                vec![Cause::CpuThrottled],
            ),
            (
                "1 of 200 periods, but 0.1 s of the 10 s window",
                quota(1.0, 200, 1, 0.1),
                vec![Cause::CpuThrottled],
            ),
            (
                "counters that could not be read",
                quota(0.5, 0, 0, 0.0),
                vec![],
            ),
        ];
        for (name, cpu_quota, expected) in cases {
            let figures = Figures {
                cpu_quota,
                ..open(1000.0)
            };
            assert_eq!(causes(&figures), expected, "{name}");
        }
    }

    /// `n` requests failed by `kind`, with `message`.
    fn failing(n: u64, kind: FailureKind, message: Option<&str>) -> Figures {
        Figures {
            failed: n,
            top_failure: Some(Failure {
                kind,
                count: n,
                message: message.map(str::to_string),
            }),
            ..open(200.0)
        }
    }

    fn causes(f: &Figures) -> Vec<Cause> {
        judge(f).findings.iter().map(|f| f.cause).collect()
    }

    #[test]
    fn a_run_that_measured_nothing_says_that_and_only_that() {
        // Issue 33: a 1 ms run against a refused port, its one thread waiting 30.9 % of that
        // millisecond for a CPU (starting up), busy and throttled too: none of it spoiled a
        // figure, because there is none.
        let quota = CpuQuotaUse {
            cores: 1.0,
            periods: 10,
            throttled_periods: 5,
            throttled_secs: 0.5,
        };
        let refused = Figures {
            requests: 3,
            most_waiting_thread: 0.309,
            busiest_thread_busy: 0.95,
            cpu_quota: Some(quota),
            window_secs: 0.001,
            ..failing(3, FailureKind::Transport(ErrorKind::Connect), None)
        };
        assert_eq!(causes(&refused), [Cause::NothingMeasured]);
        let silent = Figures {
            requests: 0,
            failed: 0,
            top_failure: None,
            ..refused
        };
        assert_eq!(causes(&silent), [Cause::NothingMeasured]);
    }

    #[test]
    fn failures_of_the_target_come_before_the_generators_causes() {
        // Most requests failed, and a thread also waited a fifth of the run for a CPU.
        let mostly = Figures {
            most_waiting_thread: 0.2,
            busiest_thread_busy: 0.95,
            ..failing(6_000, FailureKind::Status(503), None)
        };
        assert_eq!(
            causes(&mostly),
            [
                Cause::TargetErrors,
                Cause::CpuContention,
                Cause::CpuSaturation
            ]
        );
        let check = judge(&mostly);
        assert!(!check.valid && !check.measured_nothing());
        let said = &check.findings[0].message;
        assert!(
            said.contains("6000 of 10000 requests failed") && said.contains("HTTP status 503"),
            "{said}"
        );
        // Half failed is not most.
        assert_eq!(causes(&failing(5_000, FailureKind::Status(503), None)), []);
    }

    #[test]
    fn a_run_of_failures_puts_its_late_and_queued_sends_down_to_them() {
        // Every TLS handshake failed; the failed connections' back-off made sends late and
        // queued, on a thread that waited a little for a CPU.
        let tls = Figures {
            late_sends: 3_000,
            queued_sends: 3_000,
            lag_p99_us: 90_000,
            most_waiting_thread: 0.02,
            ..failing(
                10_000,
                FailureKind::Transport(ErrorKind::Tls),
                Some("certificate signed by an unknown CA"),
            )
        };
        let check = judge(&tls);
        assert_eq!(causes(&tls), [Cause::NothingMeasured]);
        assert!(check.measured_nothing() && !check.generator_limited());
        let said = &check.findings[0].message;
        for words in [
            "nothing measured: 10000 of 10000 requests failed, every one at the TLS handshake",
            "unknown CA",
            "--cacert FILE",
            "--insecure",
        ] {
            assert!(said.contains(words), "{words:?} in {said}");
        }
        let refused = failing(300, FailureKind::Transport(ErrorKind::Connect), None);
        let refused = Figures {
            requests: 300,
            ..refused
        };
        let said = judge(&refused).findings[0].message.clone();
        assert!(
            said.starts_with(
                "nothing measured: 300 of 300 requests failed, every one at connect (refused"
            ),
            "{said}"
        );
        // Nothing finished at all.
        let silent = Figures {
            requests: 0,
            ..open(200.0)
        };
        assert_eq!(causes(&silent), [Cause::NothingMeasured]);
    }

    #[test]
    fn a_target_past_its_limit_is_named_by_its_fastest_answer_at_a_lower_load() {
        // 1,600 req/s at a target that answers in 1 ms alone but holds 64 requests in its
        // queue: after the warm-up even its fastest answer in the run waited behind others.
        let past_limit = Figures {
            connections: 64,
            throughput_rps: 1000.0,
            queued_sends: 9_000,
            service_min_us: 55_000,
            service_p50_us: 64_000,
            service_p99_us: 70_000,
            ..open(1600.0)
        };
        assert_eq!(causes(&past_limit), [Cause::TooFewConnections]);
        let known = Figures {
            service_at_lower_load_us: Some(1_000),
            ..past_limit.clone()
        };
        assert_eq!(causes(&known), [Cause::SlowTarget]);
        let said = judge(&known).findings[0].message.clone();
        assert!(
            said.contains("target at its limit")
                && said.contains("1.000 ms (its fastest at a lower rate)"),
            "{said}"
        );
        // Without a warm-up the run itself saw the target's first, unqueued answers.
        let cold = Figures {
            service_min_us: 1_000,
            ..past_limit
        };
        assert_eq!(causes(&cold), [Cause::SlowTarget]);
        // A slower answer at a lower load is no evidence.
        let slower_before = Figures {
            service_min_us: 80_000,
            service_p50_us: 90_000,
            service_at_lower_load_us: Some(85_000),
            queued_sends: 500,
            ..open(1000.0)
        };
        assert_eq!(causes(&slower_before), [Cause::TooFewConnections]);
    }

    #[test]
    fn the_failure_that_ended_the_most_requests_is_found_with_its_message() {
        let mut counts = Counts::default();
        for _ in 0..5 {
            counts.error(ErrorKind::Connect);
        }
        for _ in 0..7 {
            counts.error(ErrorKind::Tls);
        }
        for _ in 0..9 {
            counts.response(200);
        }
        let messages: BTreeMap<String, u64> = [
            ("tls: certificate expired".to_string(), 2),
            ("tls: certificate signed by an unknown CA".to_string(), 5),
            ("timeout: TCP connect not finished".to_string(), 9),
        ]
        .into();
        let top = Failure::most_frequent(&counts, &messages).unwrap();
        assert_eq!(top.kind, FailureKind::Transport(ErrorKind::Tls));
        assert_eq!(top.count, 7);
        assert_eq!(
            top.message.as_deref(),
            Some("certificate signed by an unknown CA")
        );
        for _ in 0..8 {
            counts.response(404);
        }
        let top = Failure::most_frequent(&counts, &messages).unwrap();
        assert_eq!((top.kind, top.count), (FailureKind::Status(404), 8));
        assert_eq!(top.message, None);
        let mut fine = Counts::default();
        fine.response(200);
        assert_eq!(Failure::most_frequent(&fine, &messages), None);
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
                    service_min_us: 80_000,
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
            service_min_us: 80_000,
            service_p50_us: 90_000,
            ..open(1000.0)
        });
        assert!(conns.contains("raise -c to at least 180"), "{conns}");
        let contention = said(Figures {
            most_waiting_thread: 0.3,
            ..open(1000.0)
        });
        assert!(
            contention.contains("limits.client.cpuset") && !contention.contains("client_cpus"),
            "{contention}"
        );
        for message in [clock, cpu, conns, contention] {
            assert!(!message.contains('\n'), "one line: {message}");
        }
    }
}
