//! One endpoint fed packets, API calls and clock jumps; see `homa_fuzz::endpoint_packets`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| homa_fuzz::endpoint_packets(data));
