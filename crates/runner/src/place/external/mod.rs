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

use std::time::Duration;

use meshbench_experiment::config::Experiment;
use meshbench_experiment::external::{External, ExternalRole, Variant};
use meshbench_experiment::{ExternalVariant, Step};
use meshbench_lab::sampler;
use meshbench_results::{LoadPoint, Protocol, Sample, StepFailure, UsageReader, UsageSource};

use crate::load::{Body, LoadOptions, ProtoSource, TargetSource};
use crate::load_window::Measured;
use crate::measured::{Place, Realised, RoleReading, StepContext};
use crate::observer::Observer;
use crate::step_load::load_for;
use crate::targets::proto::Proto;

use prometheus::Prometheus;
use read::{read_roles, Reading, Window};

/// The load of an external step: the file's load at the step's load point, at the URL.
pub fn load_options(e: &Experiment, step: &Step, load: &LoadPoint, v: &Variant) -> LoadOptions {
    let mut o = load_for(e, step, load, TargetSource::Url(v.url.trim().to_string()));
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

/// An external variant as the place of a step: nothing to start; the load aimed at its URL,
/// its roles read from Prometheus after the load (a step the load could not reach fails;
/// Prometheus' failures only mark roles missing).
pub(crate) struct ExternalPlace<'a> {
    /// The variant, as the plan found it in the file.
    pub external: &'a ExternalVariant,
    /// The step's load point.
    pub load: &'a LoadPoint,
}

/// An external variant found, with its section.
struct ExternalStep<'a> {
    section: &'a External,
    variant: &'a Variant,
    load: LoadPoint,
}

impl Place for ExternalPlace<'_> {
    fn realise<'s>(
        &'s self,
        _step: &StepContext<'s>,
        _observer: &mut dyn Observer,
    ) -> Result<Box<dyn Realised + 's>, StepFailure> {
        Ok(Box::new(ExternalStep {
            section: self.external.section(),
            variant: self.external.variant(),
            load: *self.load,
        }))
    }
}

impl Realised for ExternalStep<'_> {
    fn load_options(&self, step: &StepContext<'_>) -> LoadOptions {
        load_options(step.e, step.at.step, &self.load, self.variant)
    }

    fn roles(
        &mut self,
        step: &StepContext<'_>,
        measured: &mut Measured,
        observer: &mut dyn Observer,
    ) -> Vec<RoleReading> {
        let reading = read_window(
            step.e,
            self.section,
            &self.variant.roles,
            measured.window_ms,
            step.stop,
        );
        warn_each(&reading, step, observer);
        reading
            .roles
            .into_iter()
            .map(|r| RoleReading::read(r, None))
            .collect()
    }

    /// Prometheus, as finely as it scrapes.
    fn usage_source(&self, _kept: &[&[Sample]]) -> UsageSource {
        UsageSource {
            reader: UsageReader::Prometheus,
            every_ms: Some((self.section.scrape_interval_secs * 1000.0).round() as u64),
        }
    }
}

/// Each warning of a reading, tagged with the step.
pub(crate) fn warn_each(reading: &Reading, step: &StepContext<'_>, observer: &mut dyn Observer) {
    let tag = step.at.tag(&step.at.step.variant());
    for w in &reading.warnings {
        observer.warning(&format!("{tag}: {w}"));
    }
}

/// Reads `roles` from the Prometheus of `x` over a step's steady window (`window_ms`, wall
/// clock), once it has had time to store the window's last scrapes; nothing when there is no
/// role or no window.
pub(crate) fn read_window(
    e: &Experiment,
    x: &External,
    roles: &[ExternalRole],
    window_ms: (u64, u64),
    stop: &meshbench_engine::Stop,
) -> Reading {
    let timeout = Duration::from_secs_f64(x.query_timeout_secs);
    let prom = || Prometheus::new(&x.prometheus_url, timeout, 3 * timeout);
    read_window_from(prom, e, x, roles, window_ms, stop)
}

/// [`read_window`] from `prom` (a cluster's Prometheus, which may be asked through the API
/// server), made once the window's last scrapes are stored.
pub(crate) fn read_window_from(
    prom: impl FnOnce() -> Prometheus,
    e: &Experiment,
    x: &External,
    roles: &[ExternalRole],
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
    read_roles(&prom(), roles, &window)
}

/// Waits until Prometheus has had time to store the last scrapes inside the window: one scrape
/// interval after it, at most [`SETTLE_MAX`], less what the load's drain already took; at
/// once when a stop was asked.
fn settle(x: &External, to_ms: u64, stop: &meshbench_engine::Stop) {
    let wait = Duration::from_secs_f64(x.scrape_interval_secs).min(SETTLE_MAX);
    let until_ms = to_ms + wait.as_millis() as u64;
    stop.sleep(Duration::from_millis(
        until_ms.saturating_sub(sampler::now_ms()),
    ));
}
