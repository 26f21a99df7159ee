//! What the backend is told to do, globally (flags) and per request (query parameters and
//! `x-meshbench-*` headers, as fortio's `?size=` and Nighthawk's test-server header do).

use std::str::FromStr;
use std::time::Duration;

use meshbench_net::rng::SplitMix64;
use thiserror::Error;

/// A value the backend could not understand.
#[derive(Debug, Error, PartialEq)]
pub enum OptionError {
    #[error("delay '{0}' is not a duration (5ms), uniform:MIN..MAX or exp:MEAN")]
    Delay(String),
    #[error("status '{0}' is not CODE:PERCENT[,CODE:PERCENT...] like 503:1%")]
    Status(String),
    #[error("status injection adds up to {0} %, more than 100 %")]
    StatusOver100(f64),
}

/// How long to wait before answering.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Delay {
    #[default]
    None,
    Fixed(Duration),
    /// Uniformly distributed between the two bounds.
    Uniform(Duration, Duration),
    /// Exponentially distributed with this mean.
    Exponential(Duration),
}

impl Delay {
    /// One delay drawn from the distribution, in nanoseconds.
    pub fn sample_ns(&self, rng: &mut SplitMix64) -> u64 {
        match *self {
            Delay::None => 0,
            Delay::Fixed(d) => d.as_nanos() as u64,
            Delay::Uniform(a, b) => {
                let (a, b) = (a.as_nanos() as f64, b.as_nanos() as f64);
                (a + (b - a) * rng.next_f64()) as u64
            }
            Delay::Exponential(mean) => {
                (-(1.0 - rng.next_f64()).ln() * mean.as_nanos() as f64) as u64
            }
        }
    }
}

fn duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<u64>() {
        return Some(Duration::from_millis(ms));
    }
    humantime::parse_duration(s).ok()
}

impl FromStr for Delay {
    type Err = OptionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || OptionError::Delay(s.to_string());
        if let Some(range) = s.strip_prefix("uniform:") {
            let (a, b) = range.split_once("..").ok_or_else(bad)?;
            let (a, b) = (duration(a).ok_or_else(bad)?, duration(b).ok_or_else(bad)?);
            if a > b {
                return Err(bad());
            }
            Ok(Delay::Uniform(a, b))
        } else if let Some(mean) = s.strip_prefix("exp:") {
            Ok(Delay::Exponential(duration(mean).ok_or_else(bad)?))
        } else {
            let d = duration(s).ok_or_else(bad)?;
            Ok(if d.is_zero() {
                Delay::None
            } else {
                Delay::Fixed(d)
            })
        }
    }
}

/// How a thread waits out a response's delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DelayMode {
    /// Sleep in epoll until the response is due: no CPU, but the response is late by however
    /// late the kernel wakes the thread (tens of microseconds, milliseconds on a busy machine),
    /// so the delay measured is the one asked for plus the timer's lateness.
    #[default]
    Sleep,
    /// Sleep until [`SPIN_WINDOW`] before the response is due, then poll the sockets without
    /// blocking until it is: the delay is the one asked for to within a few microseconds as long
    /// as the thread keeps its core, for up to the window of CPU per delayed response. For
    /// measurements whose truth is the delay (a known shift between two servers).
    Spin,
}

/// How long before a due response a [`DelayMode::Spin`] thread stops sleeping: above a timer's
/// usual lateness here (50 us of timer slack plus the wake-up, 60-100 us measured on an idle
/// virtual machine).
pub const SPIN_WINDOW: Duration = Duration::from_micros(300);

/// Statuses to inject instead of 200, each with a probability.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusMix(pub Vec<(u16, f64)>);

impl StatusMix {
    /// Draws the status of one response.
    pub fn pick(&self, rng: &mut SplitMix64) -> u16 {
        if self.0.is_empty() {
            return 200;
        }
        let mut x = rng.next_f64();
        for &(code, p) in &self.0 {
            if x < p {
                return code;
            }
            x -= p;
        }
        200
    }
}

impl FromStr for StatusMix {
    type Err = OptionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut mix = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let bad = || OptionError::Status(s.to_string());
            let (code, pct) = part.trim().split_once(':').ok_or_else(bad)?;
            let code: u16 = code.parse().map_err(|_| bad())?;
            let pct: f64 = pct.trim_end_matches('%').parse().map_err(|_| bad())?;
            if !(100..=599).contains(&code) || !(0.0..=100.0).contains(&pct) {
                return Err(bad());
            }
            mix.push((code, pct / 100.0));
        }
        let total: f64 = mix.iter().map(|(_, p)| p * 100.0).sum();
        if total > 100.0 + 1e-9 {
            return Err(OptionError::StatusOver100(total));
        }
        Ok(StatusMix(mix))
    }
}

/// The backend's flags.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// Response body size in bytes unless a request asks for another.
    pub size: usize,
    pub delay: Delay,
    /// How delays (the flag's and per-request ones) are waited out (`--delay-mode`).
    pub delay_mode: DelayMode,
    /// CPU spent on each request before answering, holding its thread: a service whose
    /// capacity is known, `threads / work` requests per second (`--work`).
    pub work: std::time::Duration,
    pub status: StatusMix,
    /// Event-loop threads, each with its own `SO_REUSEPORT` listener.
    pub threads: usize,
    pub seed: u64,
    /// Record the kernel's receive time of every request (`--arrivals`; plain HTTP/1.1 only):
    /// off, nothing is stamped and the read path is the plain `recv`.
    pub record_arrivals: bool,
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            size: 1024,
            delay: Delay::None,
            delay_mode: DelayMode::Sleep,
            work: std::time::Duration::ZERO,
            status: StatusMix::default(),
            threads: 1,
            seed: 1,
            record_arrivals: false,
        }
    }
}

/// Spins on the CPU for `work`: the cost of a request that does real work.
pub fn burn(work: std::time::Duration) {
    if work.is_zero() {
        return;
    }
    let start = std::time::Instant::now();
    while start.elapsed() < work {
        std::hint::spin_loop();
    }
}

/// Largest body a request may ask for (1 GiB).
pub const MAX_SIZE: u64 = 1 << 30;

/// What one request asked for, by query parameter or header.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestOptions {
    pub size: Option<u64>,
    pub delay: Option<Delay>,
    pub status: Option<u16>,
    pub echo: bool,
}

impl RequestOptions {
    /// Applies one `name=value` (query) or `x-meshbench-name: value` (header) setting; names
    /// match in any case. Values that do not parse are ignored, as a test server should keep
    /// answering.
    pub fn set(&mut self, name: &[u8], value: &[u8]) {
        let v = std::str::from_utf8(value).unwrap_or("").trim();
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        if is(b"size") {
            self.size = v.parse::<u64>().ok().map(|n| n.min(MAX_SIZE));
        } else if is(b"delay") {
            self.delay = v.parse().ok();
        } else if is(b"status") {
            self.status = v.parse::<u16>().ok().filter(|c| (100..=599).contains(c));
        } else if is(b"echo") {
            self.echo = !matches!(v, "0" | "false");
        }
    }

    /// Reads the query string of a request target.
    pub fn from_target(&mut self, target: &[u8]) {
        let Some(q) = target.iter().position(|&b| b == b'?') else {
            return;
        };
        for pair in target[q + 1..].split(|&b| b == b'&') {
            let mut kv = pair.splitn(2, |&b| b == b'=');
            let k = kv.next().unwrap_or(b"");
            self.set(k, kv.next().unwrap_or(b"1"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_table() {
        let ms = Duration::from_millis;
        let cases: &[(&str, Result<Delay, ()>)] = &[
            ("5ms", Ok(Delay::Fixed(ms(5)))),
            ("7", Ok(Delay::Fixed(ms(7)))),
            ("0", Ok(Delay::None)),
            ("uniform:1ms..3ms", Ok(Delay::Uniform(ms(1), ms(3)))),
            ("exp:2ms", Ok(Delay::Exponential(ms(2)))),
            ("uniform:3ms..1ms", Err(())),
            ("soon", Err(())),
        ];
        for (input, want) in cases {
            assert_eq!(input.parse::<Delay>().map_err(|_| ()), *want, "{input}");
        }
    }

    #[test]
    fn status_table() {
        type Case = (&'static str, Result<Vec<(u16, f64)>, ()>);
        let cases: &[Case] = &[
            ("503:1%", Ok(vec![(503, 0.01)])),
            ("503:1%,500:50", Ok(vec![(503, 0.01), (500, 0.5)])),
            ("503:60%,500:50%", Err(())),
            ("99:1%", Err(())),
            ("503", Err(())),
        ];
        for (input, want) in cases {
            assert_eq!(
                input.parse::<StatusMix>().map(|m| m.0).map_err(|_| ()),
                *want,
                "{input}"
            );
        }
    }

    #[test]
    fn injected_statuses_follow_their_share() {
        let mix: StatusMix = "503:10%".parse().unwrap();
        let mut rng = SplitMix64(3);
        let n = 100_000;
        let hits = (0..n).filter(|_| mix.pick(&mut rng) == 503).count();
        assert!((hits as f64 / n as f64 - 0.10).abs() < 0.005, "{hits}");
    }

    #[test]
    fn request_options_from_query() {
        let mut o = RequestOptions::default();
        o.from_target(b"/x?size=10&delay=5ms&status=503&echo");
        assert_eq!(o.size, Some(10));
        assert_eq!(o.delay, Some(Delay::Fixed(Duration::from_millis(5))));
        assert_eq!(o.status, Some(503));
        assert!(o.echo);
        let mut plain = RequestOptions::default();
        plain.from_target(b"/index.html");
        assert!(plain == RequestOptions::default());
    }
}
