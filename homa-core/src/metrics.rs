//! Counters an endpoint keeps, readable as plain data with [`Endpoint::metrics`].
//!
//! Every packet handed to `handle_packet` is counted once in `packets_in` and either
//! accepted or dropped for exactly one reason:
//! `packets_in == accepted + drops.total()`.
//!
//! [`Endpoint::metrics`]: crate::Endpoint::metrics

use crate::wire::PacketType;

/// Counts per packet type, indexed by `code - 0x10` (DATA first, ACK last).
pub type PerType = [u64; 9];

pub(crate) fn type_index(t: PacketType) -> usize {
    usize::from(t.code() - PacketType::Data.code())
}

/// Why an incoming packet was dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// Not a valid Homa packet (`wire::Error`).
    pub malformed: u64,
    /// Addressed to a port nobody bound (or a request to a client-only port).
    pub no_port: u64,
    /// Names an RPC this endpoint does not have, for a type that needs one.
    pub unknown_rpc: u64,
    /// DATA whose bytes were all received already, or that overlaps received bytes.
    pub duplicate: u64,
    /// DATA that disagrees with the message it belongs to (length, or range past its end).
    pub inconsistent: u64,
    /// DATA for an RPC that is not receiving (e.g. a request already complete).
    pub not_receiving: u64,
    /// A new message that does not fit in `max_rx_bytes`.
    pub rx_memory: u64,
    /// A new server RPC beyond `max_rpcs_per_peer`.
    pub rpc_limit: u64,
    /// A packet from a new peer beyond `max_peers`.
    pub peer_limit: u64,
    /// DATA that would need more than `max_gaps` holes.
    pub gap_limit: u64,
    /// FREEZE packets (a debugging aid for the kernel; ignored).
    pub freeze: u64,
}

impl Drops {
    /// All dropped packets.
    pub fn total(&self) -> u64 {
        let Drops {
            malformed,
            no_port,
            unknown_rpc,
            duplicate,
            inconsistent,
            not_receiving,
            rx_memory,
            rpc_limit,
            peer_limit,
            gap_limit,
            freeze,
        } = *self;
        malformed
            + no_port
            + unknown_rpc
            + duplicate
            + inconsistent
            + not_receiving
            + rx_memory
            + rpc_limit
            + peer_limit
            + gap_limit
            + freeze
    }
}

/// A snapshot of an endpoint's counters and gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Packets handed to `handle_packet`.
    pub packets_in: u64,
    /// Packets processed (not dropped).
    pub accepted: u64,
    /// Dropped packets by reason.
    pub drops: Drops,
    /// Valid packets received, per type.
    pub packets_in_by_type: PerType,
    /// Bytes of valid packets received, per type (Homa header onward).
    pub bytes_in_by_type: PerType,
    /// Packets emitted by `poll_transmit`, per type.
    pub packets_out_by_type: PerType,
    /// Bytes emitted, per type.
    pub bytes_out_by_type: PerType,
    /// Message bytes delivered to the application (requests and responses).
    pub message_bytes_in: u64,
    /// Message bytes sent for the first time.
    pub message_bytes_out: u64,
    /// DATA packets sent again in answer to RESEND or RPC_UNKNOWN.
    pub retransmitted_packets: u64,
    /// Client RPCs that failed with a timeout.
    pub client_timeouts: u64,
    /// Server RPCs abandoned: request never completed, or response never acknowledged.
    pub server_timeouts: u64,
    /// Client RPCs restarted after RPC_UNKNOWN.
    pub restarts: u64,
    /// Bytes granted by scheduled (SRPT) grants.
    pub granted_bytes: u64,
    /// FIFO grants issued.
    pub fifo_grants: u64,
    /// Control packets dropped because `max_pending_control` were already waiting.
    pub control_overflow: u64,
    /// Requests delivered to the application.
    pub requests_received: u64,
    /// Responses delivered to the application.
    pub responses_received: u64,
    /// Highest total of granted-but-unreceived bytes seen.
    pub peak_incoming: u64,

    // Gauges, read at snapshot time.
    /// RPCs alive (client and server).
    pub rpcs: u64,
    /// Incoming messages receiving grants right now.
    pub active_grants: u64,
    /// Incoming messages needing grants (active or waiting).
    pub grantable: u64,
    /// Granted-but-unreceived bytes right now.
    pub incoming: u64,
    /// Peers tracked.
    pub peers: u64,
    /// Bytes reserved for messages being reassembled.
    pub rx_bytes: u64,
    /// Bytes of outgoing messages held.
    pub tx_bytes: u64,
}
