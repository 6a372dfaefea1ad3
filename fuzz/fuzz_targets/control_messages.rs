//! Received control messages from arbitrary and truncated bytes; see
//! `homa_fuzz::control_messages`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| homa_fuzz::control_messages(data));
