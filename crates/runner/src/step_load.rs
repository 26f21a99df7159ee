//! The load a step sends, built from the experiment file: what every place shares. The file's
//! `load` keys at the step's load point ([`load_for`]), and for a TLS entry (a gateway's
//! routes, an HTTP/3 entry) where to connect and which CA to trust ([`aim_at_gateway`]). Each
//! place then aims it at its own system under test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use meshbench_engine::StopAt;
use meshbench_experiment::config::Experiment;
use meshbench_experiment::Step;
use meshbench_results::{Arrival, LoadPoint, Offer, Order, PacingSlack};

use crate::load::{Body, CaSource, LoadOptions, TargetSource};
use crate::targets::ConnectTo;

/// Every request of `o` connected to `entry`, whatever its URL's host, over TLS trusting
/// `ca`; a gateway's routes (`spread`) in random order.
pub fn aim_at_gateway(o: &mut LoadOptions, ca: PathBuf, entry: SocketAddr, spread: bool) {
    if spread {
        o.send.target_order = Order::Random;
    }
    o.send.connect_to = vec![ConnectTo {
        host: None,
        port: None,
        to_host: Some(entry.ip().to_string()),
        to_port: Some(entry.port()),
    }];
    o.connect.tls.ca = Some(CaSource::File(ca));
}

/// The experiment's `load` keys at `step`'s load point (`load`), against `source`: what every
/// place's load shares.
pub fn load_for(
    e: &Experiment,
    step: &Step,
    load: &LoadPoint,
    source: TargetSource,
) -> LoadOptions {
    let mut o = LoadOptions::new(source);
    o.window.stop = StopAt::Duration(Duration::from_secs_f64(e.duration_secs));
    o.window.warmup = Duration::from_secs_f64(e.warmup_secs);
    o.connections = load.connections as usize;
    // The cap applies to a closed loop; an open loop (a capacity search probing rates over a
    // closed-loop file) keeps the connections and its rate sets what is in flight.
    if !matches!(load.offer, Offer::Open { .. }) {
        o.pace.in_flight = load.in_flight.map(|n| n as usize);
    }
    o.timeout = Duration::from_millis(e.load.timeout_ms);
    o.pace.seed = step.index as u64 + 1;
    if let Offer::Open { rate_rps, arrival } = load.offer {
        o.pace.rate_rps = Some(rate_rps);
        if arrival == Arrival::Poisson {
            o.pace.arrival = Some(Arrival::Poisson);
        }
        o.pace.idle = Some(e.load.idle_strategy);
        o.pace.slack = PacingSlack::from_us(e.load.pacing_slack_us);
    }
    if e.load.threads > 0 {
        o.pace.threads = Some(e.load.threads as usize);
    }
    o.connect.protocol = e.load.protocol;
    if o.connect.protocol.is_multiplexed() {
        o.connect.streams = e.load.streams.max(1) as usize;
    }
    if e.load.request_bytes > 0 && o.connect.protocol == meshbench_results::Protocol::Grpc {
        // A gRPC step pings with this much payload (the backend echoes it back).
        o.send.grpc_payload = e.load.request_bytes as usize;
    } else if e.load.request_bytes > 0 {
        o.send.method = "POST".into();
        o.send.body = Body::Size(e.load.request_bytes);
    }
    // Per-hop attribution: a sample of the measured requests carries an id.
    o.send.trace_every = e.attribution.map(|a| a.every());
    o
}
