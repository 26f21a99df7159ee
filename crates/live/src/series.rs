//! The board as Prometheus series: one list of metric families that `/metrics` encodes for a
//! scrape and remote write pushes, so both say exactly the same thing. Names and labels come
//! from [`names`](crate::names); histogram buckets from [`buckets`](crate::buckets).

use meshbench_engine::recorder::ErrorKind;

use crate::buckets::Buckets;
use crate::names::*;
use crate::{Board, StepState};

/// What kind of metric a family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One series' value now.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Counter(f64),
    Gauge(f64),
    Histogram(Buckets),
}

/// A series of a family: its labels (in a fixed order) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyMember {
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

/// A metric family: every series of one name.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The name as PromQL sees it (counters end in `_total`).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// The unit, when the name ends in one (`seconds`, `bytes`).
    pub unit: Option<&'static str>,
    pub members: Vec<FamilyMember>,
}

/// Which steps a caller wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steps {
    /// Every step on the board (a scrape: finished steps stay until they leave the board).
    All,
    /// Only steps still running (a push while the run goes).
    Running,
}

fn step_labels(s: &StepState) -> Vec<(&'static str, String)> {
    vec![
        (EXPERIMENT, s.info.scope.experiment.clone()),
        (STEP, s.info.scope.step.to_string()),
        (VARIANT, s.info.scope.variant.clone()),
    ]
}

fn with(
    mut labels: Vec<(&'static str, String)>,
    name: &'static str,
    v: String,
) -> Vec<(&'static str, String)> {
    labels.push((name, v));
    labels
}

/// Every family of the chosen steps, at wall-clock time `now_ms`. A family with no series is
/// left out.
pub fn families(board: &Board, which: Steps, now_ms: u64) -> Vec<Family> {
    let steps: Vec<&StepState> = board
        .steps
        .iter()
        .filter(|s| which == Steps::All || !s.finished)
        .collect();
    families_of(&steps, now_ms)
}

/// Every family of `steps` at `now_ms`.
pub fn families_of(steps: &[&StepState], now_ms: u64) -> Vec<Family> {
    let mut families = Families::new();
    for s in steps {
        families.add_step(s, now_ms);
    }
    families.into_vec()
}

/// The families a scrape shows, each gathering one member per step (and role).
struct Families {
    requests: Family,
    errors: Family,
    responses: Family,
    grpc: Family,
    transport: Family,
    sends: Family,
    target: Family,
    remaining: Family,
    latency: Family,
    lag: Family,
    cpu: Family,
    memory: Family,
    rx: Family,
    tx: Family,
    conns: Family,
}

impl Families {
    /// Every family, without members.
    fn new() -> Families {
        let family = |name, help, kind, unit| Family {
            name,
            help,
            kind,
            unit,
            members: Vec::new(),
        };
        Families {
            requests: family(
                REQUESTS,
                "Finished requests (responses and failures) in the measured window.",
                Kind::Counter,
                None,
            ),
            errors: family(
                ERRORS,
                "Failed requests: transport failures and statuses of 400 or more.",
                Kind::Counter,
                None,
            ),
            responses: family(
                RESPONSES,
                "Responses by HTTP status code.",
                Kind::Counter,
                None,
            ),
            grpc: family(
                GRPC_CALLS,
                "gRPC calls by gRPC status.",
                Kind::Counter,
                None,
            ),
            transport: family(
                TRANSPORT_ERRORS,
                "Requests that failed without a response, by kind.",
                Kind::Counter,
                None,
            ),
            sends: family(SENDS, "Requests put on the wire.", Kind::Counter, None),
            target: family(
                TARGET_RPS,
                "The asked rate of an open loop, requests per second.",
                Kind::Gauge,
                None,
            ),
            remaining: family(
                STEP_REMAINING,
                "Seconds of the step's load still to run.",
                Kind::Gauge,
                Some("seconds"),
            ),
            latency: family(
                LATENCY,
                "Latency from the intended send (coordinated-omission corrected).",
                Kind::Histogram,
                Some("seconds"),
            ),
            lag: family(
                SCHEDULE_LAG,
                "How late sends went out against their schedule.",
                Kind::Histogram,
                Some("seconds"),
            ),
            cpu: family(
                ROLE_CPU,
                "CPU time a role used.",
                Kind::Counter,
                Some("seconds"),
            ),
            memory: family(
                ROLE_MEMORY,
                "A role's memory: the cgroup's working set where there is one, else RSS.",
                Kind::Gauge,
                Some("bytes"),
            ),
            rx: family(
                ROLE_RX,
                "Bytes a role received.",
                Kind::Counter,
                Some("bytes"),
            ),
            tx: family(ROLE_TX, "Bytes a role sent.", Kind::Counter, Some("bytes")),
            conns: family(
                ROLE_CONNECTIONS,
                "A role's open inbound connections.",
                Kind::Gauge,
                None,
            ),
        }
    }

    /// The members of step `s` at `now_ms`: its load's, then each role's.
    fn add_step(&mut self, s: &StepState, now_ms: u64) {
        let labels = step_labels(s);
        let t = &s.totals;
        let member = |labels: Vec<(&'static str, String)>, value| FamilyMember { labels, value };
        self.requests.members.push(member(
            labels.clone(),
            Value::Counter(t.counts.total() as f64),
        ));
        self.errors.members.push(member(
            labels.clone(),
            Value::Counter(t.counts.failed() as f64),
        ));
        for (code, n) in t.counts.status_codes() {
            self.responses.members.push(member(
                with(labels.clone(), CODE, code.to_string()),
                Value::Counter(n as f64),
            ));
        }
        for (code, n) in t.counts.grpc_codes() {
            self.grpc.members.push(member(
                with(labels.clone(), GRPC_STATUS, code.name().to_string()),
                Value::Counter(n as f64),
            ));
        }
        for kind in ErrorKind::ALL {
            self.transport.members.push(member(
                with(labels.clone(), KIND, kind.name().to_string()),
                Value::Counter(t.counts.errors(kind) as f64),
            ));
        }
        self.sends
            .members
            .push(member(labels.clone(), Value::Counter(t.sends as f64)));
        if let Some(rate) = s.info.target_rps {
            self.target
                .members
                .push(member(labels.clone(), Value::Gauge(rate)));
        }
        let end_ms = s.info.started_ms + (s.info.step_secs * 1000.0) as u64;
        let left = if s.finished {
            0.0
        } else {
            end_ms.saturating_sub(now_ms) as f64 / 1000.0
        };
        self.remaining
            .members
            .push(member(labels.clone(), Value::Gauge(left)));
        self.latency.members.push(member(
            labels.clone(),
            Value::Histogram(Buckets::of_micros(&t.latency)),
        ));
        self.lag.members.push(member(
            labels.clone(),
            Value::Histogram(Buckets::of_micros(&t.lag)),
        ));
        self.add_roles(s, &labels);
    }

    /// The members of each role of step `s`, with the step's `labels`.
    fn add_roles(&mut self, s: &StepState, labels: &[(&'static str, String)]) {
        let t = &s.totals;
        let member = |labels: Vec<(&'static str, String)>, value| FamilyMember { labels, value };
        for (role, r) in &t.roles {
            let labels = with(labels.to_vec(), ROLE, role.clone());
            self.cpu.members.push(member(
                labels.clone(),
                Value::Counter(r.cpu_ns as f64 / 1e9),
            ));
            let mem = r.working_set_bytes.unwrap_or(r.rss_bytes);
            self.memory
                .members
                .push(member(labels.clone(), Value::Gauge(mem as f64)));
            self.rx
                .members
                .push(member(labels.clone(), Value::Counter(r.rx_bytes as f64)));
            self.tx
                .members
                .push(member(labels.clone(), Value::Counter(r.tx_bytes as f64)));
            self.conns
                .members
                .push(member(labels, Value::Gauge(r.connections as f64)));
        }
    }

    /// The families with members, in the order a scrape shows them.
    fn into_vec(self) -> Vec<Family> {
        let Families {
            requests,
            errors,
            responses,
            grpc,
            transport,
            sends,
            target,
            remaining,
            latency,
            lag,
            cpu,
            memory,
            rx,
            tx,
            conns,
        } = self;
        [
            requests, errors, responses, grpc, transport, sends, target, remaining, latency, lag,
            cpu, memory, rx, tx, conns,
        ]
        .into_iter()
        .filter(|f| !f.members.is_empty())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Hub, Scope, StepInfo};
    use meshbench_engine::recorder::Interval;

    #[test]
    fn counters_equal_the_seconds_added() {
        let hub = Hub::new();
        let scope = Scope {
            experiment: "e".into(),
            step: 3,
            variant: "baseline".into(),
        };
        hub.step_started(StepInfo {
            scope: scope.clone(),
            load: "closed".into(),
            target_rps: None,
            steps: 4,
            step_secs: 2.0,
            left_after_secs: 0.0,
            started_ms: 0,
        });
        let mut iv = Interval::new(0);
        for _ in 0..10 {
            iv.counts.response(200);
            iv.latency.record(500).unwrap();
        }
        iv.counts.response(503);
        iv.latency.record(900).unwrap();
        iv.counts.error(ErrorKind::Reset);
        hub.second(&scope, &iv, &[], 1_000);
        let f = families(&hub.board(), Steps::All, 1_000);
        let get = |name: &str| f.iter().find(|f| f.name == name).unwrap();
        assert_eq!(get(REQUESTS).members[0].value, Value::Counter(12.0));
        assert_eq!(get(ERRORS).members[0].value, Value::Counter(2.0));
        assert_eq!(get(RESPONSES).members.len(), 2);
        assert_eq!(get(TRANSPORT_ERRORS).members.len(), ErrorKind::ALL.len());
        assert_eq!(get(REQUESTS).members[0].labels[1], (STEP, "3".to_string()));
        let Value::Histogram(b) = &get(LATENCY).members[0].value else {
            panic!()
        };
        assert_eq!(b.count, 11);
        assert!(
            f.iter().all(|f| f.name != TARGET_RPS),
            "no rate in a closed loop"
        );
        // Running steps only: none once it finished.
        hub.step_finished(&scope);
        assert!(families(&hub.board(), Steps::Running, 2_000).is_empty());
    }
}
