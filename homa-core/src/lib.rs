//! Homa, the receiver-driven datacenter transport, as a sans-IO state machine.
//!
//! This crate holds the protocol and nothing else: no sockets, threads, clocks or
//! randomness. [`wire`] encodes and decodes every packet exactly as the Linux kernel module
//! (HomaModule) puts it on the wire; [`Endpoint`] is one host's Homa stack, behaving as the
//! module does: RPCs with at-most-once servers, unscheduled bytes then receiver grants in
//! SRPT order with overcommitment, priorities from CUTOFFS and GRANTs, a pacer, and
//! receiver-driven loss recovery.
//!
//! # Driving an `Endpoint`
//!
//! The caller owns the socket and the clock. Inputs are [`Endpoint::handle_packet`] (or,
//! for a DATA packet received straight into its message, [`Endpoint::place`]),
//! [`Endpoint::handle_timeout`] and the API calls
//! (`send_request`, `send_response`, `abort`, `bind`, ...); each takes the current time as an
//! [`Instant`] (nanoseconds from any origin).
//! Outputs are packets ([`Endpoint::poll_transmit`]; [`Endpoint::poll_transmit_gather`]
//! for a vectored send that leaves long messages' bytes where they are;
//! [`Endpoint::poll_transmit_run`] for a GSO send of one message's packets), events
//! ([`Endpoint::poll_event`]) and a deadline ([`Endpoint::poll_timeout`]). The rule:
//!
//! 1. after **any** input (or a batch of inputs handed in at one `now`, e.g. the packets of
//!    one receive call), call `poll_transmit` until it returns `Ok(None)` and `poll_event`
//!    until it returns `None`;
//! 2. then read `poll_timeout` and sleep until that time or until a packet arrives;
//! 3. when the deadline passes, call `handle_timeout(now)` and go to 1. (An I/O layer that
//!    can count the packets its host dropped, a full socket buffer, says so first with
//!    [`Endpoint::note_input_drops`].)
//!
//! A batch answers its packets together: a run of DATA packets of one message (a GRO
//! batch) is looked up once and its bookkeeping (the grant decision, the loss timer) done
//! once, at the next input or output that is not more of that run. [`Endpoint::metrics`]
//! counts that run's GRANT only then. Control packets wait in a queue of
//! `Config::max_pending_control`, which must hold what one batch can cause.
//!
//! `poll_timeout` returns a time at or before now whenever output is ready (including the
//! pacer's next slot), so a loop that follows the rule never stalls; calling
//! `handle_timeout` early is harmless, and an idle `poll_timeout` is O(1).
//!
//! ```
//! use homa_core::{Config, Endpoint, Event, Instant};
//! use std::net::SocketAddr;
//!
//! let (a_addr, b_addr): (SocketAddr, SocketAddr) =
//!     ("198.18.0.1:4000".parse().unwrap(), "198.18.0.2:4000".parse().unwrap());
//! let mut client = Endpoint::new(Config::default()).unwrap();
//! let mut server = Endpoint::new(Config::default()).unwrap();
//! server.bind(99).unwrap();
//! let port = client.bind_ephemeral().unwrap();
//!
//! let mut now = Instant::ZERO;
//! let id = client.send_request(now, port, b_addr, 99, b"ping".to_vec(), 7).unwrap();
//! let mut buf = vec![0; client.config().max_packet_len()];
//! let mut response = None;
//! while response.is_none() {
//!     // Move every ready packet across (a real driver sends them on a socket).
//!     while let Some(t) = client.poll_transmit(now, &mut buf).unwrap() {
//!         server.handle_packet(now, a_addr, &buf[..t.len]).unwrap();
//!     }
//!     while let Some(t) = server.poll_transmit(now, &mut buf).unwrap() {
//!         client.handle_packet(now, b_addr, &buf[..t.len]).unwrap();
//!     }
//!     while let Some(event) = server.poll_event() {
//!         if let Event::RequestReceived { rpc, message, .. } = event {
//!             server.send_response(now, rpc, message).unwrap(); // echo
//!         }
//!     }
//!     while let Some(event) = client.poll_event() {
//!         response = Some(event);
//!     }
//!     // Nothing ready: jump to the next deadline (a real driver sleeps until it).
//!     if let Some(deadline) = client.poll_timeout().into_iter().chain(server.poll_timeout()).min() {
//!         now = now.max(deadline);
//!         client.handle_timeout(now);
//!         server.handle_timeout(now);
//!     }
//! }
//! assert_eq!(response, Some(Event::ResponseReceived { id, cookie: 7, message: b"ping".to_vec() }));
//! ```
//!
//! # Errors
//!
//! Malformed bytes give a [`wire::Error`] from `handle_packet` (the packet is dropped and
//! counted, nothing else changes). API misuse gives an [`ApiError`] and changes nothing.
//! A failed RPC is one [`Event::RpcFailed`] with the reason. No input from a peer can make
//! the endpoint panic, and the limits in [`Config`] bound its memory.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod addr;
pub mod config;
mod downlink;
mod endpoint;
pub mod error;
mod host;
pub mod metrics;
mod msg;
mod overload;
mod peer;
mod rpc;
mod sched;
#[cfg(feature = "testnet")]
pub mod testnet;
pub mod time;
mod timer;
pub mod value;
pub mod wire;
pub mod workload;

pub use config::{Config, ConfigError};
pub use endpoint::{
    BufferTooShort, Endpoint, Event, FailReason, MIN_EPHEMERAL_PORT, Run, ServerRpc, Transmit,
};
pub use error::ApiError;
pub use metrics::Metrics;
pub use msg::{Payload, PayloadSlice};
pub use rpc::{Phase, Progress, RpcInfo};
pub use time::Instant;
pub use value::{Map, Value};
