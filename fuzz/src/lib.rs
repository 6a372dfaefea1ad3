//! The bodies of homa's fuzz targets, as plain functions.
//!
//! Each file in `fuzz_targets/` is a one-line `fuzz_target!` that calls a function here, so
//! the same code runs under libFuzzer (nightly, `cargo fuzz run <target>`) and under a stable
//! `cargo test --lib`, whose [`replay`] test feeds every file of `corpus/<target>/` and
//! `regressions/<target>/` to the target's function. A target function panics exactly when
//! it has found a bug.

use homa_core::wire;

mod common;
mod control_messages;
mod endpoint_packets;
mod endpoint_pair;
mod grant_model;
mod io_batch;

pub use control_messages::control_messages;
pub use endpoint_packets::endpoint_packets;
pub use endpoint_pair::endpoint_pair;
pub use grant_model::grant_model;
pub use io_batch::io_batch;

/// A target's body: called once per input, panics on a bug.
pub type Target = fn(&[u8]);

/// Every target: its name (the file `fuzz_targets/<name>.rs`, the folders
/// `corpus/<name>/` and `regressions/<name>/`) and its body.
pub const TARGETS: &[(&str, Target)] = &[
    ("wire_decode", wire_decode),
    ("endpoint_packets", endpoint_packets),
    ("endpoint_pair", endpoint_pair),
    ("grant_model", grant_model),
    ("io_batch", io_batch),
    ("control_messages", control_messages),
];

/// Decodes arbitrary bytes as a Homa packet. Parsing may fail but must not panic; a packet
/// that parses must re-emit to exactly the bytes it was parsed from (the codec is faithful)
/// and parse again to an equal `Repr`.
pub fn wire_decode(data: &[u8]) {
    let Ok(repr) = wire::Repr::parse(data) else { return };
    let len = repr.buffer_len();
    assert!(len <= data.len(), "buffer_len {len} exceeds the {} bytes parsed", data.len());
    let mut out = vec![0; len];
    assert_eq!(repr.emit(&mut out), Ok(len), "emit into exactly buffer_len bytes");
    assert_eq!(out, data[..len], "re-emitted bytes differ from the parsed bytes");
    assert_eq!(wire::Repr::parse(&out), Ok(repr), "re-emitted bytes parse differently");
}

#[cfg(test)]
mod encode;
#[cfg(test)]
mod replay;
#[cfg(test)]
mod seeds;
