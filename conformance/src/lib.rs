//! Homa's conformance suite: language-neutral JSON vectors under `vectors/` (wire vectors and
//! scenario vectors) and the Rust runner that checks `homa-core` against them. See `README.md`
//! for the file formats.

pub mod fields;
pub mod scenarios;
pub mod vectors;
