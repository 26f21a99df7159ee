//! gRPC as both sides of a benchmark speak it over HTTP/2: the status codes (counted as data,
//! never the HTTP status), the 5-byte message framing, the `grpc-timeout` header that carries a
//! deadline, and the ping service that fortio and Istio's own benchmarks use
//! (`fgrpc.PingServer/Ping`), so that meshbench drives fortio's server and fortio's client
//! drives meshbench's backend.

use std::fmt;
use std::time::Duration;

use prost::Message;

/// The ping method's path: fortio's `fgrpc.PingServer/Ping`.
pub const PING_PATH: &str = "/fgrpc.PingServer/Ping";

/// The standard health check (`grpc.health.v1.Health/Check`), answered by the backend too.
pub const HEALTH_PATH: &str = "/grpc.health.v1.Health/Check";

/// The content type of every gRPC request and response.
pub const CONTENT_TYPE: &str = "application/grpc";

/// Largest message either side accepts (gRPC's default receive limit).
pub const MAX_MESSAGE: usize = 4 << 20;

/// fortio's ping message, field for field.
#[derive(Clone, PartialEq, Message)]
pub struct PingMessage {
    #[prost(int64, tag = "1")]
    pub seq: i64,
    /// Sender's send time; the server puts its receive time (Unix ns).
    #[prost(int64, tag = "2")]
    pub ts: i64,
    /// Extra bytes that make the message the size asked for.
    #[prost(string, tag = "3")]
    pub payload: String,
    /// The server waits this long before answering.
    #[prost(int64, tag = "4")]
    pub delay_nanos: i64,
}

impl PingMessage {
    /// A ping whose payload is `payload` bytes of text.
    pub fn with_payload(payload: usize, delay: Duration) -> PingMessage {
        PingMessage {
            seq: 0,
            ts: 0,
            payload: "x".repeat(payload),
            delay_nanos: delay.as_nanos().min(i64::MAX as u128) as i64,
        }
    }
}

/// `grpc.health.v1.HealthCheckResponse` with its one field (`status`: 1 = SERVING).
#[derive(Clone, PartialEq, Message)]
pub struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// A message in gRPC's length-prefixed framing: a compression flag (0), its length (u32 big
/// endian), the bytes.
pub fn frame(message: &impl Message) -> Vec<u8> {
    let mut out = prefix(message.encoded_len());
    message
        .encode(&mut out)
        .expect("a Vec grows to take any message");
    out
}

/// An already serialised message, framed.
pub fn frame_bytes(message: &[u8]) -> Vec<u8> {
    let mut out = prefix(message.len());
    out.extend_from_slice(message);
    out
}

/// The 5-byte prefix of a `len`-byte message, in a buffer with room for the message.
fn prefix(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + len);
    out.push(0);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out
}

/// Why a framed message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a gRPC message needs a 5-byte prefix; {0} bytes came")]
    Short(usize),
    #[error("the message is compressed (flag {0}) and no compression was negotiated")]
    Compressed(u8),
    #[error("the prefix says {said} bytes and {came} came")]
    Length { said: usize, came: usize },
    #[error("a {0}-byte message is over the 4 MiB limit")]
    TooLarge(usize),
}

/// The one message of a unary call's body.
pub fn unframe(body: &[u8]) -> Result<&[u8], FrameError> {
    if body.len() < 5 {
        return Err(FrameError::Short(body.len()));
    }
    if body[0] != 0 {
        return Err(FrameError::Compressed(body[0]));
    }
    let said = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if said > MAX_MESSAGE {
        return Err(FrameError::TooLarge(said));
    }
    if body.len() - 5 != said {
        return Err(FrameError::Length {
            said,
            came: body.len() - 5,
        });
    }
    Ok(&body[5..])
}

/// A gRPC status code. What a call ended with: OK or one of the sixteen failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Code(u8);

impl Code {
    pub const OK: Code = Code(0);
    pub const CANCELLED: Code = Code(1);
    pub const UNKNOWN: Code = Code(2);
    pub const INVALID_ARGUMENT: Code = Code(3);
    pub const DEADLINE_EXCEEDED: Code = Code(4);
    pub const NOT_FOUND: Code = Code(5);
    pub const PERMISSION_DENIED: Code = Code(7);
    pub const RESOURCE_EXHAUSTED: Code = Code(8);
    pub const UNIMPLEMENTED: Code = Code(12);
    pub const INTERNAL: Code = Code(13);
    pub const UNAVAILABLE: Code = Code(14);
    pub const UNAUTHENTICATED: Code = Code(16);

    /// Every code there is: 0 to 16.
    pub const COUNT: usize = 17;

    const NAMES: [&'static str; Code::COUNT] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];

    /// Code `n`; a number outside 0..=16 is UNKNOWN, as gRPC's clients read it.
    pub fn new(n: u32) -> Code {
        if (n as usize) < Code::COUNT {
            Code(n as u8)
        } else {
            Code::UNKNOWN
        }
    }

    /// The `grpc-status` value as sent: digits; anything else is UNKNOWN.
    pub fn parse(value: &[u8]) -> Code {
        std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .map_or(Code::UNKNOWN, Code::new)
    }

    /// By its name (`UNAVAILABLE`) or its number (`14`).
    pub fn from_name(name: &str) -> Option<Code> {
        if let Ok(n) = name.parse::<u32>() {
            return ((n as usize) < Code::COUNT).then_some(Code(n as u8));
        }
        Code::NAMES
            .iter()
            .position(|&known| known.eq_ignore_ascii_case(name))
            .map(|i| Code(i as u8))
    }

    /// The code a client reads from an HTTP status when the response carries no
    /// `grpc-status` (a proxy answering for itself), as gRPC's HTTP mapping says.
    pub fn from_http(status: u16) -> Code {
        match status {
            400 => Code::INTERNAL,
            401 => Code::UNAUTHENTICATED,
            403 => Code::PERMISSION_DENIED,
            404 => Code::UNIMPLEMENTED,
            429 | 502 | 503 | 504 => Code::UNAVAILABLE,
            // A 200 that ends without trailers broke the protocol.
            200 => Code::INTERNAL,
            _ => Code::UNKNOWN,
        }
    }

    pub fn number(self) -> u8 {
        self.0
    }

    pub fn name(self) -> &'static str {
        Code::NAMES[self.0 as usize]
    }

    pub fn is_ok(self) -> bool {
        self == Code::OK
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A deadline as `grpc-timeout` carries it: at most 8 digits and a unit, the finest unit that
/// fits (microseconds up to 99 s, then milliseconds, then seconds).
pub fn timeout_header(deadline: Duration) -> String {
    let us = deadline.as_micros();
    if us < 100_000_000 {
        format!("{}u", us.max(1))
    } else if deadline.as_millis() < 100_000_000 {
        format!("{}m", deadline.as_millis())
    } else {
        format!("{}S", deadline.as_secs().min(99_999_999))
    }
}

/// A `grpc-timeout` header's deadline; `None` when it is malformed.
pub fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_frames_and_unframes_to_itself() {
        let ping = PingMessage::with_payload(100, Duration::from_micros(5));
        let framed = frame(&ping);
        assert_eq!(framed[0], 0);
        assert_eq!(
            u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize,
            framed.len() - 5
        );
        let back = PingMessage::decode(unframe(&framed).unwrap()).unwrap();
        assert_eq!(back, ping);
        assert_eq!(back.delay_nanos, 5000);
    }

    #[test]
    fn broken_frames_say_what_is_wrong() {
        assert_eq!(unframe(&[0, 0]), Err(FrameError::Short(2)));
        assert_eq!(unframe(&[1, 0, 0, 0, 0]), Err(FrameError::Compressed(1)));
        assert_eq!(
            unframe(&[0, 0, 0, 0, 3, 1]),
            Err(FrameError::Length { said: 3, came: 1 })
        );
        assert_eq!(
            unframe(&[0, 0xff, 0, 0, 0]),
            Err(FrameError::TooLarge(0xff00_0000))
        );
    }

    #[test]
    fn codes_read_as_clients_read_them() {
        assert_eq!(Code::parse(b"0"), Code::OK);
        assert_eq!(Code::parse(b"14"), Code::UNAVAILABLE);
        assert_eq!(Code::parse(b"99"), Code::UNKNOWN);
        assert_eq!(Code::parse(b"x"), Code::UNKNOWN);
        assert_eq!(Code::from_name("unavailable"), Some(Code::UNAVAILABLE));
        assert_eq!(Code::from_name("4"), Some(Code::DEADLINE_EXCEEDED));
        assert_eq!(Code::from_name("17"), None);
        assert_eq!(Code::from_http(503), Code::UNAVAILABLE);
        assert_eq!(Code::from_http(404), Code::UNIMPLEMENTED);
        assert_eq!(Code::new(16).name(), "UNAUTHENTICATED");
    }

    #[test]
    fn deadlines_round_trip_through_the_header() {
        for d in [
            Duration::from_micros(1),
            Duration::from_millis(250),
            Duration::from_secs(30),
            Duration::from_secs(200),
            Duration::from_secs(10_000_000),
        ] {
            let h = timeout_header(d);
            assert!(h.len() <= 9, "{h}");
            let back = parse_timeout(h.as_bytes()).unwrap();
            assert!(back <= d && d - back < Duration::from_secs(1), "{d:?} {h}");
        }
        assert_eq!(parse_timeout(b"5"), None);
        assert_eq!(parse_timeout(b"123456789m"), None);
        assert_eq!(parse_timeout(b"10x"), None);
    }
}
