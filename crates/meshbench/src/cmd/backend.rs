//! `meshbench backend`: runs the test server until Ctrl-C or SIGTERM.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use meshbench_backend::{Backend, BackendConfig, Delay, StatusMix};

use crate::cli::BackendArgs;
use crate::usage;

pub fn execute(args: BackendArgs) -> Result<u8> {
    let addr: SocketAddr = args
        .listen
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            usage(format!(
                "--listen {}: not an address; give one like 127.0.0.1:8080",
                args.listen
            ))
        })?;
    if args.threads == 0 {
        return Err(usage("--threads must be at least 1"));
    }
    let delay = match &args.delay {
        Some(d) => d
            .parse::<Delay>()
            .map_err(|e| usage(format!("--delay: {e}")))?,
        None => Delay::None,
    };
    let status = match &args.status {
        Some(s) => s
            .parse::<StatusMix>()
            .map_err(|e| usage(format!("--status: {e}")))?,
        None => StatusMix::default(),
    };
    let cfg = BackendConfig {
        size: args.size,
        delay,
        status,
        threads: args.threads,
        seed: 1,
    };
    let signals = super::signals::Signals::install()?;
    let backend = Backend::start(addr, cfg).with_context(|| format!("cannot listen on {addr}"))?;
    println!("listening on http://{}", backend.addr());
    let _ = std::io::stdout().flush();
    while !signals.stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    backend.stop();
    Ok(crate::exit::OK)
}
