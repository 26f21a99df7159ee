//! Fuzzes the client's HTTP/1.1 response reader with what a server might send, cut into reads.
//! The property is `meshbench_fuzzcheck::http1::http1_response`, shared with the stable corpus test.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| meshbench_fuzzcheck::http1::http1_response(data));
