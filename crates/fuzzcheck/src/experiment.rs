//! `experiment_file`: an experiment file (and `--set` overrides) read, checked and planned. A
//! file is either refused with its problems listed or accepted; an accepted file compiles to a
//! plan of at most `MAX_STEPS` steps, each of which can be described, asks for at most
//! `MAX_ROUTES` gateway routes, and has durations the runner can turn into `Duration`s.
//!
//! Input: the file's text; after a NUL byte, if there is one, `--set KEY=VALUE` overrides, one
//! per line.

use std::time::Duration;

use meshbench_experiment::config::parse_cpuset;
use meshbench_experiment::plan::{PlanSize, MAX_STEPS};
use meshbench_experiment::{parse, ConfigError, Plan};
use meshbench_lab::gateway::MAX_ROUTES;
use meshbench_results::Topology;

/// The check of one experiment file.
pub fn experiment_file(data: &[u8]) {
    let (file, sets) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(file);
    let overrides: Vec<String> = String::from_utf8_lossy(sets)
        .lines()
        .map(str::to_string)
        .collect();
    let e = match parse("fuzz.yaml", &text, &overrides) {
        Ok(e) => e,
        Err(err) => {
            if let ConfigError::Invalid { problems, .. } = &err {
                assert!(!problems.is_empty(), "refused without a problem");
            }
            assert!(err.to_string().starts_with("fuzz.yaml: "), "{err}");
            return;
        }
    };
    for secs in [e.duration_secs, e.warmup_secs, e.cooldown_secs] {
        assert!(
            Duration::try_from_secs_f64(secs).is_ok(),
            "accepted {secs} s, which is no Duration"
        );
    }
    for limits in [
        &e.limits.proxy,
        &e.limits.tunnel,
        &e.limits.backend,
        &e.limits.client,
    ] {
        if let Some(set) = &limits.cpuset {
            assert!(parse_cpuset(set).is_some(), "accepted cpuset {set:?}");
        }
    }
    let size = PlanSize::of(&e);
    assert!(size.steps() <= MAX_STEPS, "accepted a plan of {size:?}");
    if e.topologies.contains(&Topology::Gateway.into()) {
        let routes = u64::from(e.gateway.domains) * u64::from(e.gateway.paths);
        assert!(routes <= MAX_ROUTES, "accepted {routes} gateway routes");
    }
    let plan = Plan::compile(&e);
    assert!(!plan.steps.is_empty(), "an accepted file plans no step");
    assert!(plan.steps.len() as u64 <= size.steps());
    for (i, step) in plan.steps.iter().enumerate() {
        assert_eq!(step.index, i);
        assert!(step.repeat < e.repeats);
        let _ = (step.params(&e), step.variant(), step.asks());
        let _ = step.istio_label("fuzz", e.load.protocol);
    }
    let _ = plan.total_secs(&e);
}
