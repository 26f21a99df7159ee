//! The cluster's Contour as a step's gateway (`gateway.type: contour`): the run deploys none
//! of it. A step's gateway is ready when Contour has taken every HTTPProxy of the run's
//! namespace (its own status says `valid`; one it refused fails the step with its reason at
//! once) and every ready pod of its Envoy (a Deployment's, or one per node of a DaemonSet)
//! holds what Contour should send it, read from
//! Envoy's stats through its stats listener (Contour's `--stats-port`, 8002 in its manifests;
//! Envoy's admin is a unix socket there): a route configuration per domain (`https/<fqdn>`,
//! loaded), the backend's cluster with a healthy member (its stats under Contour's
//! `alt_stat_name`, `<namespace>_<service>_<port>`), no update refused.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use meshbench_engine::Stop;
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::borrowed::WorkloadKind;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::objects::contour::{self, NotTaken};
use meshbench_k8s::rollout::Workload;
use meshbench_k8s::system::{self, ContourInstall};
use meshbench_lab::program::envoy::admin;
use thiserror::Error;

use super::ClusterSite;

/// Between two looks at Contour's status or Envoy's stats.
const POLL: Duration = Duration::from_millis(500);

/// Why Contour's gateway was not ready for a step (the step fails with it).
#[derive(Debug, Error)]
pub enum ContourNotReady {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("Contour did not take every HTTPProxy: {}", .0.join("; "))]
    Refused(Vec<String>),
    #[error("Contour had said `valid` of {valid} of {wanted} HTTPProxies after {} s", waited.as_secs())]
    NotValid {
        valid: usize,
        wanted: usize,
        waited: Duration,
    },
    #[error("no pod of Contour's Envoy {0} is ready")]
    NoEnvoy(String),
    #[error("Contour's Envoy (pod {pod}): its stats port: {source}")]
    Forward { pod: String, source: ApiError },
    #[error("Contour's Envoy (pod {pod}) refused updates: {}", .rejected.join(", "))]
    Rejected { pod: String, rejected: Vec<String> },
    #[error("Contour's Envoy (pod {pod}) did not hold the run's routes within {} s: {waiting}", waited.as_secs())]
    NotHeld {
        pod: String,
        waited: Duration,
        waiting: String,
    },
    #[error("stopped while waiting for Contour")]
    Stopped,
}

/// What one reading of Envoy's stats says of the run's routes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Held {
    /// Route configurations `https/<fqdn>` loaded at least once.
    pub route_configs: usize,
    /// Healthy members of the backend's cluster (stats under Contour's `alt_stat_name`,
    /// `<namespace>_backend_<port>`).
    pub backend_members: u64,
    /// `update_rejected` counters that are not 0.
    pub rejected: Vec<String>,
}

/// The stats filter (a regular expression) for [`held`].
pub(super) fn held_filter(namespace: &str) -> String {
    format!(
        r"(\.rds\.https/.*\.config_reload|^cluster\.{namespace}_{}_[0-9]+\.membership_healthy|update_rejected)$",
        system::BACKEND
    )
}

/// Reads `/stats` text (`name: value` lines) filtered by [`held_filter`].
pub(super) fn held(text: &str) -> Held {
    let (rejected, others): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| {
        l.split_once(": ")
            .is_some_and(|(name, _)| name.ends_with("update_rejected"))
    });
    let mut h = Held {
        // Read as the lab reads its own Envoys' refusals.
        rejected: admin::parse_rejected(&rejected.join("\n")),
        ..Held::default()
    };
    for line in others {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let value: u64 = value.trim().parse().unwrap_or(0);
        if name.ends_with(".membership_healthy") {
            h.backend_members += value;
        } else if name.contains(".rds.https/") && value > 0 {
            h.route_configs += 1;
        }
    }
    h
}

impl ClusterSite {
    /// The pods of the workload `namespace/name` of `kind` that are not going away (none when
    /// it is not there).
    pub(super) fn workload_pods(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<Pod>, ApiError> {
        match Workload::get(&self.client, kind, namespace, name)? {
            Some(w) => w.pods(&self.client, namespace),
            None => Ok(Vec::new()),
        }
    }

    /// The pods of Contour's Envoy: one, a few (a Deployment's replicas), or one per node (a
    /// DaemonSet).
    pub(super) fn contour_envoy_pods(
        &self,
        contour: &ContourInstall,
    ) -> Result<Vec<Pod>, ApiError> {
        self.workload_pods(contour.envoy_kind, &contour.namespace, &contour.envoy)
    }

    /// The pods of Contour itself (its Deployment).
    pub(super) fn contour_pods(&self, contour: &ContourInstall) -> Result<Vec<Pod>, ApiError> {
        self.workload_pods(
            WorkloadKind::Deployment,
            &contour.namespace,
            &contour.deployment,
        )
    }

    /// Waits until Contour took every HTTPProxy and each of its Envoy's pods holds the run's
    /// routes; `limit` is for all of it.
    pub(super) fn wait_contour_ready(
        &self,
        contour: &ContourInstall,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), ContourNotReady> {
        let began = Instant::now();
        let domains = self.gateway.as_ref().map_or(0, |g| g.domains);
        let namespace = &self.section.namespace;
        match contour::wait_taken(&self.client, namespace, domains, (limit, POLL), stop) {
            Ok(()) => {}
            Err(NotTaken::Api(e)) => return Err(e.into()),
            Err(NotTaken::Refused(refused)) => return Err(ContourNotReady::Refused(refused)),
            Err(NotTaken::TimedOut {
                valid,
                wanted,
                waited,
                ..
            }) => {
                return Err(ContourNotReady::NotValid {
                    valid,
                    wanted,
                    waited,
                })
            }
            Err(NotTaken::Stopped) => return Err(ContourNotReady::Stopped),
        }
        let ready: Vec<String> = self
            .contour_envoy_pods(contour)?
            .iter()
            .filter(|p| meshbench_k8s::rollout::is_ready(p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if ready.is_empty() {
            return Err(ContourNotReady::NoEnvoy(format!(
                "{}/{}",
                contour.namespace, contour.envoy
            )));
        }
        let filter = held_filter(&self.section.namespace);
        for pod in ready {
            let forward = self
                .client
                .port_forward(&contour.namespace, &pod, self.section.contour.stats_port)
                .map_err(|source| ContourNotReady::Forward {
                    pod: pod.clone(),
                    source,
                })?;
            loop {
                let waiting = match admin::stats(forward.addr(), &filter) {
                    Ok(text) => {
                        let h = held(&text);
                        if !h.rejected.is_empty() {
                            return Err(ContourNotReady::Rejected {
                                pod,
                                rejected: h.rejected,
                            });
                        }
                        if h.route_configs >= domains && h.backend_members > 0 {
                            break;
                        }
                        format!(
                            "{} of {domains} route configurations, {} healthy backend member(s)",
                            h.route_configs, h.backend_members
                        )
                    }
                    Err(e) => e.to_string(),
                };
                if began.elapsed() >= limit {
                    return Err(ContourNotReady::NotHeld {
                        pod,
                        waited: limit,
                        waiting,
                    });
                }
                if !stop.sleep(POLL) {
                    return Err(ContourNotReady::Stopped);
                }
            }
        }
        Ok(())
    }
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
        assert_eq!(
            held(text),
            Held {
                route_configs: 1,
                backend_members: 1,
                rejected: vec![],
            }
        );
        let refused = held("listener_manager.lds.update_rejected: 2\n");
        assert_eq!(
            refused.rejected,
            ["listener_manager.lds.update_rejected: 2"]
        );
        assert!(held_filter("bench").contains(r"^cluster\.bench_backend_[0-9]+\."));
    }
}
