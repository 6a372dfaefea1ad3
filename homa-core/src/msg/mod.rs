//! Messages: the sender's packetisation and grant state, the receiver's reassembly.

pub(crate) mod incoming;
pub(crate) mod outgoing;

pub use outgoing::{Payload, PayloadSlice};
