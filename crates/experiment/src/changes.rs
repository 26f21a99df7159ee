//! `changes:`, what a change costs the traffic: the changes each gateway step applies while its
//! load runs, one stream per kind (a route every 2 s, a domain with its certificate every
//! 10 s), and those each step of Istio's sidecars applies to their mesh (a ServiceEntry every
//! second). With the section, every variant a stream applies to runs twice per repeat, without
//! and with the changes, interleaved as repeats are, so that what the changes add is read
//! against the same step without them. The checks here are those of the section alone and
//! what it rules out.

use std::time::Duration;

use meshbench_results::change::MIN_APART;
use meshbench_results::{ChangeKind, ChangeStream, Program, Protocol, StepKind, Topology};
use serde::{Deserialize, Serialize};

use crate::config::Experiment;

/// One stream of the section: a kind and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeSection {
    pub kind: ChangeKind,
    /// One change every this many seconds, the first that long after the window opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_secs: Option<f64>,
    /// Or at these instants, seconds after the window opens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_secs: Vec<f64>,
}

/// The gateways meshbench can change under load (each in its own way, `meshbench_lab::change`).
pub const CHANGEABLE: [Program; 6] = [
    Program::Nginx,
    Program::Haproxy,
    Program::Caddy,
    Program::Envoy,
    Program::Istio,
    Program::Contour,
];

impl ChangeSection {
    /// The stream as the runner applies it.
    pub fn stream(&self) -> ChangeStream {
        ChangeStream {
            kind: self.kind,
            every: self.every_secs.map(Duration::from_secs_f64),
            at: self
                .at_secs
                .iter()
                .map(|s| Duration::from_secs_f64(*s))
                .collect(),
        }
    }
}

/// The two kinds of step changes are made in: a gateway's, and those of Istio's sidecars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Changed {
    Gateway,
    Sidecars,
}

impl Changed {
    /// What a change of `kind` changes.
    fn of(kind: ChangeKind) -> Changed {
        match kind {
            ChangeKind::ServiceEntry => Changed::Sidecars,
            ChangeKind::Route
            | ChangeKind::Domain
            | ChangeKind::Reload
            | ChangeKind::Certificate
            | ChangeKind::Backend => Changed::Gateway,
        }
    }
}

impl Experiment {
    /// What the steps of `topology` change, if anything: the gateway topology its gateway,
    /// the topologies with a client's sidecar of Istio their mesh.
    fn changed_in(&self, topology: Topology) -> Option<Changed> {
        match topology {
            Topology::Gateway => Some(Changed::Gateway),
            t if t.has_client_sidecar() && self.proxy.kind == Program::Istio => {
                Some(Changed::Sidecars)
            }
            _ => None,
        }
    }

    /// The change streams a step of `topology` with changes applies (none without the
    /// section, or when no stream applies to it).
    pub fn change_streams(&self, topology: Topology) -> Vec<ChangeStream> {
        let changed = self.changed_in(topology);
        (self.changes.iter().flatten())
            .filter(|s| Some(Changed::of(s.kind)) == changed)
            .map(ChangeSection::stream)
            .collect()
    }

    /// Whether the steps of `topology` run in pairs, without and with changes.
    pub fn pairs_changes(&self, topology: Topology) -> bool {
        !self.change_streams(topology).is_empty()
    }

    /// The rules of `changes`: a gateway topology to change, a gateway meshbench can change
    /// (or, for a ServiceEntry, Istio's sidecars with a client's, in the lab), instants inside
    /// the window and no faster than a step can hold, nothing external.
    pub(crate) fn validate_changes(&self, p: &mut Vec<String>) {
        let Some(streams) = &self.changes else {
            return;
        };
        let before = p.len();
        if streams.is_empty() {
            p.push("changes: expected at least one stream (kind and every_secs or at_secs), or no section".into());
            return;
        }
        if self.topologies.contains(&StepKind::External) || self.external.is_some() {
            p.push("changes: an external system's configuration is its owner's, not meshbench's to change; run the changes in a file without the external topology".into());
        }
        let gateway = streams
            .iter()
            .any(|s| Changed::of(s.kind) == Changed::Gateway);
        if gateway
            && !self
                .topologies
                .contains(&StepKind::Chain(Topology::Gateway))
        {
            p.push(
                "changes: applies to the gateway topology's steps; add gateway to topologies"
                    .into(),
            );
        }
        self.validate_sidecar_changes(streams, p);
        for program in (self.gateway.kinds.iter()).filter(|_| gateway) {
            if !CHANGEABLE.contains(program) {
                p.push(format!(
                    "changes: gateway.type {} cannot be changed under load by meshbench; use nginx, haproxy, caddy, envoy, istio or contour",
                    program.name()
                ));
            }
        }
        let window =
            Duration::from_secs_f64(self.duration_secs.clamp(0.0, crate::config::MAX_SECS));
        for (i, s) in streams.iter().enumerate() {
            let at = format!("changes[{i}]");
            if s.kind == ChangeKind::Route && self.load.protocol == Protocol::Grpc {
                p.push(format!("{at}.kind: a gateway carrying gRPC routes the backend's methods, which no change adds; use domain or reload"));
            }
            match (s.every_secs, s.at_secs.is_empty()) {
                (None, true) => p.push(format!("{at}: expected every_secs or at_secs")),
                (Some(_), false) => {
                    p.push(format!("{at}: expected every_secs or at_secs, not both"))
                }
                (Some(e), true) if !(e.is_finite() && e >= MIN_APART.as_secs_f64()) => p.push(
                    format!(
                        "{at}.every_secs: {e} is faster than a step can hold; at least {} s between changes",
                        MIN_APART.as_secs_f64()
                    ),
                ),
                _ => {}
            }
            for t in &s.at_secs {
                if !(t.is_finite() && *t > 0.0 && *t < self.duration_secs) {
                    p.push(format!(
                        "{at}.at_secs: {t} is outside the measured window (0 to duration_secs {})",
                        self.duration_secs
                    ));
                }
            }
        }
        if p.len() == before {
            for changed in [Changed::Gateway, Changed::Sidecars] {
                let step: Vec<&ChangeSection> = (streams.iter())
                    .filter(|s| Changed::of(s.kind) == changed)
                    .collect();
                self.validate_one_step(&step, window, p);
            }
        }
    }

    /// What a ServiceEntry needs: Istio's sidecars, a client's among them, in the lab.
    fn validate_sidecar_changes(&self, streams: &[ChangeSection], p: &mut Vec<String>) {
        let Some(i) = (streams.iter()).position(|s| Changed::of(s.kind) == Changed::Sidecars)
        else {
            return;
        };
        let at = format!("changes[{i}].kind");
        let client_sidecar = (self.topologies.iter())
            .any(|t| matches!(t, StepKind::Chain(t) if t.has_client_sidecar()));
        if self.proxy.kind != Program::Istio {
            p.push(format!(
                "{at}: service_entry changes the mesh of Istio's sidecars; set proxy.type: istio"
            ));
        } else if !client_sidecar {
            p.push(format!("{at}: service_entry is read where the client's sidecar holds it; add clientonly or both to topologies"));
        }
        if self.cluster.is_some() {
            p.push(format!("{at}: service_entry is made in the lab's mesh, not yet on a cluster; run it without the cluster section"));
        }
    }

    /// The streams one step applies together: no faster than it can hold, and at least one
    /// change inside the window.
    fn validate_one_step(&self, step: &[&ChangeSection], window: Duration, p: &mut Vec<String>) {
        if step.is_empty() {
            return;
        }
        let per_sec: f64 = (step.iter())
            .map(|s| match s.every_secs {
                Some(e) => 1.0 / e,
                None => s.at_secs.len() as f64 / self.duration_secs,
            })
            .sum();
        if per_sec > 1.0 / MIN_APART.as_secs_f64() {
            p.push(format!(
                "changes: {per_sec:.1} changes a second is above what a step can hold (one every {} s, all streams together); apply them less often",
                MIN_APART.as_secs_f64()
            ));
        }
        let streams: Vec<ChangeStream> = step.iter().map(|s| s.stream()).collect();
        if meshbench_results::change::schedule(&streams, window).is_empty() {
            p.push(format!("changes: no change falls within duration_secs {}; apply them earlier or measure longer", self.duration_secs));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse, Plan};
    use meshbench_results::Topology;

    /// The plan's steps, by their variants' names.
    fn variants(e: &crate::config::Experiment) -> Vec<String> {
        Plan::compile(e).steps.iter().map(|s| s.variant()).collect()
    }

    const FILE: &str = "name: t\ntopologies: [baseline, gateway]\nduration_secs: 10\ngateway:\n  type: [nginx, caddy]\n";

    #[test]
    fn each_gateway_variant_runs_still_then_changed_side_by_side_and_no_other() {
        let text = format!("{FILE}changes:\n  - kind: route\n    every_secs: 2\n");
        let e = parse("t.yaml", &text, &[]).unwrap();
        let names = variants(&e);
        assert_eq!(
            names,
            [
                "baseline",
                "gateway nginx",
                "gateway nginx changes",
                "gateway caddy",
                "gateway caddy changes"
            ]
        );
        assert_eq!(e.change_streams(Topology::Gateway).len(), 1);
        assert!(e.change_streams(Topology::Baseline).is_empty());
        let without = parse("t.yaml", FILE, &[]).unwrap();
        assert_eq!(Plan::compile(&without).steps.len(), 3);
    }

    #[test]
    fn haproxy_runs_once_per_listed_reload_and_the_key_needs_haproxy() {
        let text = format!("{FILE}changes:\n  - kind: route\n    every_secs: 2\n").replace(
            "[nginx, caddy]",
            "[nginx, haproxy]\n  haproxy_reload: [seamless, plain]",
        );
        let e = parse("t.yaml", &text, &[]).unwrap();
        let names = variants(&e);
        assert_eq!(
            names,
            [
                "baseline",
                "gateway nginx",
                "gateway nginx changes",
                "gateway haproxy seamless-reload",
                "gateway haproxy seamless-reload changes",
                "gateway haproxy plain-reload",
                "gateway haproxy plain-reload changes"
            ]
        );
        let one = text.replace("[seamless, plain]", "plain");
        let e = parse("t.yaml", &one, &[]).unwrap();
        assert_eq!(
            Plan::compile(&e).steps.len(),
            5,
            "one reload names no variant"
        );
        let without = text.replace("[nginx, haproxy]", "[nginx, caddy]");
        let err = parse("t.yaml", &without, &[]).unwrap_err().to_string();
        assert!(
            err.contains("gateway.haproxy_reload: only with type haproxy"),
            "{err}"
        );
        let twice = text.replace("[seamless, plain]", "[plain, plain]");
        let err = parse("t.yaml", &twice, &[]).unwrap_err().to_string();
        assert!(err.contains("a value is listed twice"), "{err}");
    }

    #[test]
    fn changes_a_step_cannot_hold_or_make_are_refused_each_in_its_words() {
        for (changes, expected) in [
            (
                "  - kind: route\n",
                "changes[0]: expected every_secs or at_secs",
            ),
            (
                "  - kind: route\n    every_secs: 2\n    at_secs: [3]\n",
                "not both",
            ),
            (
                "  - kind: route\n    every_secs: 0.2\n",
                "faster than a step can hold",
            ),
            (
                "  - kind: domain\n    at_secs: [12]\n",
                "outside the measured window",
            ),
            (
                "  - kind: route\n    every_secs: 0.8\n  - kind: reload\n    every_secs: 0.8\n",
                "above what a step can hold",
            ),
            (
                "  - kind: route\n    every_secs: 20\n",
                "no change falls within",
            ),
            ("  []\n", "expected at least one stream"),
        ] {
            let text = format!("{FILE}changes:\n{changes}");
            let err = parse("t.yaml", &text, &[]).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
        let text = format!("{FILE}changes:\n  - kind: route\n    every_secs: 2\n")
            .replace("[baseline, gateway]", "[baseline]");
        let err = parse("t.yaml", &text, &[]).unwrap_err().to_string();
        assert!(err.contains("add gateway to topologies"), "{err}");
    }

    const SIDECARS: &str = "name: t\ntopologies: [baseline, serveronly, both, gateway]\nisolation: netns\nduration_secs: 10\nproxy:\n  type: istio\ngateway:\n  type: nginx\nchanges:\n  - kind: service_entry\n    every_secs: 1\n";

    #[test]
    fn a_service_entry_pairs_the_steps_with_a_client_sidecar_and_a_route_the_gateways() {
        let text = format!("{SIDECARS}  - kind: route\n    every_secs: 0.6\n");
        let e = parse("t.yaml", &text, &[]).unwrap();
        let names = variants(&e);
        assert_eq!(
            names,
            [
                "baseline",
                "serveronly",
                "both",
                "both changes",
                "gateway",
                "gateway changes"
            ]
        );
        let kinds = |t| {
            (e.change_streams(t).iter())
                .map(|s| s.kind.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(Topology::Both), ["service_entry"]);
        assert_eq!(kinds(Topology::Gateway), ["route"]);
        assert!(kinds(Topology::Serveronly).is_empty());
        // Counted per step: above, 1 a second on the sidecars' and 1.7 on the gateway's; a
        // route and a domain together on the gateway's are 2.3.
        let together = text.replace(
            "every_secs: 0.6",
            "every_secs: 1.5\n  - kind: domain\n    every_secs: 0.6",
        );
        let err = parse("t.yaml", &together, &[]).unwrap_err().to_string();
        assert!(err.contains("above what a step can hold"), "{err}");
    }

    #[test]
    fn a_service_entry_without_istios_client_sidecar_is_refused_in_its_words() {
        for (from, to, expected) in [
            ("type: istio", "type: envoy", "set proxy.type: istio"),
            (
                "[baseline, serveronly, both, gateway]",
                "[baseline, serveronly]",
                "add clientonly or both to topologies",
            ),
        ] {
            let err = parse("t.yaml", &SIDECARS.replace(from, to), &[])
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{expected}: {err}");
            assert!(!err.contains("add gateway to topologies"), "{err}");
        }
    }
}
