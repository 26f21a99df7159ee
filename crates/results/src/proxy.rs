//! An Envoy role's own account of a step, read from its admin endpoint (the lab's
//! `program::envoy::admin` reads and parses it): requests by response class, upstream failures,
//! connections open and memory allocated. A second witness beside the engine's counts, kept
//! per role in [`crate::usage::RoleUsage::proxy`].

use serde::{Deserialize, Serialize};

/// What an Envoy said about itself: counters (summed over its connection managers, clusters
/// and listeners) and gauges. A single reading holds totals since Envoy started; a step keeps
/// [`ProxyCounters::since`] its reading before the load: the counters' differences and the
/// gauges' values at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ProxyCounters {
    /// Requests its HTTP connection managers served; `None` when it has none (an L4 tunnel) or
    /// their stats were not created (a stats matcher without `http.`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ProxyRequests>,
    /// Upstream failures summed over its clusters (Istio's `xds-grpc` left out).
    pub upstream_failures: UpstreamFailures,
    /// Downstream connections open at the reading (`listener.<listener>.downstream_cx_active`
    /// over its traffic listeners; the admin's listener and the per-worker copies left out): a
    /// gauge.
    pub connections_active: u64,
    /// Connections its TCP proxies carried (`tcp.<prefix>.downstream_cx_total` summed): what an
    /// L4 tunnel has instead of requests; `None` when it has no TCP proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_connections: Option<u64>,
    /// `server.memory_allocated`: bytes its allocator handed out, a gauge.
    pub memory_allocated_bytes: u64,
    /// `server.memory_heap_size`: bytes its allocator reserved from the system, a gauge.
    pub memory_heap_size_bytes: u64,
    /// How many Envoys' counts are summed here (a role of several pods, such as Contour's Envoy
    /// as a DaemonSet: one per node); absent for one Envoy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
}

/// Several Envoys of one role add up: counters and gauges alike are the role's in all (its
/// requests, its open connections, its memory).
impl std::ops::AddAssign for ProxyCounters {
    fn add_assign(&mut self, other: ProxyCounters) {
        self.requests = match (self.requests, other.requests) {
            (Some(a), Some(b)) => Some(ProxyRequests {
                total: a.total + b.total,
                status_1xx: a.status_1xx + b.status_1xx,
                status_2xx: a.status_2xx + b.status_2xx,
                status_3xx: a.status_3xx + b.status_3xx,
                status_4xx: a.status_4xx + b.status_4xx,
                status_5xx: a.status_5xx + b.status_5xx,
            }),
            (a, b) => a.or(b),
        };
        let (u, o) = (&mut self.upstream_failures, other.upstream_failures);
        u.connect_fail += o.connect_fail;
        u.rq_timeout += o.rq_timeout;
        u.rq_per_try_timeout += o.rq_per_try_timeout;
        u.remote_closed_active_rq += o.remote_closed_active_rq;
        u.rq_retry += o.rq_retry;
        u.rq_pending_overflow += o.rq_pending_overflow;
        self.connections_active += other.connections_active;
        self.tunnel_connections = match (self.tunnel_connections, other.tunnel_connections) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.memory_allocated_bytes += other.memory_allocated_bytes;
        self.memory_heap_size_bytes += other.memory_heap_size_bytes;
        self.pods = Some(self.pods.unwrap_or(1) + other.pods.unwrap_or(1));
    }
}

/// Requests served, summed over every HTTP connection manager (`http.<prefix>.`) except the
/// admin's own (`http.admin.`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ProxyRequests {
    /// `downstream_rq_total`: every request whose headers the manager began to decode.
    pub total: u64,
    /// `downstream_rq_1xx` ... `downstream_rq_5xx`: responses it sent, by class (a request
    /// reset before any response is in `total` only).
    pub status_1xx: u64,
    pub status_2xx: u64,
    pub status_3xx: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
}

/// Upstream failures summed over the clusters, each under the name of its Envoy counter
/// (`cluster.<name>.<counter>`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct UpstreamFailures {
    /// `upstream_cx_connect_fail`: connections to an upstream that failed.
    pub connect_fail: u64,
    /// `upstream_rq_timeout`: requests that timed out waiting for the upstream's answer.
    pub rq_timeout: u64,
    /// `upstream_rq_per_try_timeout`: tries that timed out (with a retry policy).
    pub rq_per_try_timeout: u64,
    /// `upstream_cx_destroy_remote_with_active_rq`: connections the upstream closed with a
    /// request in flight.
    pub remote_closed_active_rq: u64,
    /// `upstream_rq_retry`: requests sent again; each is one more request the next hop sees.
    pub rq_retry: u64,
    /// `upstream_rq_pending_overflow`: requests refused by the circuit breaker.
    pub rq_pending_overflow: u64,
}

impl UpstreamFailures {
    /// Every failure and retry added up: one number for a table (a connect failure that was
    /// retried counts twice, once as each).
    pub fn total(&self) -> u64 {
        self.connect_fail
            + self.rq_timeout
            + self.rq_per_try_timeout
            + self.remote_closed_active_rq
            + self.rq_retry
            + self.rq_pending_overflow
    }

    fn since(&self, before: &UpstreamFailures) -> UpstreamFailures {
        UpstreamFailures {
            connect_fail: self.connect_fail.saturating_sub(before.connect_fail),
            rq_timeout: self.rq_timeout.saturating_sub(before.rq_timeout),
            rq_per_try_timeout: self
                .rq_per_try_timeout
                .saturating_sub(before.rq_per_try_timeout),
            remote_closed_active_rq: self
                .remote_closed_active_rq
                .saturating_sub(before.remote_closed_active_rq),
            rq_retry: self.rq_retry.saturating_sub(before.rq_retry),
            rq_pending_overflow: self
                .rq_pending_overflow
                .saturating_sub(before.rq_pending_overflow),
        }
    }
}

impl ProxyRequests {
    fn since(&self, before: &ProxyRequests) -> ProxyRequests {
        ProxyRequests {
            total: self.total.saturating_sub(before.total),
            status_1xx: self.status_1xx.saturating_sub(before.status_1xx),
            status_2xx: self.status_2xx.saturating_sub(before.status_2xx),
            status_3xx: self.status_3xx.saturating_sub(before.status_3xx),
            status_4xx: self.status_4xx.saturating_sub(before.status_4xx),
            status_5xx: self.status_5xx.saturating_sub(before.status_5xx),
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

impl ProxyCounters {
    /// What happened between `before` and this reading: counters as differences (an Envoy
    /// restarted in between would have counted from zero again: its differences floor at 0),
    /// gauges (connections, memory) as this reading has them.
    pub fn since(&self, before: &ProxyCounters) -> ProxyCounters {
        ProxyCounters {
            requests: match (self.requests, before.requests) {
                (Some(now), Some(then)) => Some(now.since(&then)),
                (now, _) => now,
            },
            upstream_failures: self.upstream_failures.since(&before.upstream_failures),
            connections_active: self.connections_active,
            tunnel_connections: self
                .tunnel_connections
                .map(|n| n.saturating_sub(before.tunnel_connections.unwrap_or(0))),
            memory_allocated_bytes: self.memory_allocated_bytes,
            memory_heap_size_bytes: self.memory_heap_size_bytes,
            pods: self.pods,
        }
    }

    pub fn memory_allocated_mib(&self) -> f64 {
        self.memory_allocated_bytes as f64 / MIB
    }

    pub fn memory_heap_size_mib(&self) -> f64 {
        self.memory_heap_size_bytes as f64 / MIB
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_envoys_of_one_role_add_up_and_say_they_are_two() {
        let one = |total: u64, connections: u64| ProxyCounters {
            requests: Some(ProxyRequests {
                total,
                status_2xx: total,
                ..ProxyRequests::default()
            }),
            upstream_failures: UpstreamFailures {
                connect_fail: 1,
                ..UpstreamFailures::default()
            },
            connections_active: connections,
            memory_allocated_bytes: 1 << 20,
            ..ProxyCounters::default()
        };
        let mut sum = one(700, 3);
        sum += one(500, 5);
        assert_eq!(
            sum.requests.map(|r| (r.total, r.status_2xx)),
            Some((1200, 1200))
        );
        assert_eq!(sum.upstream_failures.connect_fail, 2);
        assert_eq!(sum.connections_active, 8);
        assert_eq!(sum.memory_allocated_bytes, 2 << 20);
        assert_eq!(sum.pods, Some(2));
        sum += one(1, 0);
        assert_eq!(sum.pods, Some(3));
        // Stored only when it says something: one Envoy's counts read back as they were.
        let text = serde_json::to_string(&one(1, 0)).unwrap();
        assert!(!text.contains("pods"), "{text}");
    }
}
