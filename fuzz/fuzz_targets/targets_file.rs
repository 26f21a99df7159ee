//! Fuzzes targets file parsing (and the templates its request lines hold) with any text.
//! The property is `meshbench_fuzzcheck::targets::targets_file`, shared with the stable corpus test.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| meshbench_fuzzcheck::targets::targets_file(data));
