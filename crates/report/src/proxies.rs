//! Each Envoy role's own account of a step, as `results show` prints it under the step and the
//! HTML report tabulates it: requests seen by response class, upstream failures, connections
//! open, memory allocated and heap, and the flag when its count and the engine's disagree
//! beyond the window's edges (`analysis::witness`). One set of words and cells for both faces.

use meshbench_analysis::witness::{witnesses, Agreement, Finding, RoleWitness, Tolerance};
use meshbench_results::{ProxyCounters, UpstreamFailures};
use meshbench_store::{StepRecord, StoredStep};

use crate::answers::Table;
use crate::thousands;

/// The words of the flag, in the terminal and the HTML alike.
pub const FLAG: &str = "DISAGREES";

/// `12,000 (2xx 11,996, 5xx 4)`: the total and every class that is not zero.
pub fn requests_cell(c: &ProxyCounters) -> String {
    let Some(r) = c.requests else {
        return "-".into();
    };
    let classes: Vec<String> = [
        ("1xx", r.status_1xx),
        ("2xx", r.status_2xx),
        ("3xx", r.status_3xx),
        ("4xx", r.status_4xx),
        ("5xx", r.status_5xx),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(class, n)| format!("{class} {}", thousands(*n)))
    .collect();
    if classes.is_empty() {
        thousands(r.total)
    } else {
        format!("{} ({})", thousands(r.total), classes.join(", "))
    }
}

/// `3 (connect_fail 2, rq_retry 1)`: the sum and each kind that is not zero, under Envoy's
/// counter names. A tunnel's TCP proxy counts every upstream connection the next hop closed
/// first as `remote_closed_active_rq` (its one "request" is the connection): an ordinary end
/// for a tunnel, so for one it is said apart and not summed.
pub fn failures_cell(f: &UpstreamFailures, tunnel: bool) -> String {
    if tunnel && f.remote_closed_active_rq > 0 {
        let rest = UpstreamFailures {
            remote_closed_active_rq: 0,
            ..*f
        };
        return format!(
            "{} + {} closed first by the next hop",
            failures_cell(&rest, false),
            thousands(f.remote_closed_active_rq)
        );
    }
    let kinds: Vec<String> = [
        ("connect_fail", f.connect_fail),
        ("rq_timeout", f.rq_timeout),
        ("rq_per_try_timeout", f.rq_per_try_timeout),
        ("remote_closed_active_rq", f.remote_closed_active_rq),
        ("rq_retry", f.rq_retry),
        ("rq_pending_overflow", f.rq_pending_overflow),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(kind, n)| format!("{kind} {}", thousands(*n)))
    .collect();
    if kinds.is_empty() {
        "0".into()
    } else {
        format!("{} ({})", thousands(f.total()), kinds.join(", "))
    }
}

/// `5.6 / 8.0`: allocated and heap, MiB.
pub fn memory_cell(c: &ProxyCounters) -> String {
    format!(
        "{:.1} / {:.1}",
        c.memory_allocated_mib(),
        c.memory_heap_size_mib()
    )
}

/// What the finding says, in a few words: `agrees (9,990..12,024)`, `DISAGREES: fewer than
/// the 9,990 answered`, `tunnel: 8 connections`...
pub fn finding_cell(f: &Finding) -> String {
    match f {
        Finding::Requests {
            tolerance,
            agreement: Agreement::Within,
            ..
        } => format!(
            "agrees ({}..{})",
            thousands(tolerance.low),
            thousands(tolerance.high)
        ),
        Finding::Requests {
            seen,
            tolerance,
            agreement,
        } => format!("{FLAG}: {}", disagreement(*seen, tolerance, *agreement)),
        Finding::Tunnel { connections } => match connections {
            Some(n) => format!("tunnel: {} connections carried", thousands(*n)),
            None => "tunnel: no TCP proxy counts".into(),
        },
        Finding::NoRequests => {
            "no request counts (its stats matcher must include admin::STATS_NEEDED)".into()
        }
        Finding::NoLoad => "no load result to compare with".into(),
        Finding::Unread { why } => format!("not read: {why}"),
    }
}

fn disagreement(seen: u64, t: &Tolerance, agreement: Agreement) -> String {
    match agreement {
        Agreement::Fewer => format!(
            "saw {}, fewer than the {} the engine had answered below 400",
            thousands(seen),
            thousands(t.low)
        ),
        _ => format!(
            "saw {}, more than the {} the edges can explain ({} measured + {} unfinished + {} warm-up + 2 x {} in flight + {} retries{})",
            thousands(seen),
            thousands(t.high),
            thousands(t.engine),
            thousands(t.unfinished),
            thousands(t.warmup),
            thousands(t.in_flight),
            thousands(t.retries),
            match t.probes {
                0 => String::new(),
                n => format!(" + {} changes' probes", thousands(n)),
            }
        ),
    }
}

/// One line per Envoy role of `step`, for under its row in the step table.
pub fn step_lines(step: &StepRecord) -> Vec<String> {
    witnesses(step).iter().map(line).collect()
}

fn line(w: &RoleWitness) -> String {
    let Some(c) = w.counters else {
        return format!("{} ({}): {}", w.role, w.program, finding_cell(&w.finding));
    };
    let tunnel = is_tunnel(w);
    let seen = if tunnel {
        String::new()
    } else {
        format!("requests {}, ", requests_cell(c))
    };
    format!(
        "{} ({}): {seen}upstream failures {}, connections open {}, memory {} MiB allocated / heap; {}",
        w.role,
        w.program,
        failures_cell(&c.upstream_failures, tunnel),
        thousands(c.connections_active),
        memory_cell(c),
        finding_cell(&w.finding)
    )
}

fn is_tunnel(w: &RoleWitness) -> bool {
    matches!(w.finding, Finding::Tunnel { .. })
}

/// Whether any role of `step` is flagged.
pub fn flagged(step: &StepRecord) -> bool {
    witnesses(step).iter().any(|w| w.finding.flagged())
}

/// Every Envoy role of every step, one row each; `None` when no step has one.
pub fn table(steps: &[StoredStep]) -> Option<Table> {
    let mut t: Table = vec![[
        "step",
        "role",
        "requests seen",
        "engine measured",
        "upstream failures",
        "connections open",
        "memory MiB allocated / heap",
        "finding",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()];
    for s in steps {
        let step = &s.step;
        for w in witnesses(step) {
            let engine = step
                .result
                .as_ref()
                .map_or("-".into(), |r| thousands(r.requests.total));
            let dash = || "-".to_string();
            t.push(vec![
                format!("{} {}", step.seq + 1, step.variant),
                format!("{} ({})", w.role, w.program),
                w.counters.map_or_else(dash, requests_cell),
                engine,
                w.counters
                    .map_or_else(dash, |c| failures_cell(&c.upstream_failures, is_tunnel(&w))),
                w.counters
                    .map_or_else(dash, |c| thousands(c.connections_active)),
                w.counters.map_or_else(dash, memory_cell),
                finding_cell(&w.finding),
            ]);
        }
    }
    (t.len() > 1).then_some(t)
}

#[cfg(test)]
mod tests {
    use meshbench_results::ProxyRequests;

    use super::*;

    #[test]
    fn cells_name_what_is_there() {
        let c = ProxyCounters {
            requests: Some(ProxyRequests {
                total: 12_000,
                status_2xx: 11_996,
                status_5xx: 4,
                ..ProxyRequests::default()
            }),
            upstream_failures: UpstreamFailures {
                connect_fail: 2,
                rq_retry: 1,
                ..UpstreamFailures::default()
            },
            connections_active: 8,
            tunnel_connections: None,
            memory_allocated_bytes: 5 << 20,
            memory_heap_size_bytes: 8 << 20,
            pods: None,
        };
        assert_eq!(requests_cell(&c), "12,000 (2xx 11,996, 5xx 4)");
        assert_eq!(
            failures_cell(&c.upstream_failures, false),
            "3 (connect_fail 2, rq_retry 1)"
        );
        assert_eq!(failures_cell(&UpstreamFailures::default(), false), "0");
        let closed = UpstreamFailures {
            remote_closed_active_rq: 5,
            ..UpstreamFailures::default()
        };
        assert_eq!(
            failures_cell(&closed, true),
            "0 + 5 closed first by the next hop"
        );
        assert_eq!(
            failures_cell(&closed, false),
            "5 (remote_closed_active_rq 5)"
        );
        assert_eq!(memory_cell(&c), "5.0 / 8.0");
        let t = Tolerance {
            low: 9_990,
            high: 12_024,
            engine: 10_000,
            warmup: 2_000,
            in_flight: 8,
            unfinished: 3,
            retries: 5,
            probes: 0,
        };
        let f = Finding::Requests {
            seen: 20_000,
            tolerance: t,
            agreement: Agreement::More,
        };
        assert_eq!(
            finding_cell(&f),
            "DISAGREES: saw 20,000, more than the 12,024 the edges can explain (10,000 measured + 3 unfinished + 2,000 warm-up + 2 x 8 in flight + 5 retries)"
        );
    }
}
