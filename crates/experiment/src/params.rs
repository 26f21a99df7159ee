//! A planned step's parameters ([`meshbench_results::StepParams`], the type the store keeps
//! and every reader gets back): the plan's load point under the experiment's settings, or a
//! control-plane step's cell.

use meshbench_results::{CpuAllotment, StepParams};

use crate::config::Experiment;
use crate::plan::{Step, Work};

impl Step {
    /// This step's parameters under experiment `e`.
    pub fn params(&self, e: &Experiment) -> StepParams {
        let (load, cpu) = match &self.work {
            Work::ControlPlane(scale) => return StepParams::control_plane(*scale),
            Work::Chain(v, load) => (load, v.cpu),
            Work::External(_, load) => (load, None),
        };
        StepParams {
            offer: load.offer,
            connections: load.connections,
            in_flight: load.in_flight,
            // An external server chooses its responses (0: the target is not ours).
            response_bytes: load.response_bytes.unwrap_or(0),
            request_bytes: e.load.request_bytes,
            protocol: e.load.protocol,
            cpu: cpu.map(|(role, cores)| CpuAllotment { role, cores }),
            mesh: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::Plan;
    use meshbench_results::Class;

    #[test]
    fn a_swept_step_names_its_role_and_cores_and_reads_back_equal() {
        let e = parse(
            "t.yaml",
            "name: t\ntopologies: [serveronly]\nload:\n  rate_rps: [250]\n  request_bytes: 64\nlimits:\n  proxy:\n    cpus: [0.5, 1]\n",
            &[],
        )
        .unwrap();
        let p = Plan::compile(&e).steps[1].params(&e);
        assert_eq!(p.offer.rate_rps(), Some(250.0));
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
            r#"{"rate_rps":250.0,"connections":16,"response_bytes":1024,"request_bytes":64,"arrival":"uniform","mode":"open","protocol":"http1","cpu":{"role":"proxy","cores":1.0}}"#
        );
        assert_eq!(serde_json::from_str::<StepParams>(&text).unwrap(), p);
    }
}
