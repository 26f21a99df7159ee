//! Metric families as remote-write series, packed into requests.
//!
//! A counter or gauge member is one series named after its family. A histogram member becomes
//! its classic series (`_bucket` per `le`, `_count`, `_sum`: what every receiver takes, and
//! what `histogram_quantile` reads) and, separately, one native-histogram series under the
//! family's own name. Classic and native series travel in different requests ([`Lane`]), so a
//! receiver that refuses native histograms refuses only requests that carry nothing else.
//!
//! Packing keeps every series of one histogram member in one request, so a receiver never
//! holds the buckets of a point without its count; otherwise a request holds at most
//! `max_samples` samples (a single histogram with more buckets than that goes alone).

use std::collections::BTreeSet;

use crate::buckets::{Buckets, SCHEMA};
use crate::series::{Family, Kind, Value};

use super::proto::{
    stale_nan, BucketSpan, Count, Histogram, Label, MetricMetadata, MetricType, ResetHint, Sample,
    TimeSeries, WriteRequest, ZeroCount,
};

/// The zero bucket's width, as client libraries default it (2^-128): latencies are never in it.
const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

/// A series' identity: its labels sorted by name, `__name__` included.
pub type SeriesKey = Vec<Label>;

/// Which kind of request a series goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Float samples: counters, gauges, classic histogram series.
    Classic,
    /// Native histogram samples, which a receiver may refuse.
    Native,
}

/// One request before encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub lane: Lane,
    pub request: WriteRequest,
    /// Float samples in it.
    pub samples: u64,
    /// Native histogram samples in it.
    pub histograms: u64,
}

/// Series that must travel in one request, and the family they belong to.
#[derive(Debug, Clone)]
struct Unit {
    series: Vec<TimeSeries>,
    family: usize,
}

impl Unit {
    fn samples(&self) -> usize {
        self.series
            .iter()
            .map(|s| s.samples.len() + s.histograms.len())
            .sum()
    }
}

/// An `le` label value: the shortest decimal that reads back as the same float (never an
/// exponent), `+Inf` for the last bucket.
pub fn le_label(le: f64) -> String {
    if le.is_infinite() {
        "+Inf".to_string()
    } else {
        format!("{le}")
    }
}

fn key(
    name: String,
    labels: &[(&'static str, String)],
    extra: Option<(&str, String)>,
) -> SeriesKey {
    let mut out: Vec<Label> = Vec::with_capacity(labels.len() + 2);
    out.push(Label {
        name: "__name__".into(),
        value: name,
    });
    out.extend(labels.iter().map(|(n, v)| Label {
        name: n.to_string(),
        value: v.clone(),
    }));
    if let Some((n, v)) = extra {
        out.push(Label {
            name: n.to_string(),
            value: v,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn float(labels: SeriesKey, value: f64, t_ms: i64) -> TimeSeries {
    TimeSeries {
        labels,
        samples: vec![Sample {
            value,
            timestamp: t_ms,
        }],
        histograms: Vec::new(),
    }
}

/// A native histogram sample of `b` at `t_ms`.
pub fn native(b: &Buckets, t_ms: i64) -> Histogram {
    let (spans, deltas) = b.native_spans();
    Histogram {
        count: Some(Count::Int(b.count)),
        sum: b.sum,
        schema: SCHEMA,
        zero_threshold: ZERO_THRESHOLD,
        zero_count: Some(ZeroCount::Int(0)),
        positive_spans: spans
            .into_iter()
            .map(|(offset, length)| BucketSpan { offset, length })
            .collect(),
        positive_deltas: deltas,
        reset_hint: ResetHint::Unknown as i32,
        timestamp: t_ms,
    }
}

/// The stale marker of a native histogram series: a histogram whose sum is the stale NaN.
pub fn native_stale(t_ms: i64) -> Histogram {
    Histogram {
        count: Some(Count::Int(0)),
        sum: stale_nan(),
        schema: SCHEMA,
        zero_threshold: ZERO_THRESHOLD,
        zero_count: Some(ZeroCount::Int(0)),
        positive_spans: Vec::new(),
        positive_deltas: Vec::new(),
        reset_hint: ResetHint::Unknown as i32,
        timestamp: t_ms,
    }
}

fn metadata(f: &Family) -> MetricMetadata {
    MetricMetadata {
        r#type: match f.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        } as i32,
        metric_family_name: f.name.to_string(),
        help: f.help.to_string(),
        unit: f.unit.unwrap_or_default().to_string(),
    }
}

/// The series of one snapshot of `families` at `t_ms`, packed into requests: classic ones
/// first, then (with `natives`) the native histograms. Every series key written is added to
/// `classic_keys` or `native_keys`, for the stale markers at the end.
pub fn snapshot(
    families: &[Family],
    t_ms: i64,
    natives: bool,
    max_samples: usize,
    classic_keys: &mut BTreeSet<SeriesKey>,
    native_keys: &mut BTreeSet<SeriesKey>,
) -> Vec<Batch> {
    let mut classic: Vec<Unit> = Vec::new();
    let mut native_units: Vec<Unit> = Vec::new();
    for (fi, f) in families.iter().enumerate() {
        for m in &f.members {
            match &m.value {
                Value::Counter(v) | Value::Gauge(v) => classic.push(Unit {
                    series: vec![float(key(f.name.to_string(), &m.labels, None), *v, t_ms)],
                    family: fi,
                }),
                Value::Histogram(b) => {
                    let mut series: Vec<TimeSeries> = b
                        .classic()
                        .into_iter()
                        .map(|(le, c)| {
                            let k = key(
                                format!("{}_bucket", f.name),
                                &m.labels,
                                Some(("le", le_label(le))),
                            );
                            float(k, c as f64, t_ms)
                        })
                        .collect();
                    series.push(float(
                        key(format!("{}_count", f.name), &m.labels, None),
                        b.count as f64,
                        t_ms,
                    ));
                    series.push(float(
                        key(format!("{}_sum", f.name), &m.labels, None),
                        b.sum,
                        t_ms,
                    ));
                    classic.push(Unit { series, family: fi });
                    if natives {
                        native_units.push(Unit {
                            series: vec![TimeSeries {
                                labels: key(f.name.to_string(), &m.labels, None),
                                samples: Vec::new(),
                                histograms: vec![native(b, t_ms)],
                            }],
                            family: fi,
                        });
                    }
                }
            }
        }
    }
    for u in &classic {
        classic_keys.extend(u.series.iter().map(|s| s.labels.clone()));
    }
    for u in &native_units {
        native_keys.extend(u.series.iter().map(|s| s.labels.clone()));
    }
    let mut out = pack(classic, Lane::Classic, families, max_samples);
    out.extend(pack(native_units, Lane::Native, families, max_samples));
    out
}

/// Stale markers at `t_ms` for every series in `keys`, packed into requests of `lane`.
pub fn stale(keys: &BTreeSet<SeriesKey>, lane: Lane, t_ms: i64, max_samples: usize) -> Vec<Batch> {
    let units: Vec<Unit> = keys
        .iter()
        .map(|k| Unit {
            series: vec![match lane {
                Lane::Classic => float(k.clone(), stale_nan(), t_ms),
                Lane::Native => TimeSeries {
                    labels: k.clone(),
                    samples: Vec::new(),
                    histograms: vec![native_stale(t_ms)],
                },
            }],
            family: usize::MAX,
        })
        .collect();
    pack(units, lane, &[], max_samples)
}

/// Units into requests of at most `max_samples` samples, in order; a unit is never split.
fn pack(units: Vec<Unit>, lane: Lane, families: &[Family], max_samples: usize) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    let mut series: Vec<TimeSeries> = Vec::new();
    let mut fams: BTreeSet<usize> = BTreeSet::new();
    let mut n = 0usize;
    let flush = |series: &mut Vec<TimeSeries>, fams: &mut BTreeSet<usize>, out: &mut Vec<Batch>| {
        if series.is_empty() {
            return;
        }
        let samples = series.iter().map(|s| s.samples.len() as u64).sum();
        let histograms = series.iter().map(|s| s.histograms.len() as u64).sum();
        out.push(Batch {
            lane,
            request: WriteRequest {
                timeseries: std::mem::take(series),
                metadata: fams
                    .iter()
                    .filter_map(|&i| families.get(i))
                    .map(metadata)
                    .collect(),
            },
            samples,
            histograms,
        });
        fams.clear();
    };
    for u in units {
        let k = u.samples();
        if n > 0 && n + k > max_samples {
            flush(&mut series, &mut fams, &mut out);
            n = 0;
        }
        n += k;
        fams.insert(u.family);
        series.extend(u.series);
    }
    flush(&mut series, &mut fams, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::FamilyMember;
    use crate::{buckets, names};
    use hdrhistogram::Histogram as Hdr;

    fn labels() -> Vec<(&'static str, String)> {
        vec![
            (names::EXPERIMENT, "run".into()),
            (names::STEP, "0".into()),
            (names::VARIANT, "url".into()),
        ]
    }

    fn families(spread: u64) -> Vec<Family> {
        let mut h = Hdr::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for i in 0..spread {
            h.record(100 + i * 37).unwrap();
        }
        vec![
            Family {
                name: names::REQUESTS,
                help: "Requests.",
                kind: Kind::Counter,
                unit: None,
                members: vec![FamilyMember {
                    labels: labels(),
                    value: Value::Counter(spread as f64),
                }],
            },
            Family {
                name: names::LATENCY,
                help: "Latency.",
                kind: Kind::Histogram,
                unit: Some("seconds"),
                members: vec![FamilyMember {
                    labels: labels(),
                    value: Value::Histogram(Buckets::of_micros(&h)),
                }],
            },
        ]
    }

    #[test]
    fn labels_are_sorted_with_the_name() {
        let k = key(
            "x_bucket".into(),
            &labels(),
            Some(("le", "0.5".to_string())),
        );
        let names: Vec<&str> = k.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "experiment", "le", "step", "variant"]);
    }

    #[test]
    fn le_reads_back_as_the_same_float() {
        for i in [-700, -64, -1, 0, 1, 99, 400] {
            let le = buckets::upper_bound(i);
            let text = le_label(le);
            assert!(!text.contains('e'), "{text}");
            assert_eq!(text.parse::<f64>().unwrap(), le);
        }
        assert_eq!(le_label(f64::INFINITY), "+Inf");
    }

    #[test]
    fn a_histogram_is_never_split_and_requests_stay_under_the_limit() {
        let f = families(2_000);
        let Value::Histogram(b) = &f[1].members[0].value else {
            unreachable!()
        };
        let hist_series = b.classic().len() + 2;
        let (mut ck, mut nk) = (BTreeSet::new(), BTreeSet::new());
        // A limit smaller than the histogram: the counter alone, then the histogram alone.
        let small = snapshot(&f, 1_000, true, 10, &mut ck, &mut nk);
        let classic: Vec<&Batch> = small.iter().filter(|b| b.lane == Lane::Classic).collect();
        assert_eq!(classic.len(), 2);
        assert_eq!(classic[0].samples, 1);
        assert_eq!(classic[1].samples as usize, hist_series);
        // Metadata names the families a request carries.
        assert_eq!(
            classic[1].request.metadata[0].metric_family_name,
            names::LATENCY
        );
        assert_eq!(ck.len(), 1 + hist_series);
        // A large limit: one classic request with everything, one native request.
        let big = snapshot(&f, 1_000, true, 100_000, &mut ck, &mut nk);
        assert_eq!(big.len(), 2);
        assert_eq!(big[0].samples as usize, 1 + hist_series);
        assert_eq!(big[1].lane, Lane::Native);
        assert_eq!(big[1].histograms, 1);
        assert_eq!(nk.len(), 1);
        // Without natives, no native request.
        let none = snapshot(&f, 1_000, false, 100_000, &mut ck, &mut nk);
        assert!(none.iter().all(|b| b.lane == Lane::Classic));
        // Between the two: every request within the limit, unless one histogram alone.
        let limit = hist_series + 5;
        for b in snapshot(&f, 1_000, false, limit, &mut ck, &mut nk) {
            assert!(b.samples as usize <= limit);
        }
    }

    #[test]
    fn native_histogram_matches_the_buckets() {
        let f = families(500);
        let Value::Histogram(b) = &f[1].members[0].value else {
            unreachable!()
        };
        let h = native(b, 5);
        assert_eq!(h.count, Some(Count::Int(500)));
        assert_eq!(h.schema, SCHEMA);
        let total: i64 = h
            .positive_deltas
            .iter()
            .scan(0i64, |c, d| {
                *c += d;
                Some(*c)
            })
            .sum();
        assert_eq!(total as u64, b.count);
    }

    #[test]
    fn stale_markers_cover_every_key() {
        let f = families(300);
        let (mut ck, mut nk) = (BTreeSet::new(), BTreeSet::new());
        snapshot(&f, 1_000, true, 2_000, &mut ck, &mut nk);
        let classic = stale(&ck, Lane::Classic, 2_000, 50);
        let n: u64 = classic.iter().map(|b| b.samples).sum();
        assert_eq!(n as usize, ck.len());
        assert!(classic.iter().all(|b| b.samples <= 50));
        assert!(classic
            .iter()
            .flat_map(|b| &b.request.timeseries)
            .all(|s| super::super::proto::is_stale(s.samples[0].value)
                && s.samples[0].timestamp == 2_000));
        let native = stale(&nk, Lane::Native, 2_000, 50);
        assert_eq!(native.len(), 1);
        assert!(super::super::proto::is_stale(
            native[0].request.timeseries[0].histograms[0].sum
        ));
    }
}
