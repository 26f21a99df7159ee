//! What a role of the system under test used over a step: one [`Sample`] per reading, the
//! [`Usage`] over the step's steady window, and the [`RoleUsage`] a store keeps per role (with
//! what was not measured, and an Envoy role's own counts, [`ProxyCounters`]). The lab's sampler
//! and the runner's external reader fill them; the store, the answers and the reports read
//! them.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::proxy::ProxyCounters;
use crate::role::{PlayedBy, Program, Role};

/// The clock of [`Sample::t_ms`]: wall-clock time, milliseconds since the Unix epoch (0 for a
/// clock set before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One reading of one role.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub t_ms: u64,
    pub cpu_ns: u64,
    pub rss_bytes: u64,
    pub working_set_bytes: Option<u64>,
    /// Bytes received and sent, cumulative.
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub connections: u64,
}

/// One role of a step and its use over the step's steady window: what the store keeps and
/// every answer reads. The figures are flattened, so the stored and exported JSON has one
/// object per role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleUsage {
    pub role: Role,
    /// nginx, haproxy, caddy, envoy, command, istio, backend; `meshbench` for the sampler
    /// itself; an external role's preset (`istio-sidecar`, `process`...) or `promql`.
    pub program: PlayedBy,
    pub workers: u32,
    /// Cores, when limited.
    pub cpu_limit: Option<f64>,
    #[serde(flatten)]
    pub usage: Usage,
    /// Figures that were not measured, each with why: an external role's query that failed,
    /// returned nothing or saw its series restart, or a figure its source does not have. Their
    /// numbers in `usage` are zeros (or null) and mean nothing; readers go through
    /// [`RoleUsage::cpu_millicores`], [`RoleUsage::memory_mib`] and the like. For a role
    /// sampled here, empty (and not written) unless its window held fewer than two samples
    /// (CPU and bytes are differences of two), so stores written before it read back unchanged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub missing: BTreeMap<Figure, String>,
    /// An Envoy role's own counts over the step, read from its admin endpoint before the load
    /// and after it: counters as differences, gauges (connections, memory) at the end. Absent
    /// (and not written) for every other role and for stores written before it; when the
    /// admin could not be read, absent with why in `missing` under [`Figure::Proxy`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyCounters>,
}

/// A figure of a role's use, as `missing` names it (the external role keys of the same names
/// give its query).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// `cpu_millicores_avg`, `cpu_millicores_max`.
    Cpu,
    /// The working set: `working_set_mib_avg`, `working_set_mib_max`.
    Memory,
    /// `rss_mib_avg`, `rss_mib_max`.
    Rss,
    /// `rx_bytes_per_sec`.
    Rx,
    /// `tx_bytes_per_sec`.
    Tx,
    /// `connections_avg`, `connections_max`.
    Connections,
    /// `proxy`: an Envoy role's own counts, from its admin endpoint (lab roles only; not in
    /// [`Figure::ALL`], which are the figures of resource use an external role is queried for).
    Proxy,
}

impl Figure {
    /// The figures of resource use (every one an external role is queried for).
    pub const ALL: [Figure; 6] = [
        Figure::Cpu,
        Figure::Memory,
        Figure::Rss,
        Figure::Rx,
        Figure::Tx,
        Figure::Connections,
    ];

    /// The word of the file, the store and the messages.
    pub fn name(self) -> &'static str {
        match self {
            Figure::Cpu => "cpu",
            Figure::Memory => "memory",
            Figure::Rss => "rss",
            Figure::Rx => "rx",
            Figure::Tx => "tx",
            Figure::Connections => "connections",
            Figure::Proxy => "proxy",
        }
    }
}

impl RoleUsage {
    /// A control plane's row ([`Role::Istiod`], [`Role::Contour`]), sampled here: istiod in a
    /// `control_plane` step, and each beside the data plane in a lab step whose proxies it
    /// configures. Its program is the one the experiment file names it by (`istio`,
    /// `contour`).
    pub fn control_plane(role: Role, usage: Usage, cpu_limit: Option<f64>) -> RoleUsage {
        debug_assert!(role.is_control_plane(), "{role} is no control plane");
        let program = match role {
            Role::Contour => Program::Contour,
            _ => Program::Istio,
        };
        RoleUsage {
            role,
            program: PlayedBy::Proxy(program),
            workers: 0,
            cpu_limit,
            usage,
            missing: BTreeMap::new(),
            proxy: None,
        }
    }

    /// Whether `f` was measured.
    pub fn has(&self, f: Figure) -> bool {
        !self.missing.contains_key(&f)
    }

    /// Average CPU over the window, unless it was not measured.
    pub fn cpu_millicores(&self) -> Option<f64> {
        self.has(Figure::Cpu)
            .then_some(self.usage.cpu_millicores_avg)
    }

    /// Memory as the answers count it: the working set where there is one (a cgroup's, or
    /// cAdvisor's), else RSS; `None` when neither was measured.
    pub fn memory_mib(&self) -> Option<f64> {
        match self.usage.working_set_mib_avg {
            Some(w) if self.has(Figure::Memory) => Some(w),
            _ => self.has(Figure::Rss).then_some(self.usage.rss_mib_avg),
        }
    }

    /// Bytes received plus sent per second, unless either was not measured.
    pub fn bytes_per_sec(&self) -> Option<f64> {
        (self.has(Figure::Rx) && self.has(Figure::Tx))
            .then_some(self.usage.rx_bytes_per_sec + self.usage.tx_bytes_per_sec)
    }

    /// [`RoleUsage::memory_mib`], or 0 when it was not measured (for sums that count what
    /// they have).
    pub fn memory_mib_avg(&self) -> f64 {
        self.memory_mib().unwrap_or(0.0)
    }
}

/// A role's use over a window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Samples inside the window.
    pub samples: usize,
    pub cpu_millicores_avg: f64,
    /// The busiest interval.
    pub cpu_millicores_max: f64,
    pub rss_mib_avg: f64,
    pub rss_mib_max: f64,
    pub working_set_mib_avg: Option<f64>,
    pub working_set_mib_max: Option<f64>,
    pub rx_bytes_per_sec: f64,
    pub tx_bytes_per_sec: f64,
    pub connections_avg: f64,
    pub connections_max: u64,
}

/// Where a step's roles were read, and how finely: what a reader needs to judge its CPU and
/// memory figures (a one-second cgroup reading, or a kubelet's ten-second housekeeping).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsageSource {
    pub reader: UsageReader,
    /// The median time between two readings of a role over the step, milliseconds; none when
    /// no role had two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
}

/// Who read a step's roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageReader {
    /// The lab's sampler, from each role's cgroup and process on this machine.
    Sampler,
    /// Prometheus, at a URL this machine reaches (its scrapes of the kubelets' cAdvisor, or
    /// of a process exporter).
    Prometheus,
    /// Prometheus as a cluster's Service, through the API server's service proxy.
    PrometheusService,
    /// Each node's kubelet (`/metrics/cadvisor`), through the API server's node proxy.
    Kubelet,
}

impl UsageReader {
    /// As a table says it.
    pub fn describe(self) -> &'static str {
        match self {
            UsageReader::Sampler => "the lab's sampler (cgroups)",
            UsageReader::Prometheus => "Prometheus",
            UsageReader::PrometheusService => "Prometheus through the API server",
            UsageReader::Kubelet => "the kubelets' cAdvisor through the API server",
        }
    }
}

impl std::fmt::Display for UsageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reader.describe())?;
        match self.every_ms {
            Some(ms) => write!(f, ", every {:.1} s", ms as f64 / 1000.0),
            None => Ok(()),
        }
    }
}

impl UsageSource {
    /// `reader`, with the median time between two successive samples of any one role in
    /// `roles` (each role's samples in time order).
    pub fn measured<'a>(
        reader: UsageReader,
        roles: impl IntoIterator<Item = &'a [Sample]>,
    ) -> UsageSource {
        let mut gaps: Vec<u64> = roles
            .into_iter()
            .flat_map(|s| s.windows(2).map(|w| w[1].t_ms.saturating_sub(w[0].t_ms)))
            .filter(|g| *g > 0)
            .collect();
        gaps.sort_unstable();
        UsageSource {
            reader,
            every_ms: gaps.get(gaps.len() / 2).copied(),
        }
    }
}

#[cfg(test)]
mod source_tests {
    use super::*;

    fn at(t_ms: u64) -> Sample {
        Sample {
            t_ms,
            cpu_ns: 0,
            rss_bytes: 0,
            working_set_bytes: None,
            rx_bytes: 0,
            tx_bytes: 0,
            connections: 0,
        }
    }

    #[test]
    fn a_source_says_the_median_gap_between_a_roles_samples() {
        let a = [at(0), at(10_000), at(20_000), at(31_000)];
        let b = [at(5_000), at(15_000)];
        let s = UsageSource::measured(UsageReader::Kubelet, [&a[..], &b[..]]);
        assert_eq!(s.every_ms, Some(10_000));
        assert_eq!(
            s.to_string(),
            "the kubelets' cAdvisor through the API server, every 10.0 s"
        );
        let none = UsageSource::measured(UsageReader::Sampler, [&[at(1)][..]]);
        assert_eq!(none.every_ms, None);
    }
}
