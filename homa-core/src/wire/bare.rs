//! RPC_UNKNOWN (0x13), BUSY (0x14), FREEZE (0x16) and NEED_ACK (0x17): packets that are the
//! 28-byte common header alone; `sender_id` and the ports name the RPC.
//!
//! - RPC_UNKNOWN answers a RESEND for an RPC the replier does not have.
//! - BUSY says "alive, but not sending now" and keeps the RPC from timing out.
//! - FREEZE freezes the receiver's timetrace; a debugging aid never sent to production peers.
//! - NEED_ACK: a server asks a client to acknowledge a finished RPC.
//!
//! Their view is [`header::Packet`](super::header::Packet); there is no body to represent.

pub use super::header::HEADER_LEN;
