//! A client and a server through a faulty link; see `homa_fuzz::endpoint_pair`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| homa_fuzz::endpoint_pair(data));
