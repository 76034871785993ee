//! Any line of JSON Lines is parsed or refused with an error, never a panic (the fast path
//! that lifts content strings out of the line included).
#![no_main]

use fastfeed_core::jsonl::parse_line;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    let _ = parse_line(0, line);
});
