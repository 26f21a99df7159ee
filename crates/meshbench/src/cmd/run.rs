//! `meshbench run URL`: resolves the flags into a [`LoadSpec`] (every check happens here, before
//! any traffic), runs it with a live progress line, prints the summary, writes the JSON.

use std::io::{IsTerminal, Write};
use std::net::ToSocketAddrs;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use meshbench_engine::pacer::Arrival;
use meshbench_engine::{LoadSpec, Mode, RequestSpec, RunResult, StopAt};

use super::parse_duration;
use crate::cli::{ArrivalArg, RunArgs};
use crate::{exit, usage};

pub fn execute(args: RunArgs) -> Result<u8> {
    let spec = resolve(&args)?;
    let signals = super::signals::Signals::install()?;
    let live = !args.quiet && std::io::stderr().is_terminal();
    let result = run_spec(&spec, signals.stop.clone(), live)?;
    if let Some(path) = &args.json {
        write_json(path, &result)?;
    }
    print!("{}", meshbench_report::summary(&result));
    let _ = std::io::stdout().flush();
    Ok(signals.exit_code().unwrap_or(exit::OK))
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
    let url = url::Url::parse(&a.url).map_err(|e| {
        usage(format!(
            "invalid URL '{}': {e}; give a full URL such as http://127.0.0.1:8080/",
            a.url
        ))
    })?;
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(usage(format!(
                "'{}': https is not supported yet (TLS arrives with the protocols work); use an http:// URL",
                a.url
            )))
        }
        other => return Err(usage(format!("'{}': unsupported scheme '{other}'; use an http:// URL", a.url))),
    }
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| {
        usage(format!(
            "'{}' has no host; give one like http://127.0.0.1:8080/",
            a.url
        ))
    })?;
    let port = url.port_or_known_default().unwrap_or(80);
    let lookup = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<std::net::SocketAddr> = (lookup, port)
        .to_socket_addrs()
        .map_err(|e| {
            usage(format!(
                "cannot resolve host '{host}': {e}; check the name or give an IP address"
            ))
        })?
        .collect();
    let addr = pick_address(&addrs).ok_or_else(|| {
        usage(format!(
            "host '{host}' has no address; check the name or give an IP address"
        ))
    })?;
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
    let mut target = url.path().to_string();
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let host_header = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let bytes = meshbench_engine::encode_request(&method, &target, &host_header, &headers, &body);
    Ok(LoadSpec {
        request: RequestSpec {
            method,
            url: a.url.clone(),
            addr,
            bytes: bytes.into(),
            body_len: body.len(),
            headers,
        },
        connections: a.connections,
        threads,
        mode,
        stop,
        warmup,
        timeout,
        seed: a.seed,
    })
}

/// Of several addresses for one name (`localhost` is often ::1 and 127.0.0.1), the first that
/// accepts a connection, as curl would use; the first one if none does (the run then counts the
/// connect errors).
fn pick_address(addrs: &[std::net::SocketAddr]) -> Option<std::net::SocketAddr> {
    if addrs.len() > 1 {
        let probe = Duration::from_millis(500);
        if let Some(a) = addrs
            .iter()
            .find(|a| std::net::TcpStream::connect_timeout(a, probe).is_ok())
        {
            return Some(*a);
        }
    }
    addrs.first().copied()
}
