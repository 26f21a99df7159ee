//! Fuzzes experiment files and `--set` overrides: read, checked and planned.
//! The property is `meshbench_fuzzcheck::experiment::experiment_file`, shared with the stable corpus test.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| meshbench_fuzzcheck::experiment::experiment_file(data));
