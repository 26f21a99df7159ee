//! The remote-write 1.0 wire format: the protobuf messages of a `WriteRequest` (only the fields
//! meshbench sends), written as `prost` structs by hand from the field numbers the protocol
//! fixes, and the snappy *block* framing the body travels in.
//!
//! Integer native histograms only (counts are whole requests); no negative buckets (latencies
//! are positive), no exemplars. Decoding is here too, for tests and tools that check what was
//! sent; a receiver ignores fields it does not know, and so does [`decode_body`].

use prost::Message;

pub use crate::proto::{BucketSpan, Label};

/// The stale marker: the NaN that tells a receiver a series ended here (not the ordinary NaN).
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// A float sample that marks a series stale.
pub fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN)
}

/// Whether a value is the stale marker (NaN never equals itself: compare bits).
pub fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN
}

/// One push: series with their samples, and what the families are.
#[derive(Clone, PartialEq, Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    // Tag 2 is reserved by the protocol.
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// A series: its labels (sorted by name, `__name__` included) and its samples, oldest first.
#[derive(Clone, PartialEq, Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    // Tag 3 carries exemplars, which meshbench does not send.
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<Histogram>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// What a family is, for receivers that keep metadata (Prometheus 2.42 ignores it).
#[derive(Clone, PartialEq, Message)]
pub struct MetricMetadata {
    #[prost(enumeration = "MetricType", tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    #[prost(string, tag = "4")]
    pub help: String,
    #[prost(string, tag = "5")]
    pub unit: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Unknown = 0,
    Counter = 1,
    Gauge = 2,
    Histogram = 3,
}

/// A native histogram sample with integer counts: buckets as spans and deltas.
#[derive(Clone, PartialEq, Message)]
pub struct Histogram {
    #[prost(oneof = "Count", tags = "1")]
    pub count: Option<Count>,
    #[prost(double, tag = "3")]
    pub sum: f64,
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    #[prost(oneof = "ZeroCount", tags = "6")]
    pub zero_count: Option<ZeroCount>,
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    /// Each bucket's count minus the one before (the first: minus zero).
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    #[prost(enumeration = "ResetHint", tag = "14")]
    pub reset_hint: i32,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
}

/// The observation count of an integer histogram.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Count {
    #[prost(uint64, tag = "1")]
    Int(u64),
}

/// The zero bucket's count of an integer histogram.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ZeroCount {
    #[prost(uint64, tag = "6")]
    Int(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ResetHint {
    Unknown = 0,
    Yes = 1,
    No = 2,
    Gauge = 3,
}

/// Why a body could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not a snappy block: {0}")]
    Snappy(#[from] snap::Error),
    #[error("not a WriteRequest: {0}")]
    Protobuf(#[from] prost::DecodeError),
}

/// The body of a push: the request in protobuf, compressed as one snappy block.
pub fn encode_body(req: &WriteRequest) -> Vec<u8> {
    let raw = req.encode_to_vec();
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        // Only an input beyond snappy's ~4 GiB block limit fails; a push is kilobytes.
        .expect("a push fits one snappy block")
}

/// A push's body read back.
pub fn decode_body(body: &[u8]) -> Result<WriteRequest, DecodeError> {
    let raw = snap::raw::Decoder::new().decompress_vec(body)?;
    Ok(WriteRequest::decode(raw.as_slice())?)
}

impl TimeSeries {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_round_trip() {
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![
                    Label {
                        name: "__name__".into(),
                        value: "x_total".into(),
                    },
                    Label {
                        name: "step".into(),
                        value: "0".into(),
                    },
                ],
                samples: vec![
                    Sample {
                        value: 3.0,
                        timestamp: 1_700_000_000_000,
                    },
                    Sample {
                        value: stale_nan(),
                        timestamp: 1_700_000_000_001,
                    },
                ],
                histograms: vec![Histogram {
                    count: Some(Count::Int(5)),
                    sum: 0.25,
                    schema: 6,
                    zero_threshold: 0.0,
                    zero_count: Some(ZeroCount::Int(0)),
                    positive_spans: vec![BucketSpan {
                        offset: -400,
                        length: 2,
                    }],
                    positive_deltas: vec![2, 1],
                    reset_hint: ResetHint::Unknown as i32,
                    timestamp: 1_700_000_000_000,
                }],
            }],
            metadata: vec![MetricMetadata {
                r#type: MetricType::Counter as i32,
                metric_family_name: "x_total".into(),
                help: "X.".into(),
                unit: String::new(),
            }],
        };
        let body = encode_body(&req);
        let back = decode_body(&body).unwrap();
        assert_eq!(back.timeseries[0].label("step"), Some("0"));
        assert!(is_stale(back.timeseries[0].samples[1].value));
        // NaN is not equal to itself; compare the rest.
        let mut a = back.clone();
        let mut b = req.clone();
        a.timeseries[0].samples.pop();
        b.timeseries[0].samples.pop();
        assert_eq!(a, b);
        assert!(decode_body(b"not snappy").is_err());
    }

    #[test]
    fn field_numbers_are_the_protocols() {
        // A sample of value 1.0 at t=2: field 1 (double, wire type 1), field 2 (varint).
        let s = Sample {
            value: 1.0,
            timestamp: 2,
        };
        let bytes = s.encode_to_vec();
        assert_eq!(bytes[0], (1 << 3) | 1);
        assert_eq!(&bytes[1..9], &1.0f64.to_le_bytes());
        assert_eq!(&bytes[9..], &[2 << 3, 2]);
        // Positive spans are field 11, deltas field 12 (packed, zig-zag).
        let h = Histogram {
            positive_spans: vec![BucketSpan {
                offset: -1,
                length: 1,
            }],
            positive_deltas: vec![-1],
            ..Default::default()
        };
        let bytes = h.encode_to_vec();
        // Field 11, length-delimited: (11 << 3) | 2 = 90; span = offset -1 zig-zagged (1).
        assert_eq!(&bytes[..6], &[90, 4, 8, 1, 16, 1]);
        // Field 12 packed: (12 << 3) | 2 = 98, one byte, zig-zag(-1) = 1.
        assert_eq!(&bytes[6..], &[98, 1, 1]);
    }
}
