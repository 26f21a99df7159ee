//! The protobuf exposition format: length-delimited `io.prometheus.client.MetricFamily`
//! messages, the one format in which Prometheus 2.x takes native histograms from a scrape.
//!
//! The message types are written here by hand with `prost`'s derive, only the fields we set,
//! with the field numbers of Prometheus's client data model (wire-compatible with both its
//! proto2 and proto3 editions: every field we write has the same number and wire type in
//! each). A histogram carries both representations of the same buckets:
//!
//! - the classic cumulative `le` buckets (sparse, as [`Buckets::classic`] gives them, `+Inf`
//!   included), for a scraper that keeps classic histograms;
//! - the native fields: schema [`SCHEMA`], the positive spans and count deltas of
//!   [`Buckets::native_spans`], and an empty zero bucket ([`Buckets::of_micros`] counts a
//!   recorded 0 in the 1 µs bucket, as remote write does). Its threshold is 2^-128 (what
//!   Prometheus's Go client uses) rather than 0, because a scraper tells a native histogram
//!   from a classic one by a non-zero threshold or a span, and a histogram with no
//!   observations yet has no span.
//!
//! Counters are named with their `_total` (the protobuf family name is the sample name).

use prost::Message;

use crate::buckets::{Buckets, SCHEMA};
use crate::series::{Family, Kind, Value};

pub use crate::proto::{BucketSpan, Label as LabelPair};

/// Width of the zero bucket: 2^-128.
pub const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

#[derive(Clone, PartialEq, Message)]
pub struct MetricFamily {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub help: String,
    #[prost(enumeration = "MetricType", tag = "3")]
    pub r#type: i32,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
    /// Read by newer scrapers only; older ones skip it as an unknown field.
    #[prost(string, tag = "5")]
    pub unit: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Counter = 0,
    Gauge = 1,
    Histogram = 4,
}

#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Gauge>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Counter>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Gauge {
    #[prost(double, tag = "1")]
    pub value: f64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Counter {
    #[prost(double, tag = "1")]
    pub value: f64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Histogram {
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    /// Classic buckets, ascending `upper_bound`, cumulative counts.
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    /// Each bucket's count less the previous bucket's (the first less 0).
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Bucket {
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
}

/// The families as length-delimited `MetricFamily` messages.
pub fn encode(families: &[Family]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    for f in families {
        let message = MetricFamily {
            name: f.name.to_string(),
            help: f.help.to_string(),
            r#type: match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            } as i32,
            unit: f.unit.unwrap_or("").to_string(),
            metric: f
                .members
                .iter()
                .map(|m| {
                    let mut metric = Metric {
                        label: m
                            .labels
                            .iter()
                            .map(|(name, value)| LabelPair {
                                name: name.to_string(),
                                value: value.clone(),
                            })
                            .collect(),
                        ..Metric::default()
                    };
                    match &m.value {
                        Value::Counter(v) => metric.counter = Some(Counter { value: *v }),
                        Value::Gauge(v) => metric.gauge = Some(Gauge { value: *v }),
                        Value::Histogram(b) => metric.histogram = Some(histogram(b)),
                    }
                    metric
                })
                .collect(),
        };
        // Writing into a Vec cannot run out of room.
        let _ = message.encode_length_delimited(&mut out);
    }
    out
}

fn histogram(b: &Buckets) -> Histogram {
    let (spans, deltas) = b.native_spans();
    let mut positive_span: Vec<BucketSpan> = spans
        .into_iter()
        .map(|(offset, length)| BucketSpan { offset, length })
        .collect();
    if positive_span.is_empty() {
        // No observations yet: a no-op span still says "native".
        positive_span.push(BucketSpan {
            offset: 0,
            length: 0,
        });
    }
    Histogram {
        sample_count: b.count,
        sample_sum: b.sum,
        bucket: b
            .classic()
            .into_iter()
            .map(|(upper_bound, cumulative_count)| Bucket {
                cumulative_count,
                upper_bound,
            })
            .collect(),
        schema: SCHEMA,
        zero_threshold: ZERO_THRESHOLD,
        zero_count: 0,
        positive_span,
        positive_delta: deltas,
    }
}

/// Reads length-delimited families back (for tests and for checking a scrape).
pub fn decode(mut bytes: &[u8]) -> Result<Vec<MetricFamily>, prost::DecodeError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut bytes)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::upper_bound;
    use crate::metrics::tests::sample_families;
    use crate::names;

    #[test]
    fn zero_threshold_is_two_to_the_minus_128() {
        assert_eq!(ZERO_THRESHOLD, (-128f64).exp2());
    }

    #[test]
    fn round_trip_carries_both_kinds_of_bucket() {
        let fams = sample_families();
        let decoded = decode(&encode(&fams)).unwrap();
        assert_eq!(decoded.len(), fams.len());
        let requests = decoded.iter().find(|f| f.name == names::REQUESTS).unwrap();
        assert_eq!(requests.r#type, MetricType::Counter as i32);
        assert!(requests.metric[0].counter.as_ref().unwrap().value > 0.0);
        assert_eq!(requests.metric[0].label[0].name, names::EXPERIMENT);

        let latency = decoded.iter().find(|f| f.name == names::LATENCY).unwrap();
        assert_eq!(latency.unit, "seconds");
        let Value::Histogram(b) = &fams
            .iter()
            .find(|f| f.name == names::LATENCY)
            .unwrap()
            .members[0]
            .value
        else {
            panic!("a histogram")
        };
        let h = latency.metric[0].histogram.as_ref().unwrap();
        assert_eq!(h.sample_count, b.count);
        assert_eq!(h.schema, SCHEMA);
        assert!(h.zero_threshold > 0.0);
        // Classic: as classic() says, +Inf last.
        let classic: Vec<(f64, u64)> = h
            .bucket
            .iter()
            .map(|x| (x.upper_bound, x.cumulative_count))
            .collect();
        assert_eq!(classic, b.classic());
        // Native: spans and deltas decode to the bucket counts.
        let mut decoded_counts = std::collections::BTreeMap::new();
        let (mut index, mut count, mut deltas) = (0i32, 0i64, h.positive_delta.iter());
        for s in &h.positive_span {
            index += s.offset;
            for _ in 0..s.length {
                count += deltas.next().unwrap();
                decoded_counts.insert(index, count as u64);
                index += 1;
            }
        }
        assert_eq!(decoded_counts, b.counts);
        // And each native bucket's upper bound is a classic boundary with the same count.
        let mut cumulative = 0;
        for (i, n) in &decoded_counts {
            cumulative += n;
            let le = upper_bound(*i);
            assert!(classic.contains(&(le, cumulative)), "{le} {cumulative}");
        }
    }

    #[test]
    fn zeros_count_in_the_native_buckets() {
        let decoded = decode(&encode(&sample_families())).unwrap();
        let lag = decoded
            .iter()
            .find(|f| f.name == names::SCHEDULE_LAG)
            .unwrap();
        let h = lag.metric[0].histogram.as_ref().unwrap();
        // Sends on schedule (lag 0) are among the sample; every one is in a bucket.
        let mut running = 0;
        let in_buckets: i64 = h
            .positive_delta
            .iter()
            .map(|d| {
                running += d;
                running
            })
            .sum();
        assert_eq!(in_buckets as u64 + h.zero_count, h.sample_count);
        assert_eq!(h.bucket.last().unwrap().cumulative_count, h.sample_count);
    }

    #[test]
    fn an_empty_histogram_is_still_native() {
        let h = histogram(&Buckets::default());
        assert_eq!(h.positive_span.len(), 1);
        assert_eq!(h.positive_span[0].length, 0);
        assert!(h.positive_delta.is_empty());
        assert_eq!(h.bucket.len(), 1, "+Inf only");
    }
}
