//! homa-io's batched UDP I/O with arbitrary sizes, runs and splits; see `homa_fuzz::io_batch`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| homa_fuzz::io_batch(data));
