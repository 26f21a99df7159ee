//! Durations and shares read from a flag as a person writes them (`10s`, `500ms`, `30%`), each
//! bad value bad input (exit 2) naming the flag. Written back in a line, they are
//! `progress.rs`'s (`human_secs`, `step_secs`).

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
