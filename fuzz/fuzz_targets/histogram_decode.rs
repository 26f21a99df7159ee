//! Fuzzes the decoding of stored histograms (HdrHistogram V2 + DEFLATE, base64).
//! The property is `meshbench_fuzzcheck::histogram::histogram_decode`, shared with the stable corpus test.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| meshbench_fuzzcheck::histogram::histogram_decode(data));
