//! OpenMetrics 1.0.0 text through the `prometheus-client` crate: the families of one scrape
//! are handed to its encoder by a [`Collector`], so the crate writes the descriptors, the
//! suffixes (`_total`, `_bucket`, `_sum`, `_count`), the `# UNIT` lines, label escaping and
//! `# EOF`.
//!
//! The crate builds a family's name as `NAME` + `_UNIT`, and adds `_total` to counter
//! samples itself, so each family is registered under its name from [`names`](crate::names)
//! with those suffixes taken off; a name that does not end in them is a bug, reported as
//! [`EncodeError::Name`] rather than written wrong. Histograms are pre-aggregated: the crate's
//! `encode_histogram` takes *per-bucket* counts and sums them into the cumulative `le` values,
//! so the cumulative buckets of [`Buckets::classic`](crate::buckets::Buckets::classic) are
//! handed over as differences.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::EncodeError;
use crate::series::{Family, Kind, Value};

/// One scrape's families, as a collector the crate's registry calls once.
#[derive(Debug)]
struct Scrape {
    families: Vec<Prepared>,
}

/// A family with its name split as the crate wants it.
#[derive(Debug)]
struct Prepared {
    base: &'static str,
    unit: Option<Unit>,
    family: Family,
}

/// The families in OpenMetrics text, ending in `# EOF`.
pub fn encode(families: Vec<Family>) -> Result<String, EncodeError> {
    let families = families
        .into_iter()
        .map(|family| {
            let (base, unit) = split_name(&family)?;
            Ok(Prepared { base, unit, family })
        })
        .collect::<Result<Vec<_>, EncodeError>>()?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape { families }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .map_err(|_| EncodeError::Format("OpenMetrics"))?;
    Ok(out)
}

/// The name the crate is given (without `_total` and `_UNIT`) and the unit.
fn split_name(f: &Family) -> Result<(&'static str, Option<Unit>), EncodeError> {
    let bad = |reason: &'static str| EncodeError::Name {
        name: f.name,
        reason,
    };
    let mut base = f.name;
    if f.kind == Kind::Counter {
        base = base
            .strip_suffix("_total")
            .ok_or(bad("a counter must end in _total"))?;
    }
    let unit = match f.unit {
        None => None,
        Some(u) => {
            base = base
                .strip_suffix(u)
                .and_then(|b| b.strip_suffix('_'))
                .ok_or(bad("the name must end in its unit"))?;
            Some(match u {
                "seconds" => Unit::Seconds,
                "bytes" => Unit::Bytes,
                other => Unit::Other(other.to_string()),
            })
        }
    };
    Ok((base, unit))
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for p in &self.families {
            let f = &p.family;
            let metric_type = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut metric =
                encoder.encode_descriptor(p.base, f.help, p.unit.as_ref(), metric_type)?;
            for m in &f.members {
                let mut series = metric.encode_family(&m.labels)?;
                match &m.value {
                    Value::Counter(v) => series.encode_counter::<NoLabelSet, f64, f64>(v, None)?,
                    Value::Gauge(v) => series.encode_gauge(v)?,
                    Value::Histogram(b) => {
                        let mut below = 0;
                        let per_bucket: Vec<(f64, u64)> = b
                            .classic()
                            .into_iter()
                            .map(|(le, cumulative)| {
                                let n = cumulative - below;
                                below = cumulative;
                                (le, n)
                            })
                            .collect();
                        series.encode_histogram::<NoLabelSet>(b.sum, b.count, &per_bucket, None)?
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::sample_families;
    use crate::names;

    #[test]
    fn names_come_out_as_names_rs_says() {
        let text = encode(sample_families()).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        for (name, kind) in [
            (names::REQUESTS, "counter"),
            (names::ERRORS, "counter"),
            (names::ROLE_CPU, "counter"),
            (names::ROLE_RX, "counter"),
            (names::TARGET_RPS, "gauge"),
            (names::ROLE_MEMORY, "gauge"),
            (names::LATENCY, "histogram"),
        ] {
            let family = name.strip_suffix("_total").unwrap_or(name);
            assert!(
                text.contains(&format!("# TYPE {family} {kind}\n")),
                "{family} {kind} in\n{text}"
            );
            let sample = if kind == "histogram" {
                format!("{name}_count{{")
            } else {
                format!("{name}{{")
            };
            assert!(text.contains(&sample), "{sample} in\n{text}");
        }
        assert!(text.contains("# UNIT meshbench_latency_seconds seconds\n"));
        assert!(text.contains("# UNIT meshbench_role_memory_bytes bytes\n"));
        assert!(text.contains("# UNIT meshbench_role_cpu_seconds seconds\n"));
    }

    #[test]
    fn histogram_buckets_are_cumulative_as_classic_says() {
        let fams = sample_families();
        let latency = fams.iter().find(|f| f.name == names::LATENCY).unwrap();
        let Value::Histogram(b) = &latency.members[0].value else {
            panic!("a histogram")
        };
        let text = encode(fams.clone()).unwrap();
        let buckets: Vec<(String, u64)> = text
            .lines()
            .filter(|l| l.starts_with("meshbench_latency_seconds_bucket{"))
            .map(|l| {
                let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
                let v = l.rsplit(' ').next().unwrap().parse().unwrap();
                (le.to_string(), v)
            })
            .collect();
        let classic = b.classic();
        assert_eq!(buckets.len(), classic.len());
        for ((le, v), (cle, cv)) in buckets.iter().zip(&classic) {
            assert_eq!(v, cv, "le {le}");
            if cle.is_infinite() {
                assert_eq!(le, "+Inf");
            } else {
                assert_eq!(le.parse::<f64>().unwrap(), *cle);
            }
        }
        assert!(text.contains(&format!(
            "meshbench_latency_seconds_count{{experiment=\"e \\\"quoted\\\"\",step=\"0\",variant=\"baseline\"}} {}\n",
            b.count
        )));
    }

    #[test]
    fn a_misnamed_family_is_refused() {
        let mut fams = sample_families();
        fams[0].name = "meshbench_requests";
        assert!(matches!(
            encode(fams),
            Err(EncodeError::Name {
                name: "meshbench_requests",
                ..
            })
        ));
    }
}
