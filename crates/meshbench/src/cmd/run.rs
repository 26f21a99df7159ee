//! `meshbench run URL`: resolves the flags into a [`LoadSpec`] (every check happens here, before
//! any traffic), runs it with a live progress line, prints the summary, writes the JSON.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use meshbench_engine::pacer::Arrival;
use meshbench_engine::{ConnSpec, LoadSpec, Mode, Order, Protocol, RequestSpec, RunResult, StopAt};
use meshbench_net::tls::ClientTlsOptions;

use super::parse_duration;
use crate::cli::{ArrivalArg, OnOff, OrderArg, RunArgs};
use crate::targets::{self, BuildOptions, ConnectTo, Source};
use crate::{exit, usage};

pub fn execute(args: RunArgs) -> Result<u8> {
    let spec = resolve(&args)?;
    let thresholds = super::answers::parse_thresholds(&args.thresholds)?;
    let signals = super::signals::Signals::install()?;
    let live = !args.quiet && std::io::stderr().is_terminal();
    let result = run_spec(&spec, signals.stop.clone(), live)?;
    if let Some(path) = &args.json {
        write_json(path, &result)?;
    }
    print!("{}", meshbench_report::summary(&result));
    let mut passed = true;
    if !thresholds.is_empty() {
        let run = meshbench_analysis::Run::from_result("run", result)
            .map_err(|e| anyhow::anyhow!("the result's histogram: {e}"))?;
        let h = meshbench_analysis::Headline::of(meshbench_analysis::group(vec![run]));
        passed = super::answers::check_headline(&thresholds, &h);
    }
    let _ = std::io::stdout().flush();
    Ok(signals
        .exit_code()
        .unwrap_or(if passed { exit::OK } else { exit::FAILED }))
}

/// Runs a spec, optionally drawing a progress line on stderr.
pub fn run_spec(spec: &LoadSpec, stop: Arc<AtomicBool>, live: bool) -> Result<RunResult> {
    let mut last_draw = Instant::now();
    let mut drawn = false;
    let result = meshbench_engine::run(spec, stop, |l| {
        if !live || last_draw.elapsed() < Duration::from_millis(250) {
            return;
        }
        last_draw = Instant::now();
        drawn = true;
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
    })?;
    if drawn {
        eprint!("\r\x1b[2K");
    }
    Ok(result)
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

/// Checks every flag and builds the run. All checks happen before any traffic.
pub fn resolve(a: &RunArgs) -> Result<LoadSpec> {
    if a.connections == 0 {
        return Err(usage("--connections 0: must be at least 1"));
    }
    let mode = match (a.rate, a.arrival) {
        (None, Some(_)) => {
            return Err(usage(
                "--arrival applies to an open loop only; add --rate RPS",
            ));
        }
        (None, None) => Mode::Closed,
        (Some(r), arrival) => {
            if !r.is_finite() || r <= 0.0 {
                return Err(usage(format!(
                    "--rate {r}: must be a positive number of requests per second"
                )));
            }
            Mode::Open {
                rate_rps: r,
                arrival: match arrival {
                    Some(ArrivalArg::Poisson) => Arrival::Poisson,
                    _ => Arrival::Uniform,
                },
            }
        }
    };
    let stop = match (&a.duration, a.requests) {
        (Some(_), Some(_)) => return Err(usage("give --duration or --requests, not both")),
        (_, Some(n)) => StopAt::Requests(positive("--requests", n)?),
        (d, None) => {
            let d = parse_duration("--duration", d.as_deref().unwrap_or("10s"))?;
            if d.is_zero() {
                return Err(usage("--duration must be longer than 0"));
            }
            StopAt::Duration(d)
        }
    };
    let warmup = parse_duration("--warmup", &a.warmup)?;
    let timeout = parse_duration("--timeout", &a.timeout)?;
    if timeout.is_zero() {
        return Err(usage("--timeout must be longer than 0"));
    }
    let threads = match a.threads {
        Some(t) => positive("--threads", t)? as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let method = a.method.trim().to_ascii_uppercase();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
        return Err(usage(format!(
            "--method '{}': not an HTTP method such as GET or POST",
            a.method
        )));
    }
    let mut headers = Vec::new();
    for h in &a.headers {
        let (name, value) = h
            .split_once(':')
            .filter(|(n, _)| !n.trim().is_empty() && !n.contains(char::is_whitespace))
            .ok_or_else(|| usage(format!("--header '{h}': must look like 'Name: value'")))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let body: Vec<u8> = match (&a.body, a.body_size) {
        (Some(_), Some(_)) => return Err(usage("give --body or --body-size, not both")),
        (Some(b), None) => match b.strip_prefix('@') {
            Some(file) => std::fs::read(file)
                .map_err(|e| usage(format!("--body @{file}: cannot read the file: {e}")))?,
            None => b.clone().into_bytes(),
        },
        (None, Some(n)) if n < 0 => {
            return Err(usage(format!("--body-size {n}: must not be negative")))
        }
        (None, Some(n)) => vec![b'x'; n as usize],
        (None, None) => Vec::new(),
    };
    let concurrency = match a.concurrency {
        None => None,
        Some(_) if a.rate.is_some() => {
            return Err(usage(
                "--concurrency caps a closed loop; an open loop's rate sets its own (drop --rate or --concurrency)",
            ))
        }
        Some(n) => {
            let n = positive("--concurrency", n)? as usize;
            if n > a.connections * a.streams.max(1) as usize {
                return Err(usage(format!(
                    "--concurrency {n}: more than the {} connections (x streams) can carry; raise --connections",
                    a.connections
                )));
            }
            Some(n)
        }
    };
    let streams = positive("--streams", a.streams)? as usize;
    if streams > 1 && !a.http2 {
        return Err(usage("--streams applies to HTTP/2 only; add --http2"));
    }
    let requests_per_connection = a
        .requests_per_connection
        .map(|n| positive("--requests-per-connection", n))
        .transpose()?;
    if let Some(r) = a.connection_rate {
        if !r.is_finite() || r <= 0.0 {
            return Err(usage(format!(
                "--connection-rate {r}: must be a positive number of connections per second"
            )));
        }
    }
    let connect_to = a
        .connect_to
        .iter()
        .map(|c| c.parse::<ConnectTo>().map_err(usage))
        .collect::<Result<Vec<_>>>()?;
    let protocol = if a.http2 {
        Protocol::Http2
    } else {
        Protocol::Http1
    };
    let (sources, description) = sources(a, &method, &headers, body.into())?;
    let built = targets::build(
        &sources,
        &BuildOptions {
            protocol,
            order: match a.target_order {
                OrderArg::RoundRobin => Order::RoundRobin,
                OrderArg::Random => Order::Random,
            },
            connect_to: &connect_to,
        },
    )?;
    let tls_flags = a.insecure || a.cacert.is_some() || a.cert.is_some();
    if !built.tls && tls_flags {
        return Err(usage(
            "--insecure, --cacert and --cert apply to https:// URLs only",
        ));
    }
    let tls_resume = a.tls_resume == OnOff::On;
    let tls = if built.tls {
        let alpn = match protocol {
            Protocol::Http1 => vec![b"http/1.1".to_vec()],
            Protocol::Http2 => vec![b"h2".to_vec()],
        };
        let opts = ClientTlsOptions {
            insecure: a.insecure,
            ca_file: a.cacert.clone(),
            client_cert: a.cert.clone().zip(a.key.clone()),
            alpn,
            resume: tls_resume,
        };
        Some(meshbench_net::tls::client_config(&opts).map_err(|e| usage(e.to_string()))?)
    } else {
        None
    };
    let first_body = sources.first().map_or(0, |s| s.body.len());
    Ok(LoadSpec {
        request: RequestSpec {
            method,
            url: description,
            body_len: first_body,
            headers,
        },
        targets: Arc::new(built.targets),
        conn: ConnSpec {
            protocol,
            tls,
            streams,
            requests_per_connection,
            connection_rate: a.connection_rate,
            tls_resume,
        },
        connections: a.connections,
        concurrency,
        threads,
        mode,
        stop,
        warmup,
        timeout,
        seed: a.seed,
    })
}

/// The URL (or template), or every block of the targets file; and how to name them in reports.
fn sources(
    a: &RunArgs,
    method: &str,
    headers: &[(String, String)],
    body: bytes::Bytes,
) -> Result<(Vec<Source>, String)> {
    if let Some(path) = &a.targets {
        let text = std::fs::read_to_string(path).map_err(|e| {
            usage(format!(
                "--targets {}: cannot read the file: {e}",
                path.display()
            ))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path.display().to_string();
        let blocks = targets::file::parse(&text, dir)
            .map_err(|e| usage(format!("--targets {name}: {e}")))?;
        let list = blocks
            .into_iter()
            .map(|b| {
                let mut all = headers.to_vec();
                all.extend(b.headers);
                Source {
                    method: b.method,
                    url: b.url,
                    headers: all,
                    body: b.body.map_or_else(|| body.clone(), Into::into),
                    origin: format!("--targets {name} line {}", b.line),
                }
            })
            .collect();
        return Ok((list, format!("@{name}")));
    }
    let url = a.url.clone().unwrap_or_default();
    Ok((
        vec![Source {
            method: method.to_string(),
            url: url.clone(),
            headers: headers.to_vec(),
            body,
            origin: "the URL".to_string(),
        }],
        url,
    ))
}
