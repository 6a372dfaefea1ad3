//! Homa, the receiver-driven datacenter transport, as a sans-IO state machine.
//!
//! This crate holds the protocol and nothing else: no sockets, threads, clocks or
//! randomness. [`wire`] encodes and decodes every packet exactly as the Linux kernel
//! module (HomaModule) puts it on the wire.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(test)]
extern crate alloc;

pub mod wire;
