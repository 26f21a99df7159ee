//! `meshbench demo`: the README's first command. Starts the built-in backend and a real nginx in
//! front of it, runs a closed-loop and an open-loop test directly and through nginx, prints the
//! four results side by side with the latency nginx adds, and writes each as JSON.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use meshbench_engine::pacer::Arrival;
use meshbench_engine::{ConnSpec, LoadSpec, Mode, RequestSpec, RunResult, StopAt, Targets};
use meshbench_lab::{BackendProcess, Nginx, NginxSite};
use meshbench_report::{ms, side_by_side};

use super::parse_duration;
use crate::cli::DemoArgs;
use crate::{exit, usage};

pub fn execute(args: DemoArgs) -> Result<u8> {
    let duration = parse_duration("--duration", &args.duration)?;
    if duration.is_zero() || args.connections == 0 || !args.rate.is_finite() || args.rate <= 0.0 {
        return Err(usage(
            "--duration, --connections and --rate must be greater than 0",
        ));
    }
    let signals = super::signals::Signals::install()?;
    // The backend runs as its own process so that its CPU is not counted as the generator's.
    let exe = std::env::current_exe().context("cannot find the meshbench executable")?;
    let backend = BackendProcess::start(&exe, &[]).context("cannot start the backend")?;
    let nginx = Nginx::start(&NginxSite::Proxy(backend.addr()), 1).context("cannot start nginx")?;
    eprintln!(
        "backend on {}, nginx {} on {} proxying to it; {} per run after 1 s of warm-up",
        backend.addr(),
        Nginx::version().unwrap_or_default(),
        nginx.addr(),
        humantime::format_duration(duration)
    );
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let open = Mode::Open {
        rate_rps: args.rate,
        arrival: Arrival::Uniform,
    };
    let plan = [
        ("direct-closed", backend.addr(), Mode::Closed),
        ("nginx-closed", nginx.addr(), Mode::Closed),
        ("direct-open", backend.addr(), open),
        ("nginx-open", nginx.addr(), open),
    ];
    let mut results: Vec<(&str, RunResult)> = Vec::new();
    for (name, addr, mode) in plan {
        if signals.stop.load(Ordering::Relaxed) {
            break;
        }
        eprintln!("running {name} ...");
        let spec = demo_spec(addr, mode, args.connections, duration);
        let result = super::run::run_spec(&spec, signals.stop.clone(), false)?;
        super::run::write_json(&args.out.join(format!("{name}.json")), &result)?;
        results.push((name, result));
    }
    let table: Vec<(&str, &RunResult)> = results.iter().map(|(n, r)| (*n, r)).collect();
    println!("{}", side_by_side(&table));
    if let [(_, dc), (_, nc), (_, d_open), (_, n_open)] = &results[..] {
        println!(
            "what nginx adds (open loop at {} req/s, same schedule both ways):",
            args.rate
        );
        for (label, a, b) in [
            ("p50", d_open.latency_us.p50, n_open.latency_us.p50),
            ("p90", d_open.latency_us.p90, n_open.latency_us.p90),
            ("p99", d_open.latency_us.p99, n_open.latency_us.p99),
            ("p99.9", d_open.latency_us.p99_9, n_open.latency_us.p99_9),
        ] {
            let delta = b as i64 - a as i64;
            println!(
                "  {label:<6} {} ms -> {} ms  ({}{} ms)",
                ms(a),
                ms(b),
                if delta < 0 { "-" } else { "+" },
                ms(delta.unsigned_abs())
            );
        }
        println!(
            "closed loop: {:.0} req/s direct, {:.0} req/s through nginx ({:.0} %)",
            dc.throughput_rps,
            nc.throughput_rps,
            100.0 * nc.throughput_rps / dc.throughput_rps.max(1.0)
        );
    }
    println!("results written to {}/", args.out.display());
    drop(nginx);
    drop(backend);
    Ok(signals.exit_code().unwrap_or(exit::OK))
}

fn demo_spec(addr: SocketAddr, mode: Mode, connections: usize, duration: Duration) -> LoadSpec {
    let url = format!("http://{addr}/");
    let bytes = meshbench_engine::encode_request("GET", "/", &addr.to_string(), &[], b"");
    LoadSpec {
        request: RequestSpec {
            method: "GET".into(),
            url,
            body_len: 0,
            headers: Vec::new(),
        },
        targets: std::sync::Arc::new(Targets::single_http1(addr, bytes, false)),
        conn: ConnSpec::default(),
        connections,
        threads: 1,
        mode,
        stop: StopAt::Duration(duration),
        warmup: Duration::from_secs(1),
        timeout: Duration::from_secs(5),
        seed: 1,
    }
}
