//! Per-hop attribution of a lab step: after the load, the access logs of the rig's L7 Envoys
//! are read (waiting for Envoy's flush) and joined with the requests the engine sampled
//! (`analysis::attribution::join`), giving the step's [`Attribution`]. The wait for the logs,
//! [`read_until_complete`], is also a cluster step's (`cluster::attribution`).

use std::time::{Duration, Instant};

use meshbench_analysis::attribution::{join, LogIndex};
use meshbench_lab::program::envoy::access_log;
use meshbench_lab::rig::Rig;
use meshbench_results::attribution::{Attribution, HopSeen, Logged, Seen, Sent};
use meshbench_results::{ChainRole, Class, Stop};

/// How long the logs may take to hold every sampled request (Envoy flushes every 200 ms
/// when attribution is on).
const FLUSH_WAIT: Duration = Duration::from_secs(3);

/// How often the lab's logs are read again while they lack a request.
const READ_EVERY: Duration = Duration::from_millis(100);

/// Each hop's logged lines, in path order.
pub(crate) type HopLogs = Vec<(ChainRole, Vec<Logged>)>;

/// Reads the hops' logs with `read` until they hold every request of `sent` (a log may hold
/// an earlier load's lines too), `wait` has passed, or a stop is asked; between reads it
/// sleeps `every`, waking for a stop. What the last read gave: the logs, and what else `read`
/// returned with them.
pub(crate) fn read_until_complete<T>(
    sent: &[Sent],
    (wait, every): (Duration, Duration),
    stop: &Stop,
    mut read: impl FnMut() -> (HopLogs, T),
) -> (HopLogs, T) {
    let deadline = Instant::now() + wait;
    loop {
        let (logs, more) = read();
        let complete = LogIndex::new(&logs).complete(sent);
        if complete || Instant::now() >= deadline || !stop.sleep(every) {
            return (logs, more);
        }
    }
}

/// The step's attribution from the rig's logs and the engine's `sent` requests; a stop ends
/// the wait for the logs.
pub fn attribute(rig: &Rig, sample_rate: f64, sent: &[Sent], stop: &Stop) -> Attribution {
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
    let (logs, ()) = read_until_complete(sent, (FLUSH_WAIT, READ_EVERY), stop, || {
        let logs = logging
            .iter()
            .map(|(role, file)| (*role, access_log::read(file)))
            .collect();
        (logs, ())
    });
    join(sample_rate, path, sent, &logs)
}
