//! Homa's conformance suite: language-neutral JSON vectors under `vectors/` and the Rust
//! runner that checks `homa-core` against them. See `README.md` for the file format.

pub mod fields;
pub mod vectors;
