//! Thresholds and SLOs: `p99<10ms`, `errors<0.1%`, `proxy_cpu_per_1k_rps<0.6`. A CI pipeline
//! passes `--threshold` to `run`, `experiment` or `compare` and gets exit code 1 and one line
//! per threshold when any fails; `capacity --slo` reads the same grammar, comma-separated.

use std::fmt;

use thiserror::Error;

/// What a threshold is about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// A latency percentile (0.5, 0.99, ...), in milliseconds.
    Latency(f64),
    /// The largest latency, in milliseconds.
    Max,
    /// The mean latency, in milliseconds.
    Mean,
    /// Failed requests over all requests, a fraction (written in percent).
    Errors,
    /// Throughput, requests per second.
    Rps,
    /// vCPU per 1000 RPS of the proxies on the path, summed.
    ProxyCpuPer1kRps,
    /// Millicores of the proxies on the path, summed.
    ProxyCpuMillicores,
    /// Memory of the proxies on the path, summed, MiB.
    ProxyMemMib,
    /// The largest share of its CPU limit any proxy on the path used, a fraction (written in
    /// percent): saturation as the gateway studies read it (`capacity --cpu-under 90`).
    ProxyCpuShare,
    /// Latency added over the baseline at a percentile, ms (experiments).
    Added(f64),
    /// B minus A at a percentile, ms (compare).
    Delta(f64),
}

impl Metric {
    /// Whether values are latencies in milliseconds (and so take time units).
    fn is_time(self) -> bool {
        matches!(
            self,
            Metric::Latency(_) | Metric::Max | Metric::Mean | Metric::Added(_) | Metric::Delta(_)
        )
    }

    /// A value of this metric as written in messages.
    pub fn show(self, v: f64) -> String {
        match self {
            Metric::Errors => format!("{:.3} %", v * 100.0),
            Metric::Rps => format!("{v:.1} req/s"),
            Metric::ProxyCpuPer1kRps => format!("{v:.3} vCPU per 1000 RPS"),
            Metric::ProxyCpuMillicores => format!("{v:.0} millicores"),
            Metric::ProxyMemMib => format!("{v:.1} MiB"),
            Metric::ProxyCpuShare => format!("{:.1} % of its CPU limit", v * 100.0),
            // A difference, signed as the tables print it.
            Metric::Added(_) | Metric::Delta(_) => format!("{v:+.3} ms"),
            _ => format!("{v:.3} ms"),
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
        }
    }

    /// Whether larger values are worse (an upper bound).
    fn upper(self) -> bool {
        matches!(self, Op::Lt | Op::Le)
    }
}

/// One threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub metric: Metric,
    pub op: Op,
    /// In the metric's unit: ms, a fraction, req/s, vCPU, millicores, MiB.
    pub value: f64,
    /// As written.
    pub text: String,
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ThresholdError {
    #[error("threshold '{0}': expected METRIC<VALUE, METRIC<=VALUE, METRIC>VALUE or METRIC>=VALUE, like p99<10ms")]
    Shape(String),
    #[error("threshold '{0}': unknown metric '{1}'; use p50, p90, p99, p99.9, max, mean, errors, rps, proxy_cpu_per_1k_rps, proxy_cpu_mc, proxy_mem_mib, proxy_cpu_share, added_p99 or delta_p99")]
    Metric(String, String),
    #[error("threshold '{0}': '{1}' is not a value; give a number with a unit like 10ms, 250us, 0.1% or 0.6")]
    Value(String, String),
}

fn percentile(s: &str) -> Option<f64> {
    let p: f64 = s.strip_prefix('p')?.parse().ok()?;
    (p > 0.0 && p < 100.0).then_some((p * 1e4).round() / 1e6)
}

fn metric(name: &str) -> Option<Metric> {
    Some(match name {
        "max" => Metric::Max,
        "mean" => Metric::Mean,
        "errors" | "error_rate" => Metric::Errors,
        "rps" | "throughput" => Metric::Rps,
        "proxy_cpu_per_1k_rps" => Metric::ProxyCpuPer1kRps,
        "proxy_cpu_mc" => Metric::ProxyCpuMillicores,
        "proxy_mem_mib" => Metric::ProxyMemMib,
        "proxy_cpu_share" => Metric::ProxyCpuShare,
        _ => {
            if let Some(p) = name.strip_prefix("added_") {
                Metric::Added(percentile(p)?)
            } else if let Some(p) = name.strip_prefix("delta_") {
                Metric::Delta(percentile(p)?)
            } else {
                Metric::Latency(percentile(name)?)
            }
        }
    })
}

impl std::str::FromStr for Threshold {
    type Err = ThresholdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let t = text.trim();
        let at = t
            .find(['<', '>'])
            .ok_or_else(|| ThresholdError::Shape(t.into()))?;
        let (name, rest) = t.split_at(at);
        let (op, value) = match rest.as_bytes() {
            [b'<', b'=', ..] => (Op::Le, &rest[2..]),
            [b'>', b'=', ..] => (Op::Ge, &rest[2..]),
            [b'<', ..] => (Op::Lt, &rest[1..]),
            _ => (Op::Gt, &rest[1..]),
        };
        let name = name.trim();
        let value = value.trim();
        if name.is_empty() || value.is_empty() {
            return Err(ThresholdError::Shape(t.into()));
        }
        let metric = metric(name).ok_or_else(|| ThresholdError::Metric(t.into(), name.into()))?;
        let bad = || ThresholdError::Value(t.into(), value.into());
        let split = value
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
            .unwrap_or(value.len());
        let (number, unit) = value.split_at(split);
        let n: f64 = number.parse().map_err(|_| bad())?;
        if !n.is_finite() {
            return Err(bad());
        }
        let scale = match (metric, unit.trim()) {
            (m, "" | "ms") if m.is_time() => 1.0,
            (m, "us" | "µs") if m.is_time() => 1e-3,
            (m, "s") if m.is_time() => 1e3,
            // Errors and shares are written in percent, with or without the sign.
            (Metric::Errors | Metric::ProxyCpuShare, "" | "%") => 0.01,
            (Metric::Rps, "" | "rps" | "req/s") => 1.0,
            (Metric::ProxyCpuPer1kRps, "") => 1.0,
            (Metric::ProxyCpuMillicores, "" | "m" | "mc") => 1.0,
            (Metric::ProxyMemMib, "" | "MiB" | "Mi") => 1.0,
            _ => return Err(bad()),
        };
        Ok(Threshold {
            metric,
            op,
            value: n * scale,
            text: t.to_string(),
        })
    }
}

/// Parses a comma-separated list (`--slo 'p99<10ms,errors<0.1%'`).
pub fn parse_list(text: &str) -> Result<Vec<Threshold>, ThresholdError> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(str::parse)
        .collect()
}

/// A threshold checked against what was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub threshold: Threshold,
    pub passed: bool,
    /// The worst value and where it was measured; `None` when nothing measured this metric.
    pub worst: Option<(String, f64)>,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed { "PASS" } else { "FAIL" };
        match &self.worst {
            Some((at, v)) if at.is_empty() => write!(
                f,
                "{verdict} {}: {}",
                self.threshold,
                self.threshold.metric.show(*v)
            ),
            Some((at, v)) => write!(
                f,
                "{verdict} {}: worst {} ({at})",
                self.threshold,
                self.threshold.metric.show(*v)
            ),
            None => write!(f, "{verdict} {}: not measured here", self.threshold),
        }
    }
}

/// Checks `t` against every observation (a place and a value): it passes when all of them
/// hold, and fails when one does not or when there is none.
pub fn check(t: &Threshold, observations: Vec<(String, f64)>) -> Outcome {
    let worst = observations.into_iter().reduce(|a, b| {
        let b_worse = if t.op.upper() { b.1 > a.1 } else { b.1 < a.1 };
        if b_worse {
            b
        } else {
            a
        }
    });
    Outcome {
        passed: worst.as_ref().is_some_and(|(_, v)| t.op.holds(*v, t.value)),
        threshold: t.clone(),
        worst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_read_with_their_units() {
        let t: Threshold = "p99<10ms".parse().unwrap();
        assert_eq!(
            (t.metric, t.op, t.value),
            (Metric::Latency(0.99), Op::Lt, 10.0)
        );
        let t: Threshold = "p99.9 <= 250us".parse().unwrap();
        assert_eq!((t.metric, t.op), (Metric::Latency(0.999), Op::Le));
        assert!((t.value - 0.25).abs() < 1e-12);
        let t: Threshold = "errors<0.1%".parse().unwrap();
        assert!((t.value - 0.001).abs() < 1e-12);
        let t: Threshold = "proxy_cpu_per_1k_rps<0.6".parse().unwrap();
        assert_eq!((t.metric, t.value), (Metric::ProxyCpuPer1kRps, 0.6));
        let t: Threshold = "rps>=900".parse().unwrap();
        assert_eq!((t.metric, t.op, t.value), (Metric::Rps, Op::Ge, 900.0));
        assert_eq!("added_p90<1s".parse::<Threshold>().unwrap().value, 1000.0);
        assert_eq!(
            "delta_p99<2".parse::<Threshold>().unwrap().metric,
            Metric::Delta(0.99)
        );
        let list = parse_list("p99<10ms, errors<0.1%").unwrap();
        assert_eq!(list.len(), 2);
        let t: Threshold = "proxy_cpu_share<90%".parse().unwrap();
        assert_eq!((t.metric, t.op), (Metric::ProxyCpuShare, Op::Lt));
        assert!((t.value - 0.9).abs() < 1e-12);
        assert_eq!(t.metric.show(0.877), "87.7 % of its CPU limit");
    }

    #[test]
    fn bad_thresholds_say_what_is_wrong() {
        for (text, want) in [
            ("p99", "expected METRIC<VALUE"),
            ("latency<3ms", "unknown metric 'latency'"),
            ("p99<fast", "'fast' is not a value"),
            ("errors<3ms", "'3ms' is not a value"),
            ("p100<1ms", "unknown metric"),
            ("<1ms", "expected METRIC<VALUE"),
        ] {
            let err = text.parse::<Threshold>().unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn the_worst_observation_decides() {
        let t: Threshold = "p99<10ms".parse().unwrap();
        let o = check(
            &t,
            vec![("a".into(), 4.0), ("b".into(), 12.5), ("c".into(), 9.0)],
        );
        assert!(!o.passed);
        assert_eq!(o.worst, Some(("b".into(), 12.5)));
        assert_eq!(o.to_string(), "FAIL p99<10ms: worst 12.500 ms (b)");
        let t: Threshold = "rps>100".parse().unwrap();
        let o = check(&t, vec![("a".into(), 150.0), ("b".into(), 120.0)]);
        assert!(o.passed);
        assert_eq!(o.worst, Some(("b".into(), 120.0)));
        let o = check(&t, vec![]);
        assert!(!o.passed);
        assert_eq!(o.to_string(), "FAIL rps>100: not measured here");
    }
}
