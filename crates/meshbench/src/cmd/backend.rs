//! `meshbench backend`: runs the test server (or, with `--hostile`, a deliberately broken one)
//! until Ctrl-C or SIGTERM; with `--arrivals FILE`, then writes the arrivals' summary.

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use meshbench_backend::{
    Backend, BackendConfig, Delay, DelayMode, Hostile, HostileServer, HyperBackend, ServerTls,
    StatusMix,
};
use meshbench_net::tls;

use super::common::signals::Signals;
use super::common::units::parse_duration;
use crate::cli::{BackendArgs, DelayModeArg};
use crate::usage;

pub fn execute(args: BackendArgs) -> Result<u8> {
    let addr = listen_addr(&args)?;
    let (cfg, trim) = config(&args)?;
    // Created once every flag is checked, so that a path that cannot be written fails before
    // any load, not after it.
    let arrivals_file = match &args.arrivals {
        Some(path) => Some((
            std::fs::File::create(path)
                .map_err(|e| usage(format!("--arrivals {}: {e}", path.display())))?,
            path.as_path(),
        )),
        None => None,
    };
    let signals = Signals::install()?;
    if let Some(how) = args.hostile {
        return serve_hostile(addr, how, &args, &signals);
    }
    if !args.tls && !args.http2 {
        return serve_plain(addr, cfg, arrivals_file, trim, &signals);
    }
    serve_hyper(addr, cfg, &args, &signals)
}

/// `--listen` as an address.
fn listen_addr(args: &BackendArgs) -> Result<SocketAddr> {
    args.listen
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            usage(format!(
                "--listen {}: not an address; give one like 127.0.0.1:8080",
                args.listen
            ))
        })
}

/// The server's settings and `--arrivals-trim`, from the flags, each checked (and the flags
/// that only one kind of server takes refused with the others) before anything starts.
fn config(args: &BackendArgs) -> Result<(BackendConfig, Duration)> {
    if args.threads == 0 {
        return Err(usage("--threads must be at least 1"));
    }
    let delay = match &args.delay {
        Some(d) => d
            .parse::<Delay>()
            .map_err(|e| usage(format!("--delay: {e}")))?,
        None => Delay::None,
    };
    let delay_mode = match args.delay_mode {
        DelayModeArg::Sleep => DelayMode::Sleep,
        DelayModeArg::Spin => DelayMode::Spin,
    };
    if args.arrivals.is_some() && (args.tls || args.http2) {
        return Err(usage(
            "--arrivals is recorded by the plain HTTP/1.1 server only; drop --tls and --http2",
        ));
    }
    let trim = Duration::try_from_secs_f64(args.arrivals_trim).map_err(|_| {
        usage(format!(
            "--arrivals-trim {}: not a number of seconds >= 0",
            args.arrivals_trim
        ))
    })?;
    if delay_mode == DelayMode::Spin && (args.tls || args.http2) {
        return Err(usage(
            "--delay-mode spin is served by the plain HTTP/1.1 server only; drop --tls and --http2",
        ));
    }
    let status = match &args.status {
        Some(s) => s
            .parse::<StatusMix>()
            .map_err(|e| usage(format!("--status: {e}")))?,
        None => StatusMix::default(),
    };
    let work = match &args.work {
        Some(w) => parse_duration("--work", w)?,
        None => Duration::ZERO,
    };
    let cfg = BackendConfig {
        size: args.size,
        delay,
        delay_mode,
        work,
        status,
        threads: args.threads,
        seed: 1,
        record_arrivals: args.arrivals.is_some(),
    };
    let tls_flags = args.cert.is_some() || args.mtls.is_some() || args.tls_dir.is_some();
    if tls_flags && !args.tls {
        return Err(usage("--cert, --mtls and --tls-dir need --tls"));
    }
    Ok((cfg, trim))
}

/// `--hostile`: the deliberately broken server, until a signal.
fn serve_hostile(
    addr: SocketAddr,
    how: Hostile,
    args: &BackendArgs,
    signals: &Signals,
) -> Result<u8> {
    let drip = parse_duration("--drip", &args.drip)?;
    let server = HostileServer::start(addr, how, drip)
        .with_context(|| format!("cannot listen on {addr}"))?;
    outln!(
        "listening on http://{} (hostile: {})",
        server.addr(),
        how.name()
    );
    let _ = std::io::stdout().flush();
    wait_for_signal(signals);
    server.stop();
    Ok(crate::exit::OK)
}

/// The plain HTTP/1.1 server, until a signal; then, with `--arrivals`, the arrivals' summary
/// written to its file.
fn serve_plain(
    addr: SocketAddr,
    cfg: BackendConfig,
    arrivals_file: Option<(File, &Path)>,
    trim: Duration,
    signals: &Signals,
) -> Result<u8> {
    let backend = Backend::start(addr, cfg).with_context(|| format!("cannot listen on {addr}"))?;
    outln!("listening on http://{}", backend.addr());
    let _ = std::io::stdout().flush();
    wait_for_signal(signals);
    match arrivals_file {
        Some((file, path)) => {
            let (stamps, dropped) = backend.stop_with_arrivals().into_parts();
            let summary = meshbench_backend::arrivals::summarize(stamps, trim, dropped);
            let mut out = std::io::BufWriter::new(file);
            serde_json::to_writer_pretty(&mut out, &summary)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => backend.stop(),
    }
    Ok(crate::exit::OK)
}

/// The server for TLS, HTTP/2 and HTTP/3, until a signal.
fn serve_hyper(
    addr: SocketAddr,
    cfg: BackendConfig,
    args: &BackendArgs,
    signals: &Signals,
) -> Result<u8> {
    let tls = if args.tls {
        Some(server_tls(args)?)
    } else {
        None
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let backend = HyperBackend::start(addr, cfg, tls, args.http3)
        .with_context(|| format!("cannot listen on {addr}"))?;
    if args.http3 {
        outln!(
            "listening on {scheme}://{} (and HTTP/3 over UDP)",
            backend.addr()
        );
    } else {
        outln!("listening on {scheme}://{}", backend.addr());
    }
    let _ = std::io::stdout().flush();
    wait_for_signal(signals);
    drop(backend);
    Ok(crate::exit::OK)
}

fn wait_for_signal(signals: &Signals) {
    while !signals.stop.requested() {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server's TLS settings: given files, or a generated CA and certificates (printed).
fn server_tls(args: &BackendArgs) -> Result<std::sync::Arc<rustls::ServerConfig>> {
    let (chain, key, generated_ca) = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => (
            tls::load_certs(cert).map_err(|e| usage(format!("--cert: {e}")))?,
            tls::load_key(key).map_err(|e| usage(format!("--key: {e}")))?,
            None,
        ),
        _ => {
            let dir = args.tls_dir.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("meshbench-tls-{}", std::process::id()))
            });
            meshbench_lab::pki::write_lab_set(&dir, &args.tls_names)?;
            outln!(
                "generated TLS files in {}: ca.pem, server.pem, server-key.pem, client.pem, client-key.pem",
                dir.display()
            );
            (
                tls::load_certs(&dir.join("server.pem"))?,
                tls::load_key(&dir.join("server-key.pem"))?,
                Some(dir.join("ca.pem")),
            )
        }
    };
    let client_roots = match args.mtls.as_deref() {
        None => None,
        Some("") => {
            let ca = generated_ca.ok_or_else(|| {
                usage("--mtls without a CA file needs the generated certificates; give --mtls CA_FILE with --cert")
            })?;
            Some(tls::load_roots(&ca)?)
        }
        Some(file) => Some(
            tls::load_roots(std::path::Path::new(file))
                .map_err(|e| usage(format!("--mtls: {e}")))?,
        ),
    };
    let config = ServerTls {
        chain,
        key,
        client_roots,
    }
    .config()
    .map_err(|e| usage(format!("the certificate and key do not work together: {e}")))?;
    Ok(config)
}
