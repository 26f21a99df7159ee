//! What Contour's Envoy holds, read from its stats: the rule for an Envoy whose admin is out
//! of reach (a cluster's Contour gives Envoy's admin a unix socket; its stats listener,
//! Contour's `--stats-port`, answers `/stats`). The lab's own Contour gateway is read
//! through its admin ([`super::objects::expected`]); this is the same configuration seen
//! through the counters it leaves: a route configuration per domain (`https/<fqdn>`,
//! loaded), the backend's cluster with a healthy member (its stats under Contour's
//! `alt_stat_name`, `<namespace>_<service>_<port>`), no update refused.

use crate::program::envoy::admin;

use super::objects::HTTPS_ROUTES;

/// What one reading of Envoy's stats says of a run's routes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Route configurations `https/<fqdn>` loaded at least once.
    pub route_configs: usize,
    /// Healthy members of the backend's cluster.
    pub backend_members: u64,
    /// `update_rejected` counters that are not 0.
    pub rejected: Vec<String>,
}

impl Held {
    /// Whether Envoy holds `domains` domains' routes and can reach the backend.
    pub fn holds(&self, domains: usize) -> bool {
        self.route_configs >= domains && self.backend_members > 0
    }
}

/// The stats filter (a regular expression) for [`held`]: the HTTPS route configurations, the
/// health of Service `namespace/service`'s cluster, the refusals.
pub fn held_filter(namespace: &str, service: &str) -> String {
    format!(
        r"(\.rds\.{HTTPS_ROUTES}.*\.config_reload|^cluster\.{namespace}_{service}_[0-9]+\.membership_healthy|update_rejected)$"
    )
}

/// Reads `/stats` text (`name: value` lines) filtered by [`held_filter`].
pub fn held(text: &str) -> Held {
    let (rejected, others): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| {
        l.split_once(": ")
            .is_some_and(|(name, _)| name.ends_with("update_rejected"))
    });
    let mut h = Held {
        // Read as the lab reads its own Envoys' refusals.
        rejected: admin::parse_rejected(&rejected.join("\n")),
        ..Held::default()
    };
    let routes = format!(".rds.{HTTPS_ROUTES}");
    for line in others {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let value: u64 = value.trim().parse().unwrap_or(0);
        if name.ends_with(".membership_healthy") {
            h.backend_members += value;
        } else if name.contains(&routes) && value > 0 {
            h.route_configs += 1;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoys_stats_say_which_routes_and_backend_members_it_holds() {
        let text = "cluster.bench_backend_8080.membership_healthy: 1\n\
                    http.ingress_https.rds.https/workspace-1-domain-1.com.config_reload: 1\n\
                    http.ingress_https.rds.https/workspace-1-domain-2.com.config_reload: 0\n\
                    cluster_manager.cds.update_rejected: 0\n";
        let h = held(text);
        assert_eq!(
            h,
            Held {
                route_configs: 1,
                backend_members: 1,
                rejected: vec![],
            }
        );
        assert!(h.holds(1) && !h.holds(2));
        let refused = held("listener_manager.lds.update_rejected: 2\n");
        assert_eq!(
            refused.rejected,
            ["listener_manager.lds.update_rejected: 2"]
        );
        assert!(held_filter("bench", "backend").contains(r"^cluster\.bench_backend_[0-9]+\."));
    }
}
