//! Fuzzes URL template parsing and rendering with any text.
//! The property is `meshbench_fuzzcheck::targets::url_template`, shared with the stable corpus test.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| meshbench_fuzzcheck::targets::url_template(data));
