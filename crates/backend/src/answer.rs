//! How the hyper and HTTP/3 servers answer a request, written once for both: what every
//! connection's requests share (the settings, the default body, the random source of injected
//! statuses and delays) and the decision for one request (its options by query or
//! `x-meshbench-*` header, its status, its delay). The plain HTTP/1.1 server decides the same
//! way on its own fast path.

use std::sync::Mutex;

use bytes::Bytes;
use http::HeaderMap;
use meshbench_net::rng::SplitMix64;

use crate::options::{BackendConfig, RequestOptions};

/// What every connection's requests share: the settings, the default body, the random
/// source of injected statuses and delays. The hyper server
/// ([`crate::hyper_server`]) and HTTP/3 ([`crate::h3_server`]) answer from it.
pub(crate) struct Shared {
    pub(crate) cfg: BackendConfig,
    /// The default body, shared by every response of the default size.
    body: Bytes,
    rng: Mutex<SplitMix64>,
}

/// How one request is to be answered.
pub(crate) struct Answer {
    pub(crate) opts: RequestOptions,
    pub(crate) status: u16,
    pub(crate) delay_ns: u64,
}

impl Shared {
    pub(crate) fn new(cfg: BackendConfig) -> Shared {
        Shared {
            body: Bytes::from(vec![b'x'; cfg.size]),
            rng: Mutex::new(SplitMix64(cfg.seed)),
            cfg,
        }
    }

    /// The request's options (query, then `x-meshbench-*` headers), its status and delay
    /// (given, or drawn from the server's mix), after the server's `--work` is spent.
    pub(crate) fn decide(&self, uri: &http::Uri, headers: &HeaderMap) -> Answer {
        let mut opts = RequestOptions::default();
        if let Some(q) = uri.query() {
            opts.from_target(format!("?{q}").as_bytes());
        }
        for (name, value) in headers {
            if let Some(option) = name.as_str().strip_prefix("x-meshbench-") {
                opts.set(option.as_bytes(), value.as_bytes());
            }
        }
        crate::options::burn(self.cfg.work);
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        let status = opts
            .status
            .unwrap_or_else(|| self.cfg.status.pick(&mut rng));
        let delay_ns = opts.delay.unwrap_or(self.cfg.delay).sample_ns(&mut rng);
        Answer {
            opts,
            status,
            delay_ns,
        }
    }

    /// The server's own status and delay for a request that names none (a gRPC call's),
    /// drawn from its mix.
    pub(crate) fn drawn(&self) -> (u16, u64) {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        let status = self.cfg.status.pick(&mut rng);
        (status, self.cfg.delay.sample_ns(&mut rng))
    }

    /// The body of a response that echoes nothing: the default one, or `?size=` bytes.
    pub(crate) fn body_of(&self, opts: &RequestOptions) -> Bytes {
        match opts.size {
            Some(n) if n as usize != self.body.len() => Bytes::from(vec![b'x'; n as usize]),
            _ => self.body.clone(),
        }
    }
}
