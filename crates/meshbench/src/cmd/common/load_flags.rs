//! The flags of a load as [`LoadOptions`], where two commands take them: the per-request and
//! pacing flags of `run`, also given to `capacity` after `--`. Units and signs are checked
//! here (bad input, exit 2), the rest when the options are resolved, before any traffic.

use anyhow::Result;
use meshbench_engine::LoadSpec;
use meshbench_results::{Arrival, CloseFirst, IdleStrategy, Order, PacingSlack, Protocol};
use meshbench_runner::targets::ConnectTo;
use meshbench_runner::{Body, LoadOptions, ProtoSource, TlsOptions};

use super::units::parse_duration;
use crate::cli::{ArrivalArg, CloseFirstArg, IdleArg, OnOff, OrderArg, PacingFlags, RequestFlags};
use crate::usage;

/// Resolves options; what cannot be run is bad input (exit 2).
pub fn resolve(options: &LoadOptions) -> Result<LoadSpec> {
    options.resolve().map_err(|e| usage(e.to_string()))
}

/// A count flag that must be at least 1.
pub fn positive(flag: &str, v: i64) -> Result<u64> {
    if v <= 0 {
        return Err(usage(format!("{flag} {v}: must be at least 1")));
    }
    Ok(v as u64)
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
