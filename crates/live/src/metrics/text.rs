//! The Prometheus text format 0.0.4, for clients that do not ask for OpenMetrics: `curl`,
//! `promtool check metrics`, older scrapers.
//!
//! `prometheus-client` writes OpenMetrics only, and the two differ where it matters to a 0.0.4
//! parser: OpenMetrics names a counter family without `_total` (`# TYPE x counter`, sample
//! `x_total`) and adds `# UNIT` and `# EOF`, so a 0.0.4 parser sees an untyped `x_total` with
//! no help. This writer names every family exactly as its samples (the names of
//! [`names`](crate::names)), and nothing else differs: same families, same labels, same
//! classic buckets.

use std::fmt::Write;

use crate::series::{Family, Kind, Value};

/// The families in the text format 0.0.4.
pub fn encode(families: &[Family]) -> String {
    let mut out = String::with_capacity(4096);
    for f in families {
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        out.push_str("# HELP ");
        out.push_str(f.name);
        out.push(' ');
        escape_help(&mut out, f.help);
        out.push('\n');
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for m in &f.members {
            match &m.value {
                Value::Counter(v) | Value::Gauge(v) => {
                    sample(&mut out, f.name, "", &m.labels, None);
                    push_float(&mut out, *v);
                    out.push('\n');
                }
                Value::Histogram(b) => {
                    for (le, cumulative) in b.classic() {
                        sample(&mut out, f.name, "_bucket", &m.labels, Some(le));
                        let _ = writeln!(out, "{cumulative}");
                    }
                    sample(&mut out, f.name, "_sum", &m.labels, None);
                    push_float(&mut out, b.sum);
                    out.push('\n');
                    sample(&mut out, f.name, "_count", &m.labels, None);
                    let _ = writeln!(out, "{}", b.count);
                }
            }
        }
    }
    out
}

/// `name{labels} ` (the value follows).
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(&'static str, String)],
    le: Option<f64>,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            escape_label(out, v);
            out.push('"');
        }
        if let Some(le) = le {
            if !labels.is_empty() {
                out.push(',');
            }
            out.push_str("le=\"");
            push_float(out, le);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
}

/// A float as Go's `strconv.ParseFloat` reads it: `+Inf`, `-Inf`, `NaN`, or the shortest
/// decimal that reads back to the same value.
fn push_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::sample_families;
    use crate::names;

    #[test]
    fn families_are_named_as_their_samples() {
        let text = encode(&sample_families());
        assert!(text.contains(&format!("# TYPE {} counter\n", names::REQUESTS)));
        assert!(text.contains(&format!("# TYPE {} histogram\n", names::LATENCY)));
        assert!(!text.contains("# EOF"));
        assert!(!text.contains("# UNIT"));
        // Label values escaped; le last.
        assert!(
            text.contains("meshbench_latency_seconds_bucket{experiment=\"e \\\"quoted\\\"\",step=\"0\",variant=\"baseline\",le=\"+Inf\"} "),
            "{text}"
        );
    }

    #[test]
    fn floats_read_back() {
        for v in [0.0, 1.0, 0.001, 1.0905077326652577e-6, 123456.75, 1e-300] {
            let mut s = String::new();
            push_float(&mut s, v);
            assert_eq!(s.parse::<f64>().unwrap(), v, "{s}");
        }
    }
}
