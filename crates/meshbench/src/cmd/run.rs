//! `meshbench run URL`: the flags become [`LoadOptions`] (units and signs checked here, the rest
//! by [`LoadOptions::resolve`], all before any traffic), the runner measures it with a live
//! progress line, and the summary and JSON are written.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use meshbench_engine::{LoadSpec, Stop, StopAt};
use meshbench_live::Done;
use meshbench_results::{
    Arrival, CloseFirst, IdleStrategy, LoadPoint, Order, PacingSlack, Protocol, RunResult,
};
use meshbench_runner::targets::ConnectTo;
use meshbench_runner::{Body, LoadOptions, LoadSource, ProtoSource, TargetSource, TlsOptions};

use super::live::Faces;
use super::parse_duration;
use crate::cli::{
    ArrivalArg, CloseFirstArg, IdleArg, OnOff, OrderArg, PacingFlags, RequestFlags, RunArgs,
};
use crate::{exit, usage};

pub fn execute(args: RunArgs) -> Result<u8> {
    let options = load_options(&args)?;
    let spec = resolve(&options)?;
    let thresholds = super::answers::parse_thresholds(&args.thresholds)?;
    let faces = super::live::Faces::start(&args.live)?;
    let signals = super::signals::Signals::install()?;
    let fleet = super::agents::gather(&args.agents, None, &signals)?.map(Mutex::new);
    let load_source = match &fleet {
        Some(fleet) => LoadSource::Agents {
            fleet,
            options: &options,
        },
        None => LoadSource::Local,
    };
    let live = !args.quiet && std::io::stderr().is_terminal();
    let result = measure(
        load_source,
        &spec,
        signals.stop.clone(),
        live,
        faces.as_ref(),
    );
    if let Some(fleet) = &fleet {
        for note in fleet.lock().expect("the run is over").take_notes() {
            errln!("meshbench: {note}");
        }
    }
    let linger = faces.map(|faces| {
        let outcome = match &result {
            Ok(r) if r.partial => "interrupted".to_string(),
            Ok(_) => "done".to_string(),
            Err(e) => format!("failed: {e}"),
        };
        faces.finish(Done {
            report: None,
            outcome,
        })
    });
    let result = result?;
    if let Some(path) = &args.json {
        write_json(path, &result)?;
    }
    out!("{}", meshbench_report::summary(&result));
    // Every request failed (or none finished): the summary's first finding says what failed;
    // the figures are kept in the JSON, but the run measured nothing (exit 1).
    let measured_nothing = result.generator.check.measured_nothing();
    let mut passed = true;
    if !thresholds.is_empty() {
        let run = meshbench_analysis::Run::from_result("run", result)
            .map_err(|e| anyhow::anyhow!("the result's histogram: {e}"))?;
        let h = meshbench_analysis::Headline::of(meshbench_analysis::group(vec![run]));
        passed = super::answers::check_headline(&thresholds, &h);
    }
    let _ = std::io::stdout().flush();
    // Read before lingering: a Ctrl-C that ends the linger does not change how the run went.
    let code = signals.exit_code();
    // A signal that stopped the run asked to leave: the page does not linger then.
    if let Some(linger) = linger.filter(|_| code.is_none()) {
        linger.wait();
    }
    Ok(code.unwrap_or(if passed && !measured_nothing {
        exit::OK
    } else {
        exit::FAILED
    }))
}

/// Resolves options; what cannot be run is bad input (exit 2).
pub fn resolve(options: &LoadOptions) -> Result<LoadSpec> {
    options.resolve().map_err(|e| usage(e.to_string()))
}

/// Measures a spec with no system under test watched, optionally drawing a progress line and
/// feeding live faces.
fn measure(
    load_source: LoadSource,
    spec: &LoadSpec,
    stop: Stop,
    live: bool,
    faces: Option<&Faces>,
) -> Result<RunResult> {
    let mut line = ProgressLine::new(live);
    let step = faces.map(|f| {
        // Named as every load is (a run's target chooses its response size).
        let load = LoadPoint {
            offer: spec.offer,
            connections: u32::try_from(spec.connections).unwrap_or(u32::MAX),
            in_flight: spec.in_flight.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            response_bytes: None,
        };
        let info = super::live::run_step(load.rate_rps(), load.to_string(), spec.planned_secs());
        f.hub.step_started(info.clone());
        info.scope
    });
    let measured = meshbench_runner::measure(
        load_source,
        spec,
        None,
        Default::default(),
        stop,
        |l, roles| {
            line.draw(l);
            if let (Some(f), Some(scope)) = (faces, &step) {
                f.live(scope, l, roles);
            }
        },
    );
    if let (Some(f), Some(scope)) = (faces, &step) {
        f.hub.step_finished(scope);
    }
    line.clear();
    Ok(measured?.result)
}

/// `meshbench run`'s live line on stderr, at most four times a second.
pub struct ProgressLine {
    live: bool,
    last: Instant,
    drawn: bool,
}

impl ProgressLine {
    pub fn new(live: bool) -> ProgressLine {
        ProgressLine {
            live,
            last: Instant::now(),
            drawn: false,
        }
    }

    pub fn draw(&mut self, l: &meshbench_engine::Live) {
        if !self.live || self.last.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.last = Instant::now();
        self.drawn = true;
        let phase = if l.warming_up { "warm-up " } else { "" };
        eprint!(
            "\r\x1b[2K[{phase}{:5.1}s] {} req/s  {} done  {} errors  p50 {} ms  p99 {} ms",
            l.elapsed_secs,
            meshbench_report::thousands(l.last_second_rps),
            meshbench_report::thousands(l.requests),
            meshbench_report::thousands(l.errors),
            meshbench_report::ms(l.p50_us),
            meshbench_report::ms(l.p99_us),
        );
    }

    pub fn clear(&self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
        }
    }
}

pub fn write_json(path: &Path, result: &RunResult) -> Result<()> {
    let text = serde_json::to_string_pretty(result)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

fn positive(flag: &str, v: i64) -> Result<u64> {
    if v <= 0 {
        return Err(usage(format!("{flag} {v}: must be at least 1")));
    }
    Ok(v as u64)
}

/// `meshbench run`'s flags as load options. Units and signs are checked here; everything
/// else when the options are resolved.
pub fn load_options(a: &RunArgs) -> Result<LoadOptions> {
    let source = match &a.targets {
        Some(path) => TargetSource::File(path.clone()),
        None => TargetSource::Url(a.url.clone().unwrap_or_default()),
    };
    let mut o = LoadOptions::new(source);
    apply_request_flags(&mut o, &a.request)?;
    o.connections = a.connections;
    if a.concurrency.is_some() {
        errln!(
            "note: --concurrency is an old name, read as --in-flight: write --in-flight instead"
        );
    }
    let in_flight = match (a.in_flight, a.concurrency) {
        (Some(n), None) => Some(("--in-flight", n)),
        (None, Some(n)) => Some(("--concurrency", n)),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(usage(
                "give --in-flight only (--concurrency is its old name)",
            ))
        }
    };
    o.pace.in_flight = in_flight
        .map(|(flag, n)| positive(flag, n).map(|n| n as usize))
        .transpose()?;
    o.pace.rate_rps = a.rate;
    apply_pacing_flags(&mut o, &a.pacing)?;
    o.window.stop = match (&a.duration, a.requests) {
        (Some(_), Some(_)) => return Err(usage("give --duration or --requests, not both")),
        (_, Some(n)) => StopAt::Requests(positive("--requests", n)?),
        (d, None) => StopAt::Duration(parse_duration("--duration", d.as_deref().unwrap_or("10s"))?),
    };
    o.window.warmup = parse_duration("--warmup", &a.warmup)?;
    Ok(o)
}

/// The open loop's spacing and pacing flags, shared by `run` and `capacity ... --`.
pub fn apply_pacing_flags(o: &mut LoadOptions, p: &PacingFlags) -> Result<()> {
    o.pace.arrival = p.arrival.map(|a| match a {
        ArrivalArg::Uniform => Arrival::Uniform,
        ArrivalArg::Poisson => Arrival::Poisson,
    });
    o.pace.idle = p.idle_strategy.map(|i| match i {
        IdleArg::Auto => IdleStrategy::Auto,
        IdleArg::Sleep => IdleStrategy::Sleep,
        IdleArg::Hybrid => IdleStrategy::Hybrid,
        IdleArg::Spin => IdleStrategy::Spin,
    });
    o.pace.slack = match p.pacing_slack.as_deref() {
        None | Some("auto") => PacingSlack::Auto,
        Some(d) => PacingSlack::Within {
            us: parse_duration("--pacing-slack", d)?.as_micros() as u64,
        },
    };
    o.pace.send_early = p.send_early;
    Ok(())
}

/// The per-request flags shared by `run` and `capacity ... --`.
pub fn apply_request_flags(o: &mut LoadOptions, r: &RequestFlags) -> Result<()> {
    o.send.target_order = match r.target_order {
        OrderArg::RoundRobin => Order::RoundRobin,
        OrderArg::Random => Order::Random,
    };
    o.send.connect_to = r
        .connect_to
        .iter()
        .map(|c| c.parse::<ConnectTo>().map_err(|e| usage(e.to_string())))
        .collect::<Result<_>>()?;
    o.connect.protocol = if r.grpc {
        Protocol::Grpc
    } else if r.http3 {
        Protocol::Http3
    } else if r.http2 {
        Protocol::Http2
    } else {
        Protocol::Http1
    };
    o.send.grpc_payload = r.grpc_payload;
    o.connect.quic = meshbench_runner::QuicOptions {
        zero_rtt: r.h3_0rtt,
        rebind_every: r.h3_rebind_every,
    };
    o.send.grpc_proto = r.proto.clone().map(ProtoSource::File);
    o.connect.streams = positive("--streams", r.streams)? as usize;
    o.connect.tls = TlsOptions {
        insecure: r.insecure,
        ca: r.cacert.clone().map(meshbench_runner::load::CaSource::File),
        client_cert: r.cert.clone().zip(r.key.clone()),
        resume: r.tls_resume == OnOff::On,
    };
    o.connect.requests_per_connection = r
        .requests_per_connection
        .map(|n| positive("--requests-per-connection", n))
        .transpose()?;
    o.connect.close_first = r.close_first.map(|c| match c {
        CloseFirstArg::Server => CloseFirst::Server,
        CloseFirstArg::Client => CloseFirst::Client,
    });
    o.connect.source_addresses = r.source_addresses.clone();
    o.connect.connection_rate = r.connection_rate;
    o.send.method = r.method.clone();
    o.send.headers = r
        .headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .filter(|(n, _)| !n.trim().is_empty() && !n.contains(char::is_whitespace))
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| usage(format!("--header '{h}': must look like 'Name: value'")))
        })
        .collect::<Result<_>>()?;
    o.send.body = match (&r.body, r.body_size) {
        (Some(_), Some(_)) => return Err(usage("give --body or --body-size, not both")),
        (Some(b), None) => match b.strip_prefix('@') {
            Some(file) => Body::File(file.into()),
            None => Body::Bytes(b.clone().into_bytes()),
        },
        (None, Some(n)) if n < 0 => {
            return Err(usage(format!("--body-size {n}: must not be negative")))
        }
        (None, Some(n)) => Body::Size(n as u64),
        (None, None) => Body::Empty,
    };
    o.timeout = parse_duration("--timeout", &r.timeout)?;
    o.pace.threads = r
        .threads
        .map(|t| positive("--threads", t).map(|t| t as usize))
        .transpose()?;
    o.pace.seed = r.seed;
    Ok(())
}
