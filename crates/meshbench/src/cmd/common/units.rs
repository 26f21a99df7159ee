//! Durations and shares as a person writes them, both ways: read from a flag (`10s`, `500ms`,
//! `30%`), each bad value bad input (exit 2) naming the flag; and written in a line (`42s`,
//! `3m05s`, `6.4s`).

use std::time::Duration;

use anyhow::Result;

use crate::usage;

/// Parses a duration flag: "10s", "2m", "500ms", or a bare number of seconds.
pub fn parse_duration(flag: &str, value: &str) -> Result<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err(usage(format!(
            "{flag} {value}: must not be negative; give a duration like 10s or 500ms"
        )));
    }
    humantime::parse_duration(v).map_err(|_| {
        usage(format!(
            "{flag} {value}: not a duration; give one like 10s, 2m or 500ms"
        ))
    })
}

/// A `percent` flag ("30%" or "0.3") as a fraction.
pub fn parse_percent(flag: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(usage(format!(
            "{flag} {text}: not a percentage; give one like 30% or 0.3"
        ))),
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
