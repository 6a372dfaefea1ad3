//! Any bytes through `wire::Repr::parse`; see `homa_fuzz::wire_decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| homa_fuzz::wire_decode(data));
