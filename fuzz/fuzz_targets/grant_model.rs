//! The grant scheduler against a model of SRPT with overcommitment; see `homa_fuzz::grant_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| homa_fuzz::grant_model(data));
