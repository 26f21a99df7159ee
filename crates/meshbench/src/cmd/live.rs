//! The live faces a command was asked for (`--metrics-listen`, `--prometheus-remote-write`,
//! `--web`), started before the load and fed from it: the command's progress callbacks hand
//! every completed second to one [`Hub`], which each face reads on its own thread.

use std::time::Duration;

use anyhow::Result;
use meshbench_engine::Live;
use meshbench_lab::sampler::{now_ms, Sample};
use meshbench_live::metrics::MetricsServer;
use meshbench_live::remote_write::{RemoteWriteConfig, RemoteWriter};
use meshbench_live::web::WebServer;
use meshbench_live::{listen_addr, Done, Hub, Scope, StepInfo};

use crate::cli::LiveFlags;
use crate::usage;

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
}

impl Faces {
    /// Starts what `flags` ask for; a bad address or URL is bad input (exit 2).
    pub fn start(flags: &LiveFlags) -> Result<Option<Faces>> {
        let metrics_linger = super::parse_duration("--metrics-linger", &flags.metrics_linger)?;
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
                eprintln!("metrics: http://{}/metrics", server.local_addr());
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
        let web = match &flags.web {
            Some(a) => {
                let server = WebServer::start(addr("--web", a)?, hub.clone())?;
                eprintln!("live view: http://{}/", server.local_addr());
                Some(server)
            }
            None => None,
        };
        Ok(Some(Faces {
            hub,
            metrics,
            metrics_linger,
            remote,
            web,
        }))
    }

    /// Every second in `live` into the hub.
    pub fn live(&self, scope: &Scope, live: &Live, roles: &[(String, Sample)]) {
        if live.seconds.is_empty() {
            return;
        }
        let now = now_ms();
        for second in live.seconds {
            self.hub.second(scope, second, roles, now);
        }
    }

    /// The run is over: the last push goes out (stale markers included), `/metrics` waits up
    /// to `--metrics-linger` for a scrape of the final values, the page shows the end and
    /// links the report; the servers stop with the process.
    pub fn finish(self, done: Done) {
        self.hub.finished(done);
        if let Some(remote) = self.remote {
            let report = remote.finish(FINAL_PUSH);
            if report.samples_dropped > 0 {
                eprintln!(
                    "warning: remote write: {} samples pushed, {} dropped; last error: {}",
                    report.samples_sent + report.histograms_sent,
                    report.samples_dropped,
                    report.last_error.as_deref().unwrap_or("none")
                );
            }
            if let Some(why) = report.natives_refused {
                eprintln!(
                    "note: remote write: the receiver refused native histograms ({why}); \
                     classic buckets only (Prometheus takes them with \
                     --enable-feature=native-histograms)"
                );
            }
        }
        if let Some(m) = self.metrics {
            if !self.metrics_linger.is_zero() && !m.wait_scraped(self.metrics_linger) {
                eprintln!(
                    "warning: metrics: no scrape read the final values within {}",
                    humantime::format_duration(self.metrics_linger)
                );
            }
            m.stop();
        }
        if let Some(w) = self.web {
            w.stop();
        }
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
