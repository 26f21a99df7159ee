//! The words of a load, typed: open or closed loop, how arrivals are spaced, the protocol on
//! the wire, the order through a target list, who closes a connection first and how a worker
//! waits for its next send. The engine runs them, the runner and the experiment file choose
//! them, and every result and stored step says them with these types, so a reader matches on
//! a variant (and a new variant does not compile until every reader says it) instead of
//! comparing strings.
//!
//! Each has one spelling in files and stored parameters (serde's). The result document
//! (`meshbench/result/v1`) wrote two of them with other words before they were typed; those
//! words are kept there through [`result_words`].

use serde::{Deserialize, Serialize};

/// Closed or open loop: the `mode` of an experiment's load and of a result's settings.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LoopMode {
    /// Requests at fixed rates, latency from the intended send time.
    #[default]
    Open,
    /// Each connection sends its next request when the last one is answered.
    Closed,
}

impl LoopMode {
    pub fn name(self) -> &'static str {
        match self {
            LoopMode::Open => "open",
            LoopMode::Closed => "closed",
        }
    }
}

/// How arrivals are spaced in an open loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Evenly spaced, one every 1/rate seconds.
    Uniform,
    /// Exponentially distributed gaps: a Poisson process of the given mean rate.
    Poisson,
}

impl Arrival {
    pub fn name(self) -> &'static str {
        match self {
            Arrival::Uniform => "uniform",
            Arrival::Poisson => "poisson",
        }
    }
}

/// HTTP version on the wire. Named `http1`, `http2`, `grpc` and `h3` in files and stored
/// parameters (`http3` is accepted for `h3`); a result's settings name them by
/// [`Protocol::name`] (`http/1.1`, `h2`, `grpc`, `h3`), its v1 words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Http1,
    /// ALPN h2 over TLS, prior-knowledge h2c over plain TCP.
    Http2,
    /// gRPC calls over HTTP/2 (as `Http2` on the wire); each call's outcome is its
    /// `grpc-status`.
    Grpc,
    /// HTTP/3 over QUIC (always TLS, ALPN h3).
    #[serde(rename = "h3", alias = "http3")]
    Http3,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::Http1,
        Protocol::Http2,
        Protocol::Grpc,
        Protocol::Http3,
    ];

    /// The word of a result's settings and of the reports: `http/1.1`, `h2`, `grpc`, `h3`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http/1.1",
            Protocol::Http2 => "h2",
            Protocol::Grpc => "grpc",
            Protocol::Http3 => "h3",
        }
    }

    /// Several requests at once per connection, each on its own stream.
    pub fn is_multiplexed(self) -> bool {
        self != Protocol::Http1
    }

    /// Carried by HTTP/2 streams (HTTP/2 and gRPC).
    pub fn is_http2(self) -> bool {
        matches!(self, Protocol::Http2 | Protocol::Grpc)
    }
}

/// In which order requests go through the target list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    #[default]
    RoundRobin,
    /// Uniformly at random, from the run's seed.
    Random,
}

impl Order {
    /// The word of a result's settings and of the reports: `round-robin`, `random`.
    pub fn name(self) -> &'static str {
        match self {
            Order::RoundRobin => "round-robin",
            Order::Random => "random",
        }
    }
}

/// Who closes a connection first when `--requests-per-connection` ends it. The side that closes
/// first keeps the connection's TIME_WAIT (60 s on Linux), and with it the 4-tuple: a client
/// that closes first runs out of local ports towards one address after ~28,000 connections a
/// minute (`tcp_tw_reuse` helps on loopback only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloseFirst {
    /// HTTP/1.1: the last request says `Connection: close`; the client waits for the server's
    /// close (at most min(timeout, 1 s)) before closing its end.
    #[default]
    Server,
    /// The client closes after the last response (always so over HTTP/2).
    Client,
}

impl CloseFirst {
    pub fn name(self) -> &'static str {
        match self {
            CloseFirst::Server => "server",
            CloseFirst::Client => "client",
        }
    }
}

/// How a worker spends the time before its next send (`--idle-strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdleStrategy {
    /// With an auto slack, lead the sends (wake ahead by the clock's error, send what falls due
    /// within the lead window early); with a given slack, spin at most a quarter of the gap.
    #[default]
    Auto,
    /// Sleep until the send is due.
    Sleep,
    /// Sleep until the 99th percentile wake-up error before the send, then spin.
    Hybrid,
    /// Never sleep while a send is pending.
    Spin,
}

impl IdleStrategy {
    /// Whether it spins a margin learnt from the clock (and so calibrates and stages).
    pub fn learns(self) -> bool {
        matches!(self, IdleStrategy::Auto | IdleStrategy::Hybrid)
    }

    pub fn name(self) -> &'static str {
        match self {
            IdleStrategy::Auto => "auto",
            IdleStrategy::Sleep => "sleep",
            IdleStrategy::Hybrid => "hybrid",
            IdleStrategy::Spin => "spin",
        }
    }
}

/// How precisely an open loop keeps its schedule (`--pacing-slack`): the most a send may leave
/// after its intended instant. Sends falling due within it of a wake-up go out in that wake-up,
/// each still timed from its own instant; the idle strategy spins only where the machine's
/// clock cannot keep within it by sleeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PacingSlack {
    /// Chosen by each worker from this machine's clock: its sleeps' lateness and the CPU of a
    /// wake-up (see the engine's `idle` module).
    #[default]
    Auto,
    /// Given, in microseconds.
    Within { us: u64 },
}

impl PacingSlack {
    /// The given budget in microseconds; `None` for auto.
    pub fn given_us(self) -> Option<u64> {
        match self {
            PacingSlack::Auto => None,
            PacingSlack::Within { us } => Some(us),
        }
    }

    /// `None` (absent in a file or a result) is auto.
    pub fn from_us(us: Option<u64>) -> PacingSlack {
        us.map_or(PacingSlack::Auto, |us| PacingSlack::Within { us })
    }
}

/// The result document's words for [`Protocol`] and [`Order`] (`#[serde(with = ...)]`): the
/// `name()` of each, written and read back exactly.
pub mod result_words {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    /// The one of `all` whose `name` is the next word of `d`; else an error listing them.
    fn by_name<'de, D: Deserializer<'de>, T: Copy>(
        d: D,
        all: &[T],
        name: fn(T) -> &'static str,
        what: &str,
    ) -> Result<T, D::Error> {
        let word = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        all.iter()
            .copied()
            .find(|t| name(*t) == word)
            .ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|t| name(*t)).collect();
                let (last, rest) = names.split_last().expect("a list of words");
                D::Error::custom(format!(
                    "unknown {what} {word:?}: expected {} or {last}",
                    rest.join(", ")
                ))
            })
    }

    /// `http/1.1`, `h2`, `grpc`, `h3`.
    pub mod protocol {
        use super::*;
        use crate::load::Protocol;

        pub fn serialize<S: Serializer>(p: &Protocol, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(p.name())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Protocol, D::Error> {
            by_name(d, &Protocol::ALL, Protocol::name, "protocol")
        }
    }

    /// `round-robin`, `random`.
    pub mod order {
        use super::*;
        use crate::load::Order;

        pub fn serialize<S: Serializer>(o: &Order, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(o.name())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Order, D::Error> {
            by_name(
                d,
                &[Order::RoundRobin, Order::Random],
                Order::name,
                "target order",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_results_each_have_one_spelling() {
        #[derive(Serialize, Deserialize)]
        struct InResult {
            #[serde(with = "result_words::protocol")]
            protocol: Protocol,
            #[serde(with = "result_words::order")]
            order: Order,
        }
        for p in Protocol::ALL {
            let file = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<Protocol>(&file).unwrap(), p);
            for o in [Order::RoundRobin, Order::Random] {
                let text = serde_json::to_string(&InResult {
                    protocol: p,
                    order: o,
                })
                .unwrap();
                assert_eq!(
                    text,
                    format!(r#"{{"protocol":"{}","order":"{}"}}"#, p.name(), o.name())
                );
                let back: InResult = serde_json::from_str(&text).unwrap();
                assert_eq!((back.protocol, back.order), (p, o));
            }
        }
        assert_eq!(
            serde_json::to_string(&Protocol::Http2).unwrap(),
            r#""http2""#
        );
        assert_eq!(
            serde_json::from_str::<Protocol>(r#""http3""#).unwrap(),
            Protocol::Http3
        );
        assert!(
            serde_json::from_str::<InResult>(r#"{"protocol":"http2","order":"random"}"#).is_err()
        );
    }
}
