#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::json_text(data));
