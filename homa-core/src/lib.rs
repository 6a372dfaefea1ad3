//! Homa, the receiver-driven datacenter transport, as a sans-IO state machine.
//!
//! This crate holds the protocol and nothing else: no sockets, threads, clocks or
//! randomness. [`wire`] encodes and decodes every packet exactly as the Linux kernel
//! module (HomaModule) puts it on the wire.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;

pub mod config;
mod endpoint;
pub mod error;
pub mod metrics;
mod msg;
mod peer;
mod rpc;
mod sched;
#[cfg(feature = "testnet")]
pub mod testnet;
pub mod time;
mod timer;
pub mod wire;

pub use config::{Config, ConfigError};
pub use endpoint::{Endpoint, Event, FailReason, MIN_EPHEMERAL_PORT, ServerRpc, Transmit};
pub use error::ApiError;
pub use metrics::Metrics;
pub use msg::Payload;
pub use time::Instant;
