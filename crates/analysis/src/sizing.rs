//! `meshbench size`: how many replicas of a proxy, with how many cores each, carry a target
//! load with headroom. The model is linear, as measured: millicores = idle + slope x RPS and
//! MiB = base + slope x RPS, fitted over an experiment's loads (or given by hand). Headroom is
//! the share of each replica's CPU kept free, so a replica runs at most at (1 - headroom) of
//! what its cores carry. Every assumption made is listed with the answer.

use meshbench_stats::Line;

/// The measured cost model of one proxy role.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Millicores against RPS.
    pub cpu: Line,
    /// MiB against RPS.
    pub memory: Line,
    /// Highest RPS measured (beyond it the model is extrapolated).
    pub measured_up_to: f64,
    /// Where the model comes from, in a phrase.
    pub source: String,
}

impl Model {
    /// A model from a single figure: `rps_per_core` requests per second per core and a fixed
    /// memory footprint.
    pub fn from_figures(rps_per_core: f64, memory_mib: f64) -> Model {
        let flat = |v: f64, slope: f64| Line {
            slope,
            intercept: v,
            r2: 1.0,
            n: 0,
        };
        Model {
            cpu: flat(0.0, 1000.0 / rps_per_core),
            memory: flat(memory_mib, 0.0),
            measured_up_to: f64::INFINITY,
            source: format!("given: {rps_per_core} RPS per core, {memory_mib} MiB per replica"),
        }
    }

    /// Requests per second `cores` carry at full use.
    pub fn rps_at(&self, cores: f64) -> f64 {
        ((cores * 1000.0 - self.cpu.intercept) / self.cpu.slope).max(0.0)
    }
}

/// The sizing asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub target_rps: f64,
    /// Share of each replica's CPU kept free (0.3 for 30 %).
    pub headroom: f64,
    pub cores_per_replica: f64,
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    pub replicas: u64,
    pub cores_per_replica: f64,
    /// RPS one replica carries at full use of its cores.
    pub replica_capacity_rps: f64,
    /// RPS each replica carries at the target.
    pub load_per_replica_rps: f64,
    /// CPU each replica uses at the target, in millicores.
    pub cpu_per_replica_mc: f64,
    pub memory_per_replica_mib: f64,
    pub total_cores: f64,
    pub assumptions: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SizingError {
    #[error("the measured CPU does not grow with load (slope {0:.4} millicores per RPS); run loads further apart")]
    Flat(f64),
    #[error("{0} cores per replica carry no load: the proxy idles at {1:.0} millicores; give more cores per replica")]
    TooSmall(f64, f64),
    #[error("--headroom must be from 0 % to below 100 %")]
    Headroom,
    #[error("--target-rps must be above 0")]
    Target,
}

pub fn size(model: &Model, req: &Request) -> Result<Sizing, SizingError> {
    if !(0.0..1.0).contains(&req.headroom) {
        return Err(SizingError::Headroom);
    }
    if req.target_rps.is_nan() || req.target_rps <= 0.0 {
        return Err(SizingError::Target);
    }
    if model.cpu.slope.is_nan() || model.cpu.slope <= 0.0 {
        return Err(SizingError::Flat(model.cpu.slope));
    }
    let capacity = model.rps_at(req.cores_per_replica);
    if capacity <= 0.0 {
        return Err(SizingError::TooSmall(
            req.cores_per_replica,
            model.cpu.intercept,
        ));
    }
    let usable = capacity * (1.0 - req.headroom);
    let replicas = (req.target_rps / usable).ceil().max(1.0) as u64;
    let per_replica = req.target_rps / replicas as f64;
    let mut assumptions = vec![
        format!("model: {}", model.source),
        format!(
            "CPU grows linearly with load: {:.0} millicores idle + {:.3} vCPU per 1000 RPS{}",
            model.cpu.intercept.max(0.0),
            model.cpu.slope,
            if model.cpu.n > 0 {
                format!(" (fit over {} loads, r² {:.3})", model.cpu.n, model.cpu.r2)
            } else {
                String::new()
            }
        ),
        format!(
            "headroom {:.0} %: each replica runs at most at {:.0} % of the {:.0} RPS its {} cores carry",
            req.headroom * 100.0,
            (1.0 - req.headroom) * 100.0,
            capacity,
            req.cores_per_replica
        ),
        "load is spread evenly over the replicas; no spare replica for a failure (add one for N+1)"
            .to_string(),
        "only the proxy's own CPU and memory are counted, not the application's".to_string(),
    ];
    if capacity > model.measured_up_to * 1.1 {
        assumptions.push(format!(
            "extrapolated: one replica's capacity ({capacity:.0} RPS) is beyond the highest load measured ({:.0} RPS)",
            model.measured_up_to
        ));
    }
    Ok(Sizing {
        replicas,
        cores_per_replica: req.cores_per_replica,
        replica_capacity_rps: capacity,
        load_per_replica_rps: per_replica,
        cpu_per_replica_mc: model.cpu.at(per_replica),
        memory_per_replica_mib: model.memory.at(per_replica),
        total_cores: replicas as f64 * req.cores_per_replica,
        assumptions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_with_headroom() {
        // 4k RPS per core, 25k RPS target, 30 % headroom: 25000 / (4000 x 0.7) = 8.9 -> 9.
        let m = Model::from_figures(4000.0, 50.0);
        let s = size(
            &m,
            &Request {
                target_rps: 25_000.0,
                headroom: 0.3,
                cores_per_replica: 1.0,
            },
        )
        .unwrap();
        assert_eq!(s.replicas, 9);
        assert!((s.replica_capacity_rps - 4000.0).abs() < 1e-9);
        assert!((s.load_per_replica_rps - 25_000.0 / 9.0).abs() < 1e-9);
        assert!((s.cpu_per_replica_mc - 694.444).abs() < 0.01);
        assert_eq!(s.memory_per_replica_mib, 50.0);
        // Two cores per replica halve the count (rounded up).
        let s2 = size(
            &m,
            &Request {
                cores_per_replica: 2.0,
                ..Request {
                    target_rps: 25_000.0,
                    headroom: 0.3,
                    cores_per_replica: 1.0,
                }
            },
        )
        .unwrap();
        assert_eq!(s2.replicas, 5);
    }

    #[test]
    fn idle_cost_lowers_what_a_replica_carries() {
        let m = Model {
            cpu: Line {
                slope: 0.5, // 0.5 vCPU per 1000 RPS
                intercept: 100.0,
                r2: 0.99,
                n: 4,
            },
            memory: Line {
                slope: 0.01,
                intercept: 40.0,
                r2: 0.9,
                n: 4,
            },
            measured_up_to: 2000.0,
            source: "test".into(),
        };
        // One core: (1000 - 100) / 0.5 = 1800 RPS.
        let s = size(
            &m,
            &Request {
                target_rps: 5000.0,
                headroom: 0.0,
                cores_per_replica: 1.0,
            },
        )
        .unwrap();
        assert_eq!(s.replicas, 3);
        assert!((s.replica_capacity_rps - 1800.0).abs() < 1e-9);
        assert!(!s.assumptions.iter().any(|a| a.starts_with("extrapolated")));
        let big = size(
            &m,
            &Request {
                target_rps: 5000.0,
                headroom: 0.0,
                cores_per_replica: 4.0,
            },
        )
        .unwrap();
        assert!(big
            .assumptions
            .iter()
            .any(|a| a.starts_with("extrapolated")));
        let bad = |r: Request| size(&m, &r).unwrap_err();
        assert_eq!(
            bad(Request {
                target_rps: 1.0,
                headroom: 1.0,
                cores_per_replica: 1.0
            }),
            SizingError::Headroom
        );
        assert!(matches!(
            bad(Request {
                target_rps: 1.0,
                headroom: 0.1,
                cores_per_replica: 0.05
            }),
            SizingError::TooSmall(..)
        ));
    }
}
