//! Per-hop attribution of a lab step: after the load, the access logs of the rig's L7 Envoys
//! are read (waiting for Envoy's flush) and joined with the requests the engine sampled
//! (`analysis::attribution::join`), giving the step's [`Attribution`].

use std::time::{Duration, Instant};

use meshbench_analysis::attribution::{join, LogIndex};
use meshbench_lab::program::envoy::access_log;
use meshbench_lab::rig::Rig;
use meshbench_results::attribution::{Attribution, HopSeen, Seen, Sent};
use meshbench_results::Class;

/// How long the logs may take to hold every sampled request (Envoy flushes every 200 ms
/// when attribution is on).
const FLUSH_WAIT: Duration = Duration::from_secs(3);

/// The step's attribution from the rig's logs and the engine's `sent` requests.
pub fn attribute(rig: &Rig, sample_rate: f64, sent: &[Sent]) -> Attribution {
    let path: Vec<HopSeen> = rig
        .roles
        .iter()
        .filter(|r| !r.name.is_backend())
        .map(|r| HopSeen {
            role: r.name,
            program: r.program.clone(),
            seen: if rig.access_logs.iter().any(|(role, _)| *role == r.name) {
                Seen::PerRequest
            } else if r.class == Class::Tunnel {
                Seen::ConnectionsOnly
            } else {
                Seen::NotLogged
            },
        })
        .collect();
    // In path order (the rig's roles are client side first).
    let logging: Vec<_> = path
        .iter()
        .filter_map(|h| rig.access_logs.iter().find(|(role, _)| *role == h.role))
        .collect();
    let deadline = Instant::now() + FLUSH_WAIT;
    let logs = loop {
        let logs: Vec<_> = logging
            .iter()
            .map(|(role, file)| (*role, access_log::read(file)))
            .collect();
        // A log may hold an earlier load's lines too (a rig measured twice).
        let complete = LogIndex::new(&logs).complete(sent);
        if complete || Instant::now() >= deadline {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    join(sample_rate, path, sent, &logs)
}
