//! A latency histogram (HDR, microseconds) as Prometheus buckets, both kinds from one set of
//! boundaries: the exponential buckets of native-histogram schema [`SCHEMA`], each 2^(1/64)
//! (1.09 %) wider than the last.
//!
//! - Classic buckets (`le`) are *sparse*: a boundary is written only where a bucket has counts,
//!   together with the boundary below it, so that `histogram_quantile` always interpolates
//!   inside one 1.09 % bucket (a p99 read back is within that of the HDR figure) while a run
//!   whose latencies span 100 µs to 2 ms writes a few hundred series, not thousands.
//! - Native buckets are the same indices, as spans and deltas, for scrapers and receivers that
//!   take native histograms.
//!
//! Values come from the histogram's recorded buckets (3 significant digits: 0.1 % wide), so the
//! count of every bucket is exact and the sum is exact to that resolution.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

/// Native-histogram schema: bucket `i` holds values in (2^((i-1)/64), 2^(i/64)].
pub const SCHEMA: i32 = 6;
const PER_OCTAVE: f64 = (1u32 << SCHEMA) as f64;

/// A histogram's buckets by native index, and its totals, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    /// Count per bucket index (non-empty buckets only), ascending.
    pub counts: BTreeMap<i32, u64>,
    pub count: u64,
    /// Sum of the values, seconds.
    pub sum: f64,
}

/// The upper boundary of bucket `index`, in seconds.
pub fn upper_bound(index: i32) -> f64 {
    (index as f64 / PER_OCTAVE).exp2()
}

/// The bucket a value (seconds, > 0) falls in.
pub fn index_of(value: f64) -> i32 {
    let i = (value.log2() * PER_OCTAVE).ceil() as i32;
    // Correct floating-point error at the boundaries: the bucket is (upper(i-1), upper(i)].
    if value <= upper_bound(i - 1) {
        i - 1
    } else if value > upper_bound(i) {
        i + 1
    } else {
        i
    }
}

impl Buckets {
    /// The buckets of an HDR histogram of microseconds. A recorded 0 (a send exactly on
    /// schedule) counts in the bucket of 1 µs, the histogram's resolution: the exponential
    /// buckets have no place for zero, and the classic ones then still count it below every
    /// boundary.
    pub fn of_micros(h: &Histogram<u64>) -> Buckets {
        let mut b = Buckets::default();
        for v in h.iter_recorded() {
            let n = v.count_since_last_iteration();
            let secs = h.highest_equivalent(v.value_iterated_to()) as f64 / 1e6;
            *b.counts.entry(index_of(secs.max(1e-6))).or_default() += n;
            b.count += n;
            b.sum += secs * n as f64;
        }
        b
    }

    /// Classic cumulative buckets `(le, count)`, ascending, ending with `+Inf`: every non-empty
    /// bucket's upper boundary and the boundary below it.
    pub fn classic(&self) -> Vec<(f64, u64)> {
        let mut out: Vec<(f64, u64)> = Vec::with_capacity(self.counts.len() * 2 + 1);
        let mut below = 0;
        let mut last: Option<i32> = None;
        for (&i, &n) in &self.counts {
            if last != Some(i - 1) {
                out.push((upper_bound(i - 1), below));
            }
            below += n;
            out.push((upper_bound(i), below));
            last = Some(i);
        }
        out.push((f64::INFINITY, self.count));
        out
    }

    /// Native buckets as the wire wants them: spans `(offset, length)` (the first offset from
    /// index 0, the others from the end of the span before) and, per bucket, the difference
    /// of its count from the previous bucket's.
    pub fn native_spans(&self) -> (Vec<(i32, u32)>, Vec<i64>) {
        let mut spans: Vec<(i32, u32)> = Vec::new();
        let mut deltas = Vec::with_capacity(self.counts.len());
        let mut prev_count = 0i64;
        let mut next_index: Option<i32> = None;
        for (&i, &n) in &self.counts {
            match next_index {
                Some(next) if next == i => spans.last_mut().expect("a span is open").1 += 1,
                Some(next) => spans.push((i - next, 1)),
                None => spans.push((i, 1)),
            }
            next_index = Some(i + 1);
            deltas.push(n as i64 - prev_count);
            prev_count = n as i64;
        }
        (spans, deltas)
    }

    /// The `q` quantile as `histogram_quantile` reads the classic buckets: linear inside the
    /// bucket the rank falls in. For tests and for checking what a dashboard will show.
    pub fn classic_quantile(&self, q: f64) -> f64 {
        let buckets = self.classic();
        let rank = q * self.count as f64;
        let mut prev = (0.0, 0u64);
        for &(le, c) in &buckets {
            if c as f64 >= rank && c > 0 {
                if le.is_infinite() {
                    return prev.0;
                }
                let within = (rank - prev.1 as f64) / (c - prev.1).max(1) as f64;
                return prev.0 + (le - prev.0) * within;
            }
            prev = (le, c);
        }
        prev.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 60_000_000, 3).unwrap();
        for &v in values {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn indices_hold_their_values() {
        for v in [1e-6, 3.3e-5, 1e-3, 0.0123, 1.0, 2.0, 59.9] {
            let i = index_of(v);
            assert!(upper_bound(i - 1) < v && v <= upper_bound(i), "{v} in {i}");
        }
        // Powers of two are upper boundaries.
        assert_eq!(index_of(1.0), 0);
        assert_eq!(index_of(2.0), 64);
        assert_eq!(index_of(0.5), -64);
    }

    #[test]
    fn classic_buckets_are_cumulative_and_exact() {
        let h = hist(&[100, 100, 250, 1000, 1000, 1000, 40_000]);
        let b = Buckets::of_micros(&h);
        assert_eq!(b.count, 7);
        let c = b.classic();
        assert_eq!(c.last().unwrap(), &(f64::INFINITY, 7));
        assert!(c.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        // Each value's bucket is present with the boundary below it.
        let at = |v: f64| c.iter().find(|(le, _)| *le >= v).unwrap().1;
        assert_eq!(at(100e-6), 2);
        assert_eq!(at(250e-6), 3);
        assert_eq!(at(1e-3), 6);
        assert!((b.sum - 0.04345).abs() < 0.04345 * 0.002, "{}", b.sum);
    }

    #[test]
    fn a_zero_counts_in_the_lowest_bucket() {
        let b = Buckets::of_micros(&hist(&[0, 0, 5]));
        assert_eq!(b.count, 3);
        assert_eq!(b.counts.get(&index_of(1e-6)), Some(&2));
        assert_eq!(b.classic().first().unwrap().1, 0);
    }

    #[test]
    fn quantiles_read_back_within_a_bucket() {
        // A spread of latencies 50 µs .. 20 ms.
        let mut values = Vec::new();
        let mut x: u64 = 12345;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            values.push(
                50 + (x >> 33) % 2_000
                    + if (x >> 20).is_multiple_of(100) {
                        15_000
                    } else {
                        0
                    },
            );
        }
        let h = hist(&values);
        let b = Buckets::of_micros(&h);
        for q in [0.5, 0.9, 0.99, 0.999] {
            let hdr = h.value_at_quantile(q) as f64 / 1e6;
            let read = b.classic_quantile(q);
            assert!(((read - hdr) / hdr).abs() < 0.02, "q{q}: {read} vs {hdr}");
        }
    }

    #[test]
    fn native_spans_cover_the_buckets() {
        let h = hist(&[100, 101, 250, 1000, 40_000]);
        let b = Buckets::of_micros(&h);
        let (spans, deltas) = b.native_spans();
        assert_eq!(
            spans.iter().map(|s| s.1 as usize).sum::<usize>(),
            b.counts.len()
        );
        // Decode and compare.
        let mut idx = 0;
        let mut count = 0i64;
        let mut decoded = BTreeMap::new();
        let mut d = deltas.iter();
        // The first offset counts from index 0, the others from the end of the span before.
        for (offset, len) in &spans {
            idx += offset;
            for _ in 0..*len {
                count += d.next().unwrap();
                decoded.insert(idx, count as u64);
                idx += 1;
            }
        }
        assert_eq!(decoded, b.counts);
    }
}
