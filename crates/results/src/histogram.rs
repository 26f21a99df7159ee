//! The histograms a result carries: their bounds ([`new_histogram`]) and their transport form: HdrHistogram's V2 encoding, DEFLATE-compressed, in base64
//! (what a stored step, a `--json` result and an agent's report carry), and its decoder.
//!
//! The decoder reads text that may come from anywhere (a store file, a result someone sent), so
//! it checks what the `hdrhistogram` crate's deserializer trusts before handing it over: the
//! compressed stream inflates to a bounded size, the payload length the header claims is
//! present (the crate allocates it first), the histogram's counters fit in [`MAX_COUNTS`] (a
//! 40-byte header can ask for 50 MB), and every count and run of zeros in the payload is one a
//! histogram can hold (the crate panics on some, in builds with overflow checks).

use std::io::Read as _;

use base64::Engine as _;
use flate2::read::ZlibDecoder;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use thiserror::Error;

/// Largest value a histogram holds: 60 s in microseconds.
pub const HIST_MAX_US: u64 = 60_000_000;

/// A latency histogram in microseconds, 1 µs to 60 s, 3 significant digits: the bounds of
/// every histogram a result carries, so that any two add exactly.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("static histogram bounds are valid")
}

/// A coarse histogram (2 significant digits, ~30 KiB) for once-a-second timeline points.
pub fn new_interval_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 2).expect("static histogram bounds are valid")
}

/// Most counters a decoded histogram may have: 16 MiB of them. The engine's own latency
/// histogram (1 µs to 60 s, 3 digits) has 17,408; a 5-digit one up to an hour still fits.
pub const MAX_COUNTS: u64 = 1 << 21;

/// The V2 cookie, plain and compressed.
const V2: u32 = 0x1c84_9313;
const V2_DEFLATE: u32 = 0x1c84_9314;
/// cookie, payload length, normalizing offset, digits, lowest, highest, integer-to-double ratio.
const HEADER_BYTES: usize = 40;
/// A counter takes at most 9 bytes in the payload.
const MAX_V2_BYTES: usize = HEADER_BYTES + 9 * MAX_COUNTS as usize;

/// Why a histogram could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("histogram is not base64: {0}")]
    Base64(String),
    #[error("histogram is not HdrHistogram V2: {0}")]
    Format(String),
}

fn format(why: impl Into<String>) -> DecodeError {
    DecodeError::Format(why.into())
}

/// `#[serde(with = ...)]` forms of the engine's histograms in a message (an agent's seconds and
/// its recorder): the transport text, decoded into a histogram of the engine's own bounds, so
/// that whatever a peer sent adds to the engine's histograms without error.
macro_rules! serde_form {
    ($name:ident, $fresh:path, $doc:literal) => {
        #[doc = $doc]
        pub mod $name {
            use hdrhistogram::Histogram;
            use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

            pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&super::encode_histogram(h))
            }

            pub fn deserialize<'de, D: Deserializer<'de>>(
                d: D,
            ) -> Result<Histogram<u64>, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                let sent = super::decode_histogram(&text).map_err(D::Error::custom)?;
                let mut h = $fresh();
                h.add(&sent).map_err(|_| {
                    D::Error::custom(format!(
                        "histogram holds {} µs, beyond the engine's {} µs",
                        sent.max(),
                        crate::histogram::HIST_MAX_US
                    ))
                })?;
                Ok(h)
            }
        }
    };
}

serde_form!(
    latency_form,
    crate::histogram::new_histogram,
    "A 3-digit histogram (latency, service time) in a message."
);
serde_form!(
    coarse_form,
    crate::histogram::new_interval_histogram,
    "A 2-digit histogram (a second's schedule lag) in a message."
);

/// Encodes a histogram as base64 of its compressed V2 form.
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    // Serialising into a Vec cannot fail for histograms built by this crate.
    if V2DeflateSerializer::new().serialize(h, &mut buf).is_err() {
        return String::new();
    }
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Decodes what [`encode_histogram`] wrote (or the uncompressed V2 form); anything else is an
/// error, with memory bounded by [`MAX_COUNTS`] whatever the text claims.
pub fn decode_histogram(s: &str) -> Result<Histogram<u64>, DecodeError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| DecodeError::Base64(e.to_string()))?;
    let plain;
    let v2: &[u8] = match be_u32(&bytes, 0) {
        Some(V2) => &bytes,
        Some(V2_DEFLATE) => {
            let len = be_u32(&bytes, 4).ok_or_else(|| format("no compressed length"))? as usize;
            let compressed = bytes
                .get(8..)
                .and_then(|rest| rest.get(..len))
                .ok_or_else(|| {
                    format(format!("{len} compressed bytes announced, fewer present"))
                })?;
            plain = inflate(compressed)?;
            &plain
        }
        Some(cookie) => return Err(format(format!("unknown cookie {cookie:#010x}"))),
        None => return Err(format("shorter than its cookie")),
    };
    check_v2(v2)?;
    Deserializer::new()
        .deserialize(&mut &v2[..])
        .map_err(|e| format(e.to_string()))
}

/// Inflates a zlib stream, refusing one that grows beyond what a histogram can need.
fn inflate(compressed: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    ZlibDecoder::new(compressed)
        .take(MAX_V2_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format(format!("bad compressed stream: {e}")))?;
    if out.len() > MAX_V2_BYTES {
        return Err(format(format!(
            "inflates to more than {MAX_V2_BYTES} bytes"
        )));
    }
    Ok(out)
}

/// Checks an uncompressed V2 histogram for what the deserializer would trust.
fn check_v2(v2: &[u8]) -> Result<(), DecodeError> {
    let header = v2
        .get(..HEADER_BYTES)
        .ok_or_else(|| format("shorter than its header"))?;
    if be_u32(header, 0) != Some(V2) {
        return Err(format("the compressed stream holds no V2 histogram"));
    }
    let payload_len = be_u32(header, 4).unwrap_or(0) as usize;
    let digits = be_u32(header, 12).unwrap_or(0);
    let low = be_u64(header, 16).unwrap_or(0);
    let high = be_u64(header, 24).unwrap_or(0);
    let payload = v2[HEADER_BYTES..].get(..payload_len).ok_or_else(|| {
        format(format!(
            "{payload_len} payload bytes announced, fewer present"
        ))
    })?;
    let counts = counts_len(low, high, digits).ok_or_else(|| {
        format(format!(
            "bounds {low}..{high} with {digits} significant digits make no histogram"
        ))
    })?;
    if counts > MAX_COUNTS {
        return Err(format(format!(
            "bounds {low}..{high} with {digits} digits need {counts} counters, at most {MAX_COUNTS} are decoded"
        )));
    }
    // The payload: zig-zag LEB128 numbers (the ninth byte whole), a count or a run of zeros.
    let (mut at, mut index, mut total) = (0, 0u64, 0u64);
    while at < payload.len() {
        let mut value = 0u64;
        let mut i = 0;
        loop {
            let b = *payload
                .get(at + i)
                .ok_or_else(|| format("the payload ends inside a number"))?;
            if i == 8 {
                value |= u64::from(b) << 56;
                break;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
            i += 1;
        }
        at += i + 1;
        let n = ((value >> 1) as i64) ^ -((value & 1) as i64);
        if n < 0 {
            // A run of -n zero counters; i64::MIN has no negation.
            let zeros = n
                .checked_neg()
                .ok_or_else(|| format("a run of 2^63 zeros"))?;
            index = index.saturating_add(zeros as u64);
        } else {
            if n > 0 {
                if index >= counts {
                    return Err(format(format!("a count at position {index} of {counts}")));
                }
                total = total
                    .checked_add(n as u64)
                    .ok_or_else(|| format("counts add up to more than 2^64"))?;
            }
            index = index.saturating_add(1);
        }
    }
    Ok(())
}

/// How many counters HdrHistogram allocates for these bounds, or None if it would refuse them.
/// Values up to 2·10^digits are kept exactly ("sub-buckets", a power of two in number), each
/// further power of two of range adds half as many again. (The crate takes log2 of `low` in
/// floating point, so near 2^63 it may refuse bounds this accepts; then the crate says why.)
fn counts_len(low: u64, high: u64, digits: u32) -> Option<u64> {
    if !(1..=u64::MAX / 2).contains(&low) || digits > 5 || high < low.checked_mul(2)? {
        return None;
    }
    let exact = 2 * 10u64.pow(digits);
    let sub_bucket_magnitude = (64 - (exact - 1).leading_zeros()).max(1);
    let half_magnitude = sub_bucket_magnitude - 1;
    let unit_magnitude = 63 - low.leading_zeros();
    if unit_magnitude + half_magnitude + 1 > 63 {
        return None;
    }
    let sub_buckets = 1u64 << (half_magnitude + 1);
    let mut untrackable = sub_buckets << unit_magnitude;
    let mut buckets = 1u64;
    while untrackable <= high {
        if untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        untrackable <<= 1;
        buckets += 1;
    }
    Some((buckets + 1) * (sub_buckets / 2))
}

/// Big-endian numbers at a byte offset, if the bytes are there.
fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// An uncompressed V2 header.
    fn header(payload_len: u32, digits: u32, low: u64, high: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for word in [V2, payload_len, 0, digits] {
            b.extend_from_slice(&word.to_be_bytes());
        }
        b.extend_from_slice(&low.to_be_bytes());
        b.extend_from_slice(&high.to_be_bytes());
        b.extend_from_slice(&1.0f64.to_be_bytes());
        b
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn deflated(v2: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(v2).unwrap();
        let z = z.finish().unwrap();
        let mut b = V2_DEFLATE.to_be_bytes().to_vec();
        b.extend_from_slice(&(z.len() as u32).to_be_bytes());
        b.extend_from_slice(&z);
        b
    }

    #[test]
    fn the_counter_count_is_the_crates() {
        for (low, high, digits) in [
            (1, crate::histogram::HIST_MAX_US, 3),
            (1, crate::histogram::HIST_MAX_US, 2),
            (1, 2, 0),
            (1, u64::MAX, 5),
            (1000, 3_600_000_000, 4),
            (7, 1 << 40, 1),
            (1 << 50, u64::MAX, 3),
            (1 << 62, u64::MAX, 0),
        ] {
            let h = Histogram::<u8>::new_with_bounds(low, high, digits as u8).unwrap();
            assert_eq!(
                counts_len(low, high, digits),
                Some(h.distinct_values() as u64),
                "{low}..{high}, {digits} digits"
            );
        }
        assert_eq!(counts_len(1, u64::MAX, 6), None);
        assert_eq!(counts_len(0, 10, 3), None);
        assert_eq!(counts_len(10, 19, 3), None);
        assert_eq!(counts_len(1 << 60, u64::MAX, 3), None);
        assert_eq!(
            counts_len(1, crate::histogram::HIST_MAX_US, 3),
            Some(17_408)
        );
    }

    #[test]
    fn what_the_engine_writes_decodes_compressed_or_not() {
        for mut h in [new_histogram(), new_interval_histogram()] {
            for v in [1, 7, 999, 1_000_000, 59_000_000] {
                h.record_n(v, v).unwrap();
            }
            assert_eq!(decode_histogram(&encode_histogram(&h)).unwrap(), h);
            let mut v2 = Vec::new();
            hdrhistogram::serialization::V2Serializer::new()
                .serialize(&h, &mut v2)
                .unwrap();
            assert_eq!(decode_histogram(&b64(&v2)).unwrap(), h);
        }
    }

    #[test]
    fn hostile_text_is_refused_with_bounded_memory() {
        let mut bomb = header(u32::MAX, 3, 1, 60_000_000);
        bomb.resize(MAX_V2_BYTES + 100, 0);
        let mut run_of_2_pow_63 = header(9, 3, 1, 60_000_000);
        run_of_2_pow_63.extend([0xff; 9]);
        let mut count_overflow = header(27, 3, 1, 60_000_000);
        for _ in 0..3 {
            // zig-zag of i64::MAX
            count_overflow.extend([0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        }
        let mut beyond = header(3, 0, 1, 2);
        beyond.extend([0x07, 0x02, 0x02]); // 3 zeros skipped, then a count past the end
        let cases: &[(&str, String, &str)] = &[
            ("not base64", "not base64!".into(), "not base64"),
            ("empty", String::new(), "shorter than its cookie"),
            (
                "unknown cookie",
                b64(b"\x1c\x84\x93\x02rest"),
                "unknown cookie",
            ),
            (
                "header only",
                b64(&header(0, 3, 1, 60_000_000)[..39]),
                "shorter than its header",
            ),
            (
                "4 GiB payload announced",
                b64(&header(u32::MAX, 3, 1, 60_000_000)),
                "payload bytes announced",
            ),
            (
                "50 MB of counters",
                b64(&header(0, 5, 1, u64::MAX)),
                "counters",
            ),
            (
                "bad bounds",
                b64(&header(0, 3, 10, 11)),
                "make no histogram",
            ),
            (
                "deflate bomb",
                b64(&deflated(&bomb)),
                "inflates to more than",
            ),
            (
                "short compressed",
                b64(&deflated(&header(0, 3, 1, 9))[..12]),
                "compressed bytes announced",
            ),
            ("run of 2^63 zeros", b64(&run_of_2_pow_63), "2^63"),
            ("counts overflow", b64(&count_overflow), "2^64"),
            ("count past the end", b64(&beyond), "position"),
            (
                "cut number",
                b64(&{
                    let mut b = header(1, 3, 1, 9);
                    b.push(0x80);
                    b
                }),
                "inside a number",
            ),
        ];
        for (name, text, words) in cases {
            let Err(e) = decode_histogram(text) else {
                panic!("{name}: decoded");
            };
            let e = e.to_string();
            assert!(e.contains(words), "{name}: {e}");
        }
    }
}
