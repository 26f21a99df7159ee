//! What a change costs the traffic: the changes a step applies to its gateway while the load
//! runs ([`ChangeStream`], the experiment file's `changes` section) and what each one did to
//! the requests in flight ([`ChangeRecord`]): when it was written, when the gateway first served
//! it (a probe of its own asks), the errors by kind and the tail in the seconds after it.
//! A step with changes is paired with the same step without them ([`ChangeFigures`] marks which
//! it is), so the added tail is read against the paired step, not against a guess.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::usage::Sample;

/// What one change does to the gateway's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// A route added on the first domain (`/get/{paths + 1}`), then removed by the next change
    /// of this kind, and so on: the probe asks the route until it answers, or until it stops.
    Route,
    /// A domain added with its certificate (a new server block or filter chain): the probe
    /// asks the new name, over TLS, until it answers.
    Domain,
    /// The same configuration told to the gateway again, the way a change is told (a reload,
    /// or the same document re-sent): what the telling alone costs.
    Reload,
    /// The certificate of the first domain (or the shared one) issued again and told to the
    /// gateway (new files and a reload; a Secret's data changed for a control plane): the
    /// probe asks the domain on new connections until the gateway presents the new one.
    Certificate,
    /// The backend's replicas restarted in turn, the gateway learning its endpoints its own
    /// way (on a cluster: its Deployment's rolling update, istiod or Contour following the
    /// endpoints): served when every replica is new and ready.
    Backend,
    /// A ServiceEntry of the mesh changed (its host the next name, on the Service's port),
    /// istiod pushing every sidecar: served when the client's sidecar holds the new host's
    /// cluster. Istio's sidecars' steps only.
    #[serde(rename = "service_entry")]
    ServiceEntry,
}

impl ChangeKind {
    pub const ALL: [ChangeKind; 6] = [
        ChangeKind::Route,
        ChangeKind::Domain,
        ChangeKind::Reload,
        ChangeKind::Certificate,
        ChangeKind::Backend,
        ChangeKind::ServiceEntry,
    ];

    /// Its word in the experiment file and in results.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Route => "route",
            ChangeKind::Domain => "domain",
            ChangeKind::Reload => "reload",
            ChangeKind::Certificate => "certificate",
            ChangeKind::Backend => "backend",
            ChangeKind::ServiceEntry => "service_entry",
        }
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How haproxy's gateway is reloaded, as its users do it: both are in haproxy's management
/// guide. Only haproxy has two ways, so only haproxy's variants are named by it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum HaproxyReload {
    /// Master-worker (`-W`): `SIGUSR2` to the master, which starts new workers on the listening
    /// sockets it keeps while the old ones finish.
    #[default]
    Seamless,
    /// A new haproxy started with `-sf OLD_PID`: it binds beside the old one, then tells it to
    /// stop listening and finish; connections waiting in the old one's accept queue are lost.
    Plain,
}

impl HaproxyReload {
    /// Its word in the experiment file.
    pub fn name(self) -> &'static str {
        match self {
            HaproxyReload::Seamless => "seamless",
            HaproxyReload::Plain => "plain",
        }
    }

    /// Its part of a variant's name (`gateway haproxy plain-reload changes`).
    pub fn variant(self) -> String {
        format!("{}-reload", self.name())
    }
}

/// One kind of change applied during a step's measured window: every `every`, or at the given
/// instants (after the window opens), never after it closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeStream {
    pub kind: ChangeKind,
    /// Apply one every this long, the first one interval after the window opens.
    pub every: Option<Duration>,
    /// Apply one at each of these instants after the window opens.
    pub at: Vec<Duration>,
}

impl ChangeStream {
    /// The instants of its changes within a window of `window`, in order.
    pub fn instants(&self, window: Duration) -> Vec<Duration> {
        let mut out: Vec<Duration> = self.at.iter().copied().filter(|t| *t < window).collect();
        if let Some(every) = self.every.filter(|e| !e.is_zero()) {
            let mut t = every;
            while t < window {
                out.push(t);
                t += every;
            }
        }
        out.sort();
        out
    }
}

/// The shortest interval between two changes of a step, all streams together: a change is
/// told, probed until served and read over its own second before the next one comes. Faster
/// than this, one change's cost would be read as the next one's.
pub const MIN_APART: Duration = Duration::from_millis(500);

/// Every change of a step, in the order they are applied: (instant after the window opens,
/// kind). A change due less than [`MIN_APART`] after the one before it (two streams meeting:
/// a route every 2 s and a domain every 10 s) is moved that far after it, the file's order
/// kept; one moved past the window is not applied.
pub fn schedule(streams: &[ChangeStream], window: Duration) -> Vec<(Duration, ChangeKind)> {
    let mut all: Vec<(Duration, ChangeKind)> = streams
        .iter()
        .flat_map(|s| s.instants(window).into_iter().map(|t| (t, s.kind)))
        .collect();
    all.sort_by_key(|(t, _)| *t);
    let mut out: Vec<(Duration, ChangeKind)> = Vec::with_capacity(all.len());
    for (t, kind) in all {
        let t = match out.last() {
            Some((last, _)) => t.max(*last + MIN_APART),
            None => t,
        };
        if t < window {
            out.push((t, kind));
        }
    }
    out
}

/// Errors by kind as the change's seconds counted them: the result's own error kinds (`reset`,
/// `connect`, `tls`, ...) and `http_<code>` for each failing status (a 503 is `http_503`).
pub type ErrorsByKind = BTreeMap<String, u64>;

/// What one change did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeRecord {
    pub kind: ChangeKind,
    /// What was changed, in words (`route /get/4 added on workspace-1-domain-1.com`).
    pub what: String,
    /// When it was written, ms after the measured window opened.
    pub written_ms: f64,
    /// How long the gateway's own way of being told took (the reload command, the API call).
    pub told_ms: f64,
    /// From written to the first answer of the changed configuration the probe saw, or to
    /// the end of a backend's roll (`None`: not within [`SERVED_WITHIN`], or the change could
    /// not be told or probed).
    pub served_ms: Option<f64>,
    /// Why the change could not be told or probed, when it could not (the run goes on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The whole seconds of the window this change is read over: from the one it was written
    /// in to the one before the next change's (at most [`SECONDS_AFTER`]; a backend's roll, to
    /// the window's end: what the gateway makes of it can outlast the roll).
    pub seconds: (u32, u32),
    /// Requests finished over those seconds.
    pub requests: u64,
    /// Failed requests over those seconds, by kind.
    pub errors: ErrorsByKind,
    /// Latency over those seconds, µs.
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// Connections the load opened over those seconds: each one the gateway closed (a reload
    /// ending its kept-alive connections) or refused, opened again.
    #[serde(default)]
    pub connections_opened: u64,
    /// Connections that failed with requests on them over those seconds: the errors over
    /// these are how many requests each carried when it failed (one on HTTP/1.1, the streams
    /// in flight on HTTP/2 or gRPC).
    #[serde(default)]
    pub connections_failed: u64,
    /// Requests the probe sent through the gateway for this change (each gateway's own count
    /// has them; the load's does not).
    #[serde(default)]
    pub probes: u64,
    /// The gateway's busiest CPU (millicores, between two of its samples) and its largest
    /// memory (working set, else resident; MiB) over those seconds, when it was sampled; for a
    /// ServiceEntry, the client's sidecar's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_cpu_peak_millicores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_memory_peak_mib: Option<f64>,
}

impl ChangeRecord {
    /// Its failed requests, all kinds.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Reads the gateway's peaks over its seconds (of a window opened at `window_start_ms`)
    /// from the gateway's `samples`: the CPU between each two samples inside them or
    /// straddling their edges, the memory of each sample inside them.
    pub fn read_gateway_peaks(&mut self, samples: &[Sample], window_start_ms: u64) {
        let from = window_start_ms + u64::from(self.seconds.0) * 1000;
        let to = window_start_ms + (u64::from(self.seconds.1) + 1) * 1000;
        let cpu = (samples.windows(2))
            .filter(|w| w[1].t_ms > from && w[0].t_ms < to && w[1].t_ms > w[0].t_ms)
            .map(|w| {
                let ns = w[1].cpu_ns.saturating_sub(w[0].cpu_ns) as f64;
                ns / ((w[1].t_ms - w[0].t_ms) as f64 * 1e6) * 1000.0
            })
            .fold(None, |peak: Option<f64>, c| {
                Some(peak.map_or(c, |p| p.max(c)))
            });
        let memory = (samples.iter())
            .filter(|s| (from..=to).contains(&s.t_ms))
            .map(|s| s.working_set_bytes.unwrap_or(s.rss_bytes) as f64 / (1024.0 * 1024.0))
            .filter(|&m| m > 0.0)
            .fold(None, |peak: Option<f64>, m| {
                Some(peak.map_or(m, |p| p.max(m)))
            });
        self.gateway_cpu_peak_millicores = cpu;
        self.gateway_memory_peak_mib = memory;
    }
}

impl ChangeFigures {
    /// Each change's gateway peaks from the gateway's samples (see
    /// [`ChangeRecord::read_gateway_peaks`]).
    pub fn read_gateway_peaks(&mut self, samples: &[Sample], window_start_ms: u64) {
        for c in &mut self.changes {
            c.read_gateway_peaks(samples, window_start_ms);
        }
    }
}

/// What a variant with changes adds to its name (`gateway nginx changes`).
pub const CHANGED: &str = "changes";

/// The variant a step with changes is paired with: its name without [`CHANGED`].
pub fn still_variant(changed: &str) -> Option<&str> {
    changed.strip_suffix(CHANGED)?.strip_suffix(' ')
}

/// How long a probe asks before the change counts as never served.
pub const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// Most whole seconds a change is read over (its own and the next ones).
pub const SECONDS_AFTER: u32 = 2;

/// What a step of the paired changes experiment measured of its changes. The step without
/// changes carries one with no changes, so that the two are told apart in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeFigures {
    /// How the gateway was told (`nginx -s reload`, `caddy admin API POST /load`, ...).
    pub told_by: String,
    /// Every change applied, in order (empty for the paired step without changes).
    pub changes: Vec<ChangeRecord>,
}

impl ChangeFigures {
    /// Whether this step applied changes (the other of the pair applied none).
    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Requests the probes sent through the gateway, every change together.
    pub fn probes(&self) -> u64 {
        self.changes.iter().map(|c| c.probes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changes_gateway_peaks_are_read_over_its_own_seconds_only() {
        // Samples every 250 ms from the window's start (10,000 ms): 100 millicores, but
        // 400 between 2,250 and 2,500 ms; 10 MiB, 30 at 2,500 ms and 50 at 5,000 ms (outside).
        let samples: Vec<Sample> = (0..=24)
            .map(|i| {
                let t = i * 250;
                let busy = if t > 2_250 { 75_000_000 } else { 0 };
                Sample {
                    t_ms: 10_000 + t,
                    cpu_ns: t * 100_000 + busy,
                    rss_bytes: 0,
                    working_set_bytes: Some(
                        match t {
                            2_500 => 30,
                            5_000 => 50,
                            _ => 10,
                        } << 20,
                    ),
                    rx_bytes: 0,
                    tx_bytes: 0,
                    connections: 0,
                }
            })
            .collect();
        let mut c = ChangeRecord {
            kind: ChangeKind::Route,
            what: "route".into(),
            written_ms: 2_000.0,
            told_ms: 1.0,
            served_ms: Some(50.0),
            failed: None,
            seconds: (2, 3),
            requests: 0,
            errors: ErrorsByKind::new(),
            p99_us: 0,
            p999_us: 0,
            max_us: 0,
            connections_opened: 0,
            connections_failed: 0,
            probes: 0,
            gateway_cpu_peak_millicores: None,
            gateway_memory_peak_mib: None,
        };
        c.read_gateway_peaks(&samples, 10_000);
        assert_eq!(c.gateway_cpu_peak_millicores.map(f64::round), Some(400.0));
        assert_eq!(c.gateway_memory_peak_mib, Some(30.0));
        c.read_gateway_peaks(&[], 10_000);
        assert_eq!(c.gateway_cpu_peak_millicores, None);
    }

    #[test]
    fn a_schedule_interleaves_streams_in_time_within_the_window() {
        let s = |kind, every: Option<u64>, at: &[u64]| ChangeStream {
            kind,
            every: every.map(Duration::from_secs),
            at: at.iter().map(|t| Duration::from_secs(*t)).collect(),
        };
        let streams = [
            s(ChangeKind::Route, Some(2), &[]),
            s(ChangeKind::Domain, None, &[3, 4, 20]),
        ];
        let got: Vec<(u64, ChangeKind)> = schedule(&streams, Duration::from_secs(7))
            .into_iter()
            .map(|(t, k)| (t.as_millis() as u64, k))
            .collect();
        // The route and the domain due at 4 s: the domain half a second later.
        assert_eq!(
            got,
            vec![
                (2000, ChangeKind::Route),
                (3000, ChangeKind::Domain),
                (4000, ChangeKind::Route),
                (4500, ChangeKind::Domain),
                (6000, ChangeKind::Route)
            ]
        );
    }
}
