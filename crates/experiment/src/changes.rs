//! `changes:`, what a change costs the traffic: the changes each gateway step applies while its
//! load runs, one stream per kind (a route every 2 s, a domain with its certificate every
//! 10 s). With the section, every gateway variant runs twice per repeat, without and with the
//! changes, interleaved as repeats are, so that what the changes add is read against the same
//! step without them. The checks here are those of the section alone and what it rules out.

use std::time::Duration;

use meshbench_results::change::MIN_APART;
use meshbench_results::{ChangeKind, ChangeStream, Program, Protocol, StepKind};
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

impl Experiment {
    /// The change streams every gateway step with changes applies (none without the section).
    pub fn change_streams(&self) -> Vec<ChangeStream> {
        self.changes
            .iter()
            .flatten()
            .map(ChangeSection::stream)
            .collect()
    }

    /// Whether gateway steps run in pairs, without and with changes.
    pub fn pairs_changes(&self) -> bool {
        self.changes.as_ref().is_some_and(|c| !c.is_empty())
    }

    /// The rules of `changes`: a gateway topology to change, a gateway meshbench can change,
    /// instants inside the window and no faster than a step can hold, nothing external.
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
        if !self
            .topologies
            .contains(&StepKind::Chain(meshbench_results::Topology::Gateway))
        {
            p.push(
                "changes: applies to the gateway topology's steps; add gateway to topologies"
                    .into(),
            );
        }
        for program in &self.gateway.kinds {
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
            let per_sec: f64 = (streams.iter())
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
            let all = meshbench_results::change::schedule(&self.change_streams(), window);
            if all.is_empty() {
                p.push(format!("changes: no change falls within duration_secs {}; apply them earlier or measure longer", self.duration_secs));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse, Plan};

    const FILE: &str = "name: t\ntopologies: [baseline, gateway]\nduration_secs: 10\ngateway:\n  type: [nginx, caddy]\n";

    #[test]
    fn each_gateway_variant_runs_still_then_changed_side_by_side_and_no_other() {
        let text = format!("{FILE}changes:\n  - kind: route\n    every_secs: 2\n");
        let e = parse("t.yaml", &text, &[]).unwrap();
        let names: Vec<String> = Plan::compile(&e)
            .steps
            .iter()
            .map(|s| s.variant())
            .collect();
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
        assert_eq!(e.change_streams().len(), 1);
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
        let plan = Plan::compile(&e);
        let names: Vec<String> = plan.steps.iter().map(|s| s.variant()).collect();
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
}
