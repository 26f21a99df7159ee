//! A step of an `external` variant: a system meshbench does not start. The load is exactly a
//! `meshbench run` of the variant's URL with the file's load (the same [`LoadOptions`] a lab
//! step builds, through [`measure`]); then, after the load, the variant's roles are read from
//! Prometheus over the steady window ([`read`]), each into the [`RoleUsage`] a lab role gets.
//! Whatever goes wrong with Prometheus leaves the step stored with its load figures and the
//! roles' figures marked missing, with one warning line each through the [`Observer`]; the
//! reading is bounded in time (a query at most `query_timeout_secs`, the step's reading at
//! most three times that) and never starts before the load has ended.
//!
//! Stored like any step: topology `external`, the variant's name as the variant, its roles'
//! use, and their points on the sample grid as samples.

pub mod prometheus;
pub mod read;

use std::time::{Duration, Instant};

use meshbench_experiment::config::{parse_cpuset, Experiment};
use meshbench_experiment::external::{External, Role, Variant};
use meshbench_lab::sampler;
use meshbench_store::StepRecord;

use crate::load::{Body, LoadOptions, ProtoSource, TargetSource};
use crate::observer::{Observer, StepAt};
use crate::steps::{load_for, resolve_at};
use crate::targets::proto::Proto;
use crate::{measure, Lab};
use meshbench_results::{Protocol, StepFailure};

use prometheus::Prometheus;
use read::{read_roles, Reading, Window};

/// The load of an external step: the file's load at the step's load point, at the URL.
pub fn load_options(e: &Experiment, at: &StepAt, v: &Variant) -> LoadOptions {
    let mut o = load_for(e, at.step, TargetSource::Url(v.url.trim().to_string()));
    o.send.headers = v
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    o.connect.tls.insecure = v.insecure;
    if let Some(proto) = &v.proto {
        o.send.grpc_proto = Some(ProtoSource::File(proto.clone()));
    }
    if let Some(body) = &v.body {
        o.send.body = Body::Bytes(body.clone().into_bytes());
        if o.connect.protocol != Protocol::Grpc {
            o.send.method = "POST".into();
        }
    }
    o
}

/// Every external variant's request that cannot be built, one line each, before anything
/// runs: its `.proto` does not compile, has no method the URL's path names, or its body is not
/// JSON of the method's request message. (The rest of a request is checked when its step
/// starts, as for `meshbench run`; a target that cannot be reached is a failed step.)
pub fn request_problems(e: &Experiment) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(x) = &e.external else {
        return problems;
    };
    for (i, v) in x.variants.iter().enumerate() {
        let Some(file) = &v.proto else { continue };
        let at = format!("external.variants[{i}]");
        let path = url::Url::parse(v.url.trim())
            .map(|u| u.path().to_string())
            .unwrap_or_default();
        let built = Proto::compile(file, &[]).and_then(|proto| {
            let method = proto.method(&path)?;
            proto.request(&method, v.body.as_deref().unwrap_or("").as_bytes())
        });
        if let Err(why) = built {
            problems.push(format!("{at}: {why}"));
        }
    }
    problems
}

/// The longest the queries wait after the window for Prometheus to have stored its last
/// scrapes (a scrape stamped inside the window is stored once it has been read).
const SETTLE_MAX: Duration = Duration::from_secs(2);

impl Lab {
    /// Runs one external step; every failure ends up in the record (a step the load could not
    /// reach fails; Prometheus' failures only mark roles missing).
    pub(crate) fn run_external_step(
        &self,
        e: &Experiment,
        x: &External,
        at: &StepAt,
        stop: &meshbench_engine::Stop,
        observer: &mut dyn Observer,
    ) -> StepRecord {
        let step = at.step;
        let mut record = self.new_record(e, step);
        let name = step.external.as_deref().unwrap_or_default();
        let Some(variant) = x.variant(name) else {
            record.fail(StepFailure::NoSuchVariant(name.to_string()));
            return record;
        };
        let options = load_options(e, at, variant);
        let load = match resolve_at(&options, at) {
            Ok(load) => load,
            Err(failure) => {
                record.fail(failure);
                return record;
            }
        };
        let client_cpus = e.limits.client.cpuset.as_deref().and_then(parse_cpuset);
        let measured = measure(
            self.load_source(&options),
            &load,
            None,
            crate::ClientPlace {
                cpus: client_cpus.as_deref(),
                netns: None,
            },
            stop.clone(),
            |l, roles| observer.live(at, l, roles),
        );
        let measured = match measured {
            Ok(m) => m,
            Err(err) => {
                record.fail(StepFailure::LoadGeneratorFailed(err.to_string()));
                return record;
            }
        };
        let window_ms = measured.window_ms;
        record.set_result(measured.result);
        let reading = read_window(e, x, &variant.roles, window_ms, stop);
        for w in &reading.warnings {
            observer.warning(&format!("{}: {w}", at.tag(&record.variant)));
        }
        for r in reading.roles {
            if !r.samples.is_empty() {
                record.samples.insert(r.usage.role.clone(), r.samples);
            }
            record.usage.push(r.usage);
        }
        record
    }
}

/// Reads `roles` from the Prometheus of `x` over a step's steady window (`window_ms`, wall
/// clock), once it has had time to store the window's last scrapes; nothing when there is no
/// role or no window.
pub(crate) fn read_window(
    e: &Experiment,
    x: &External,
    roles: &[Role],
    (from_ms, to_ms): (u64, u64),
    stop: &meshbench_engine::Stop,
) -> Reading {
    if roles.is_empty() || to_ms <= from_ms {
        return Reading::default();
    }
    let window = Window {
        from_ms,
        to_ms,
        step_ms: e.sample_interval_ms,
        rate_window_ms: x.window_ms(e.sample_interval_ms),
    };
    settle(x, to_ms, stop);
    let timeout = Duration::from_secs_f64(x.query_timeout_secs);
    let prom = Prometheus::new(&x.prometheus_url, timeout, 3 * timeout);
    read_roles(&prom, roles, &window)
}

/// Waits until Prometheus has had time to store the last scrapes inside the window: one scrape
/// interval after it, at most [`SETTLE_MAX`], less what the load's drain already took; at
/// once when a stop was asked.
fn settle(x: &External, to_ms: u64, stop: &meshbench_engine::Stop) {
    let wait = Duration::from_secs_f64(x.scrape_interval_secs).min(SETTLE_MAX);
    let until_ms = to_ms + wait.as_millis() as u64;
    let end = Instant::now() + Duration::from_millis(until_ms.saturating_sub(sampler::now_ms()));
    while Instant::now() < end && !stop.requested() {
        std::thread::sleep(Duration::from_millis(20));
    }
}
