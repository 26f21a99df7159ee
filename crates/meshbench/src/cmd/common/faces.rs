//! The live faces a command was asked for (`--metrics-listen`, `--prometheus-remote-write`,
//! `--web`), started before the load and fed from it: the command's progress callbacks hand
//! every completed second to one [`Hub`], which each face reads on its own thread. At the end,
//! [`Faces::finish`] tells the faces how the run ended and hands back a [`Linger`]: the live
//! page kept up for `--web-linger` after the command has printed its results.

use std::time::{Duration, Instant};

use anyhow::Result;
use meshbench_lab::sampler::now_ms;
use meshbench_live::metrics::MetricsServer;
use meshbench_live::remote_write::{RemoteWriteConfig, RemoteWriter};
use meshbench_live::web::WebServer;
use meshbench_live::{listen_addr, Done, Hub, Scope, StepInfo};

use crate::cli::LiveFlags;
use crate::usage;

use super::progress::human_secs;
use super::signals::Signals;
use super::units::parse_duration;

/// How long the last remote-write push may take once the run is over.
const FINAL_PUSH: Duration = Duration::from_secs(5);

/// The faces started for one command; `None` of each when not asked for.
pub struct Faces {
    pub hub: Hub,
    metrics: Option<MetricsServer>,
    /// `--metrics-linger`: how long the finished run waits for a scrape of its final values.
    metrics_linger: Duration,
    remote: Option<RemoteWriter>,
    web: Option<WebServer>,
    /// `--web-linger`: how long the page stays up after the run.
    linger: Duration,
}

impl Faces {
    /// Starts what `flags` ask for; a bad address or URL is bad input (exit 2).
    pub fn start(flags: &LiveFlags) -> Result<Option<Faces>> {
        let metrics_linger = parse_duration("--metrics-linger", &flags.metrics_linger)?;
        if flags.metrics_listen.is_none() && !metrics_linger.is_zero() {
            return Err(usage("--metrics-linger needs --metrics-listen ADDR"));
        }
        if flags.metrics_listen.is_none()
            && flags.prometheus_remote_write.is_none()
            && flags.web.is_none()
        {
            if !flags.remote_write_headers.is_empty() {
                return Err(usage(
                    "--prometheus-remote-write-header needs --prometheus-remote-write URL",
                ));
            }
            return Ok(None);
        }
        let hub = Hub::new();
        let addr =
            |flag: &str, text: &str| listen_addr(text).map_err(|e| usage(format!("{flag}: {e}")));
        let metrics = match &flags.metrics_listen {
            Some(a) => {
                let server = MetricsServer::start(addr("--metrics-listen", a)?, hub.clone())?;
                errln!("metrics: http://{}/metrics", server.local_addr());
                Some(server)
            }
            None => None,
        };
        let remote = match &flags.prometheus_remote_write {
            Some(url) => {
                let headers = flags
                    .remote_write_headers
                    .iter()
                    .map(|h| {
                        h.split_once(':')
                            .filter(|(n, _)| !n.trim().is_empty())
                            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                            .ok_or_else(|| {
                                usage(format!(
                                    "--prometheus-remote-write-header '{h}': must look like 'Name: value'"
                                ))
                            })
                    })
                    .collect::<Result<_>>()?;
                let config = RemoteWriteConfig {
                    url: url.clone(),
                    headers,
                    interval: Duration::from_secs(1),
                    ..RemoteWriteConfig::default()
                };
                Some(RemoteWriter::start(config, hub.clone()).map_err(|e| usage(e.to_string()))?)
            }
            None => None,
        };
        let (web, linger) = match &flags.web {
            Some(a) => {
                let addr = addr("--web", a)?;
                let linger = match flags.web_linger.trim() {
                    "" => Duration::ZERO,
                    text => parse_duration("--web-linger", text)?,
                };
                let server = WebServer::start(addr, hub.clone())?;
                errln!("live view: http://{}/", server.local_addr());
                (Some(server), linger)
            }
            None => (None, Duration::ZERO),
        };
        Ok(Some(Faces {
            hub,
            metrics,
            metrics_linger,
            remote,
            web,
            linger,
        }))
    }

    /// Whether the live page is served (and so whether a report is worth linking).
    pub fn has_web(&self) -> bool {
        self.web.is_some()
    }

    /// The run is over: the last push goes out (stale markers included), `/metrics` waits up
    /// to `--metrics-linger` for a scrape of the final values and stops, the page shows the end
    /// and links the report. The page stays up for as long as the returned [`Linger`] is kept,
    /// and `--web-linger` more with [`Linger::wait`].
    pub fn finish(self, done: Done) -> Linger {
        self.hub.finished(done);
        if let Some(remote) = self.remote {
            let report = remote.finish(FINAL_PUSH);
            if report.samples_dropped > 0 {
                errln!(
                    "warning: remote write: {} samples pushed, {} dropped; last error: {}",
                    report.samples_sent + report.histograms_sent,
                    report.samples_dropped,
                    report.last_error.as_deref().unwrap_or("none")
                );
            }
            if let Some(why) = report.natives_refused {
                errln!(
                    "note: remote write: the receiver refused native histograms ({why}); \
                     classic buckets only (Prometheus takes them with \
                     --enable-feature=native-histograms)"
                );
            }
        }
        if let Some(m) = self.metrics {
            if !self.metrics_linger.is_zero() && !m.wait_scraped(self.metrics_linger) {
                errln!(
                    "warning: metrics: no scrape read the final values within {}",
                    humantime::format_duration(self.metrics_linger)
                );
            }
            m.stop();
        }
        Linger {
            web: self.web,
            time: self.linger,
        }
    }
}

/// The live page after the run: served while this is kept, stopped when it is dropped.
#[must_use = "dropping it stops the live page at once; call wait() for --web-linger"]
pub struct Linger {
    web: Option<WebServer>,
    time: Duration,
}

impl Linger {
    /// Keeps serving the page for `--web-linger`, or until Ctrl-C or SIGTERM (which then
    /// only ends the wait: the run's exit code stands), then stops it. Callers skip this
    /// when a signal already stopped the run: that signal asked to leave.
    pub fn wait(self) {
        let Some(web) = self.web else {
            return;
        };
        if self.time.is_zero() {
            web.stop();
            return;
        }
        let signals = match Signals::install() {
            Ok(s) => s,
            Err(e) => {
                errln!("warning: --web-linger: cannot watch for Ctrl-C ({e}); not lingering");
                web.stop();
                return;
            }
        };
        errln!(
            "live view: http://{}/ stays up for {} (--web-linger); Ctrl-C ends it",
            web.local_addr(),
            human_secs(self.time.as_secs_f64())
        );
        let until = Instant::now() + self.time;
        while !signals.stop.requested() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
        web.stop();
    }
}

/// The scope and step of `meshbench run`: one step of an experiment called `run`.
pub fn run_step(target_rps: Option<f64>, load: String, step_secs: f64) -> StepInfo {
    StepInfo {
        scope: Scope {
            experiment: "run".into(),
            step: 0,
            variant: "url".into(),
        },
        load,
        target_rps,
        steps: 1,
        step_secs,
        left_after_secs: 0.0,
        started_ms: now_ms(),
    }
}
