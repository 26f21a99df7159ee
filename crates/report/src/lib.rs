//! Results as people and other tools read them: the last stage of the data flow.
//!
//! - this file: the summary `meshbench run` prints, and number formatting;
//! - [`answers`]: the headline, comparison and sizing tables for the terminal;
//! - [`attribution`]: where the latency goes, hop by hop (table, stacked bars, which hop grew);
//! - [`changes`]: what a change costs the traffic (the gateways ranked, each change's line);
//! - [`control_plane`]: the `control_plane` steps' table (istiod's cost, propagation per xDS
//!   type, pushes, agreement) for `results show`;
//! - [`export`]: stored steps as Istio perf/benchmark CSV and fortio JSON;
//! - [`smp`]: stored steps as Service Mesh Performance documents (the control plane's too);
//! - [`html`] and [`plot`]: the self-contained HTML report and its SVG/PNG charts;
//! - [`proxies`]: each Envoy role's own counts and the flag, for `results show` and the HTML.
//!
//! (The JSON result is the engine's `RunResult` itself, serialised.)

pub mod answers;
pub mod attribution;
pub mod changes;
pub mod control_plane;
pub mod export;
pub mod findings;
pub mod html;
pub mod plot;
pub mod proxies;
pub mod smp;

use std::fmt::Write as _;

use meshbench_results::{run::Stats, Protocol, RunResult};

/// Formats an integer with thousands separators.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Microseconds as milliseconds with three decimals.
pub fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn stats_line(s: &Stats) -> String {
    format!(
        "p50 {}  p90 {}  p99 {}  p99.9 {}  max {} ms  (min {}, mean {} ± {})",
        ms(s.p50),
        ms(s.p90),
        ms(s.p99),
        ms(s.p99_9),
        ms(s.max),
        ms(s.min),
        ms(s.mean.round() as u64),
        ms(s.stdev.round() as u64)
    )
}

/// What the load was, in one phrase: "closed loop, 16 connections".
pub fn describe_load(r: &RunResult) -> String {
    let s = &r.settings;
    let how = match (s.rate_rps, s.arrival) {
        (Some(rate), Some(arr)) => format!("open loop at {rate} req/s ({})", arr.name()),
        _ => "closed loop".to_string(),
    };
    let proto = match (s.protocol, s.tls) {
        (Protocol::Http2, true) => format!("HTTP/2 over TLS, {} streams/conn, ", s.streams),
        (Protocol::Http2, false) => format!("h2c, {} streams/conn, ", s.streams),
        (Protocol::Grpc, true) => format!("gRPC over TLS, {} streams/conn, ", s.streams),
        (Protocol::Grpc, false) => format!("gRPC over h2c, {} streams/conn, ", s.streams),
        (Protocol::Http3, _) => format!("HTTP/3 over QUIC, {} streams/conn, ", s.streams),
        (Protocol::Http1, true) => "HTTP/1.1 over TLS, ".to_string(),
        (Protocol::Http1, false) => String::new(),
    };
    let targets = if s.targets > 1 {
        format!(
            ", {} targets on {} hosts ({})",
            s.targets,
            s.hosts,
            s.target_order.name()
        )
    } else {
        String::new()
    };
    format!(
        "{how}, {proto}{} connections, {} threads{targets}",
        s.connections, s.threads
    )
}

/// The summary printed after `meshbench run`.
pub fn summary(r: &RunResult) -> String {
    let mut o = String::new();
    write_heading(&mut o, r);
    write_requests(&mut o, r);
    write_latency(&mut o, r);
    write_statuses(&mut o, r);
    write_errors(&mut o, r);
    write_hosts(&mut o, r);
    write_connections(&mut o, r);
    write_agents(&mut o, r);
    write_bytes(&mut o, r);
    write_generator(&mut o, r);
    write_pacing(&mut o, r);
    write_findings(&mut o, r);
    o
}

/// The first line: method, URL, the load in one phrase, and whether the run is partial.
fn write_heading(o: &mut String, r: &RunResult) {
    let _ = writeln!(
        o,
        "{} {}  {}{}",
        r.settings.method,
        r.url,
        describe_load(r),
        match &r.agents {
            _ if !r.partial => String::new(),
            Some(a) if a.agents.iter().any(|p| p.lost.is_some()) => format!(
                "  [PARTIAL: {} of {} agents lost]",
                a.agents.iter().filter(|p| p.lost.is_some()).count(),
                a.agents.len()
            ),
            _ => "  [PARTIAL: interrupted]".to_string(),
        }
    );
}

/// The `requests` line: totals and throughput.
fn write_requests(o: &mut String, r: &RunResult) {
    let _ = writeln!(
        o,
        "  requests   {} total, {} ok, {} errors in {:.3} s = {:.1} req/s",
        thousands(r.requests.total),
        thousands(r.requests.ok),
        thousands(r.requests.errors),
        r.duration_secs,
        r.throughput_rps
    );
}

/// The `latency` line, and the `service` line of an open-loop run.
fn write_latency(o: &mut String, r: &RunResult) {
    // No figure is printed from zero samples: a run without one response has no latency.
    if r.latency_us.count == 0 {
        let _ = writeln!(o, "  latency    none: no response was measured");
    } else {
        let _ = writeln!(o, "  latency    {}", stats_line(&r.latency_us));
        if r.schedule_lag_us.is_some() {
            let _ = writeln!(o, "  service    {}", stats_line(&r.service_time_us));
        }
    }
}

/// The `status` line (HTTP codes) and the `grpc` line (gRPC statuses), each when it has something to say.
fn write_statuses(o: &mut String, r: &RunResult) {
    let codes: Vec<String> = r
        .status_codes
        .iter()
        .map(|(c, n)| format!("{c}: {}", thousands(*n)))
        .collect();
    if !codes.is_empty() || r.grpc_status.is_empty() {
        let _ = writeln!(
            o,
            "  status     {}",
            if codes.is_empty() {
                "no responses".to_string()
            } else {
                codes.join(", ")
            }
        );
    }
    if !r.grpc_status.is_empty() {
        let grpc: Vec<String> = r
            .grpc_status
            .iter()
            .map(|(c, n)| format!("{c}: {}", thousands(*n)))
            .collect();
        let _ = writeln!(o, "  grpc       {}", grpc.join(", "));
    }
}

/// The `errors` line by kind, then one line per distinct error message.
fn write_errors(o: &mut String, r: &RunResult) {
    let e = &r.errors;
    let kinds: Vec<String> = [
        ("connect", e.connect),
        ("timeout", e.timeout),
        ("reset", e.reset),
        ("protocol", e.protocol),
        ("other", e.other),
        ("tls", e.tls),
        ("goaway", e.goaway),
        ("stream reset", e.stream_reset),
        ("ports exhausted", e.ports_exhausted),
        ("http >= 400", e.http_status),
        ("grpc not OK", e.grpc_status),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{k} {}", thousands(*n)))
    .collect();
    let _ = writeln!(
        o,
        "  errors     {}",
        if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.join(", ")
        }
    );
    for (what, n) in &e.messages {
        let _ = writeln!(o, "             {what}: {}", thousands(*n));
    }
}

/// The `hosts` line, when requests went to more than one host.
fn write_hosts(o: &mut String, r: &RunResult) {
    if r.hosts.len() > 1 {
        let counts: Vec<u64> = r.hosts.iter().map(|h| h.requests).collect();
        let failing = r.hosts.iter().filter(|h| h.errors > 0).count();
        let _ = writeln!(
            o,
            "  hosts      {} hosts: {} to {} requests each, {} with errors",
            thousands(r.hosts.len() as u64),
            thousands(counts.iter().copied().min().unwrap_or(0)),
            thousands(counts.iter().copied().max().unwrap_or(0)),
            thousands(failing as u64)
        );
    }
}

/// The `conns` line: connections opened, connect and handshake times, migrations and closes.
fn write_connections(o: &mut String, r: &RunResult) {
    let c = &r.connections;
    let quic = r.settings.protocol == Protocol::Http3;
    if c.opened > 0 || c.quic_migrations > 0 {
        let mut line = format!(
            "  conns      {} opened ({:.1}/s)",
            thousands(c.opened),
            c.rate_per_sec
        );
        if !quic && c.connect_us.count > 0 {
            let _ = write!(
                line,
                ", connect p50 {} p99 {} ms",
                ms(c.connect_us.p50),
                ms(c.connect_us.p99)
            );
        }
        if let Some(h) = c.tls_handshake_us.as_ref().filter(|_| c.tls_handshakes > 0) {
            let (what, resumed) = if quic {
                ("QUIC handshake", "with 0-RTT accepted")
            } else {
                ("TLS handshake", "resumed")
            };
            let _ = write!(
                line,
                "; {what} p50 {} p99 {} ms, {} of {} {resumed}",
                ms(h.p50),
                ms(h.p99),
                thousands(c.tls_resumed),
                thousands(c.tls_handshakes)
            );
        }
        if c.quic_migrations > 0 {
            let _ = write!(
                line,
                "; {} moved to a new local port",
                thousands(c.quic_migrations)
            );
        }
        if c.closed_by_client + c.closed_by_server > 0 {
            let _ = write!(
                line,
                "; closed first by the server {}, by the client {}",
                thousands(c.closed_by_server),
                thousands(c.closed_by_client)
            );
        }
        let _ = writeln!(o, "{line}");
    }
}

/// The `agents` line of a distributed run, then one line per agent.
fn write_agents(o: &mut String, r: &RunResult) {
    if let Some(a) = &r.agents {
        let _ = writeln!(
            o,
            "  agents     {}: started within {:.0} µs of each other (clocks known to ±{:.0} µs)",
            a.agents.len(),
            a.start_skew_us,
            a.clock_error_us
        );
        for p in &a.agents {
            let _ = write!(
                o,
                "             {} ({}) segment {}/{}: {} requests, {} errors, p50 {} p99 {} ms, {} conn",
                p.name,
                p.address,
                p.segment,
                p.of,
                thousands(p.requests),
                thousands(p.errors),
                ms(p.p50_us),
                ms(p.p99_us),
                p.connections
            );
            match &p.lost {
                Some(l) => {
                    let _ = writeln!(o, "; LOST after {:.1} s: {}", l.after_secs, l.reason);
                }
                None => {
                    let _ = writeln!(o);
                }
            }
        }
    }
}

/// The `bytes` line: sent and received.
fn write_bytes(o: &mut String, r: &RunResult) {
    let _ = writeln!(
        o,
        "  bytes      sent {}, received {}",
        bytes(r.bytes.sent),
        bytes(r.bytes.received)
    );
}

/// The `generator` line: its own CPU, memory and whether it saturated.
fn write_generator(o: &mut String, r: &RunResult) {
    let g = &r.generator;
    let _ = writeln!(
        o,
        "  generator  {:.2} CPU-s ({:.0} % of its busiest thread), peak RSS {}, saturated: {}",
        g.cpu_secs,
        g.max_thread_utilization * 100.0,
        bytes(g.rss_max_bytes),
        if g.saturated { "YES" } else { "no" }
    );
}

/// The `pacing` lines of an open-loop run: schedule lag, and how the idle strategy slept.
fn write_pacing(o: &mut String, r: &RunResult) {
    let g = &r.generator;
    // The schedule lag (intended to actual send) is said once, by the JSON's name and in its
    // unit (µs), as the self-check's findings say it too.
    if let Some(lag) = &r.schedule_lag_us {
        let _ = writeln!(
            o,
            "  pacing     schedule lag p50 {}  p90 {}  p99 {}  p99.9 {}  max {} µs  (min {}, mean {:.0} ± {:.0})",
            thousands(lag.p50),
            thousands(lag.p90),
            thousands(lag.p99),
            thousands(lag.p99_9),
            thousands(lag.max),
            thousands(lag.min),
            lag.mean,
            lag.stdev
        );
        if let Some(idle) = r.settings.idle_strategy {
            let wake = g
                .wakeup_error_us
                .as_ref()
                .map_or("no sleep measured".to_string(), |w| {
                    format!("sleeps ended p50 {} p99 {} µs late", w.p50, w.p99)
                });
            let _ = writeln!(
                o,
                "             idle {}: {wake}, spun {:.2} CPU-s",
                idle.name(),
                g.spin_secs
            );
        }
        if let Some(p) = &g.pacing {
            let early = match p.ahead_us {
                0 => String::new(),
                us => format!(", sends up to {us} µs early"),
            };
            let slack = format!(
                "slack {} µs ({}{early}): {:.1} sends per wake-up (max {}), at most {} in 1 ms per thread; a wake-up costs {:.1} µs of CPU",
                p.slack_us,
                if p.slack_auto { "auto" } else { "given" },
                p.sends_per_wake.mean,
                p.sends_per_wake.max,
                p.largest_thread_burst_per_ms,
                p.wake_cost_us
            );
            o.push_str(&answers::wrap(&slack, "             ", "               "));
        }
    }
}

/// The self-check's findings (INVALID or NOTE) and the generator's warnings, one paragraph
/// each: its first line starts with the tag, the rest are indented under it, none wider than
/// [`answers::WIDTH`].
fn write_findings(o: &mut String, r: &RunResult) {
    let g = &r.generator;
    for f in &g.check.findings {
        let tag = if f.cause.invalidates() {
            "INVALID"
        } else {
            "NOTE"
        };
        o.push_str(&answers::wrap(&f.message, &format!("  {tag}: "), "    "));
    }
    for w in &g.warnings {
        o.push_str(&answers::wrap(w, "  WARNING: ", "    "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_table() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), want);
        }
    }

    #[test]
    fn the_summary_names_the_schedule_lag_once_in_one_unit() {
        let mut r: RunResult = meshbench_results::fixtures::run_result();
        r.settings.rate_rps = Some(1000.0);
        r.settings.idle_strategy = Some(meshbench_results::IdleStrategy::Auto);
        r.schedule_lag_us = Some(Stats {
            count: 20,
            min: 3,
            mean: 14.2,
            stdev: 6.1,
            p50: 12,
            p75: 15,
            p90: 21,
            p99: 42,
            p99_9: 57,
            p99_99: 57,
            max: 57,
        });
        let text = summary(&r);
        let lag: Vec<&str> = text.lines().filter(|l| l.contains("lag")).collect();
        assert_eq!(lag.len(), 1, "one line says the lag: {text}");
        assert!(
            lag[0].contains("schedule lag p50 12  p90 21  p99 42  p99.9 57  max 57 µs"),
            "named as the JSON names it, in µs as the self-check says it: {text}"
        );
        assert!(!lag[0].contains(" ms"), "{text}");
    }

    #[test]
    fn bytes_table() {
        for (n, want) in [(5, "5 B"), (2048, "2.0 KiB"), (3 * 1024 * 1024, "3.0 MiB")] {
            assert_eq!(bytes(n), want);
        }
    }
}
