//! What one step asked for, typed: the rate, connections, sizes, loop, protocol and CPU
//! allotment. The plan produces it for every step, a capacity search for each rate it tries,
//! and the store keeps it (as JSON in the step's `params` column, whose form the store's schema
//! version governs), so every reader gets the same type back instead of looking up keys.

use serde::{Deserialize, Serialize};

use crate::config::{Experiment, LoopMode};
use crate::plan::Step;
use meshbench_engine::Protocol;
use meshbench_lab::Class;

/// The CPU quota a sweep gave one role of a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuAllotment {
    pub role: Class,
    pub cores: f64,
}

/// A step's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepParams {
    /// Offered rate in requests per second; `None` in a closed loop.
    pub qps: Option<f64>,
    /// Connections (a closed loop with a connection pool: requests in flight).
    pub connections: u32,
    /// Response body size the backend was asked for (0 when the target is not ours).
    pub response_bytes: u64,
    /// Request body size (POST when above 0).
    pub request_bytes: u64,
    /// Poisson arrivals instead of evenly spaced ones.
    pub jitter: bool,
    pub mode: LoopMode,
    pub protocol: Protocol,
    /// The swept role's CPU quota, when the experiment sweeps one.
    pub cpu: Option<CpuAllotment>,
}

impl StepParams {
    /// An open-loop step at `qps` against a target that is not a rig (a URL).
    pub fn open(qps: f64, connections: u32, protocol: Protocol) -> StepParams {
        StepParams {
            qps: Some(qps),
            connections,
            response_bytes: 0,
            request_bytes: 0,
            jitter: false,
            mode: LoopMode::Open,
            protocol,
            cpu: None,
        }
    }
}

impl Step {
    /// This step's parameters under experiment `e`.
    pub fn params(&self, e: &Experiment) -> StepParams {
        StepParams {
            qps: self.load.qps,
            connections: self.load.connections,
            // An external server chooses its responses (0: the target is not ours).
            response_bytes: match self.external {
                Some(_) => 0,
                None => self.load.response_bytes,
            },
            request_bytes: e.load.request_bytes,
            jitter: self.load.jitter,
            mode: e.load.mode,
            protocol: e.load.protocol,
            cpu: self.cpu.map(|(role, cores)| CpuAllotment { role, cores }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::Plan;

    #[test]
    fn a_swept_step_names_its_role_and_cores_and_reads_back_equal() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [serveronly]\nload:\n  qps: [250]\n  request_bytes: 64\nlimits:\n  proxy:\n    cpus: [0.5, 1]\n",
            &[],
        )
        .unwrap();
        let p = Plan::compile(&e).steps[1].params(&e);
        assert_eq!(p.qps, Some(250.0));
        assert_eq!(p.request_bytes, 64);
        assert_eq!(
            p.cpu,
            Some(CpuAllotment {
                role: Class::Proxy,
                cores: 1.0
            })
        );
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"qps":250.0,"connections":16,"response_bytes":1024,"request_bytes":64,"jitter":false,"mode":"open","protocol":"http1","cpu":{"role":"proxy","cores":1.0}}"#
        );
        assert_eq!(serde_json::from_str::<StepParams>(&text).unwrap(), p);
    }
}
