//! `histogram_decode`: the histograms a stored step or a `--json` result carries (HdrHistogram
//! V2 + DEFLATE, base64), decoded as the analysis and the reports decode them. Any text must
//! decode or be refused with an error: no panic, and no allocation out of proportion to the
//! input (a header may claim gigabytes). What decodes answers its percentiles, merges into the
//! engine's own histogram as the analysis merges repeats, and survives encoding again.
//!
//! Input: bytes, read twice: as the stored text itself, and as the binary form under the
//! base64 (so the fuzzer reaches the headers and the compressed stream, not only the alphabet).

use base64::Engine as _;
use meshbench_results::histogram::{decode_histogram, encode_histogram, new_histogram};

/// The check of one input.
pub fn histogram_decode(data: &[u8]) {
    decoded(&String::from_utf8_lossy(data));
    decoded(&base64::engine::general_purpose::STANDARD.encode(data));
}

fn decoded(text: &str) {
    let Ok(h) = decode_histogram(text) else {
        return;
    };
    for q in [0.0, 0.5, 0.99, 0.999, 1.0] {
        let _ = h.value_at_quantile(q);
    }
    let _ = (h.min(), h.max(), h.mean(), h.stdev(), h.len());
    let mut merged = new_histogram();
    let _ = merged.add(&h);
    let again = decode_histogram(&encode_histogram(&h)).expect("an encoded histogram decodes");
    assert_eq!(again, h, "encoding and decoding changed the histogram");
}
