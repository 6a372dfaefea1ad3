//! Counters an endpoint keeps, readable as plain data with [`Endpoint::metrics`].
//!
//! Every packet handed to `handle_packet` is counted once in `packets_in` and either
//! accepted or dropped for exactly one reason:
//! `packets_in == accepted + drops.total()`.
//!
//! [`Endpoint::metrics`]: crate::Endpoint::metrics

use crate::value::{Map, Value};
use crate::wire::PacketType;

/// Counts per packet type, indexed by `code - 0x10` (DATA first, ACK last).
pub type PerType = [u64; 9];

pub(crate) fn type_index(t: PacketType) -> usize {
    usize::from(t.code() - PacketType::Data.code())
}

/// Why an incoming packet was dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// Not a valid Homa packet (`wire::Error`), other than `too_long`.
    pub malformed: u64,
    /// DATA of a message longer than `max_message_length` (the sender allows longer
    /// messages than this end: both ends need the same setting).
    pub too_long: u64,
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
    /// A new message that would take what its host holds here past `max_bytes_per_host`.
    pub host_memory: u64,
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
    /// Every reason by its field name, with its count.
    pub fn by_reason(&self) -> [(&'static str, u64); 13] {
        let Drops {
            malformed,
            too_long,
            no_port,
            unknown_rpc,
            duplicate,
            inconsistent,
            not_receiving,
            rx_memory,
            host_memory,
            rpc_limit,
            peer_limit,
            gap_limit,
            freeze,
        } = *self;
        [
            ("malformed", malformed),
            ("too_long", too_long),
            ("no_port", no_port),
            ("unknown_rpc", unknown_rpc),
            ("duplicate", duplicate),
            ("inconsistent", inconsistent),
            ("not_receiving", not_receiving),
            ("rx_memory", rx_memory),
            ("host_memory", host_memory),
            ("rpc_limit", rpc_limit),
            ("peer_limit", peer_limit),
            ("gap_limit", gap_limit),
            ("freeze", freeze),
        ]
    }

    /// All dropped packets.
    pub fn total(&self) -> u64 {
        self.by_reason().iter().map(|(_, n)| n).sum()
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

impl Drops {
    /// Every reason and its count, and `total`, by field name.
    pub fn to_value(&self) -> Map {
        self.by_reason().into_iter().chain([("total", self.total())]).collect()
    }
}

/// Per-type counts keyed by packet type name (`"DATA"`, ...).
fn per_type(counts: &PerType) -> Value {
    PacketType::ALL.iter().map(|t| t.name()).zip(counts.iter().copied()).collect::<Map>().into()
}

impl Metrics {
    /// Every counter and gauge by its field name, as the bindings, `homa` and the
    /// conformance vectors show them: `drops` as a map (with `total`), the per-type counts as
    /// maps keyed by packet type name.
    pub fn to_value(&self) -> Map {
        let m = self;
        let mut v = Map::new();
        v.insert("packets_in", m.packets_in);
        v.insert("accepted", m.accepted);
        v.insert("drops", m.drops.to_value());
        v.insert("packets_in_by_type", per_type(&m.packets_in_by_type));
        v.insert("bytes_in_by_type", per_type(&m.bytes_in_by_type));
        v.insert("packets_out_by_type", per_type(&m.packets_out_by_type));
        v.insert("bytes_out_by_type", per_type(&m.bytes_out_by_type));
        for (name, n) in [
            ("message_bytes_in", m.message_bytes_in),
            ("message_bytes_out", m.message_bytes_out),
            ("retransmitted_packets", m.retransmitted_packets),
            ("client_timeouts", m.client_timeouts),
            ("server_timeouts", m.server_timeouts),
            ("restarts", m.restarts),
            ("granted_bytes", m.granted_bytes),
            ("fifo_grants", m.fifo_grants),
            ("control_overflow", m.control_overflow),
            ("requests_received", m.requests_received),
            ("responses_received", m.responses_received),
            ("peak_incoming", m.peak_incoming),
            ("rpcs", m.rpcs),
            ("active_grants", m.active_grants),
            ("grantable", m.grantable),
            ("incoming", m.incoming),
            ("peers", m.peers),
            ("rx_bytes", m.rx_bytes),
            ("tx_bytes", m.tx_bytes),
        ] {
            v.insert(name, n);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `to_value` names every field: adding one to `Metrics` without naming it breaks this
    /// destructuring, and the count says none is named twice or left out.
    #[test]
    fn to_value_names_every_field_once() {
        let Metrics {
            packets_in: _,
            accepted: _,
            drops: _,
            packets_in_by_type: _,
            bytes_in_by_type: _,
            packets_out_by_type: _,
            bytes_out_by_type: _,
            message_bytes_in: _,
            message_bytes_out: _,
            retransmitted_packets: _,
            client_timeouts: _,
            server_timeouts: _,
            restarts: _,
            granted_bytes: _,
            fifo_grants: _,
            control_overflow: _,
            requests_received: _,
            responses_received: _,
            peak_incoming: _,
            rpcs: _,
            active_grants: _,
            grantable: _,
            incoming: _,
            peers: _,
            rx_bytes: _,
            tx_bytes: _,
        } = Metrics::default();
        let m = Metrics { retransmitted_packets: 7, ..Metrics::default() };
        let v = m.to_value();
        assert_eq!(v.len(), 26);
        assert_eq!(v.get("retransmitted_packets"), Some(&Value::Int(7)));
        let drops = v.get("drops").and_then(Value::as_map).unwrap();
        assert_eq!(drops.len(), 14, "thirteen reasons and the total");
        let data = v.get("packets_in_by_type").and_then(Value::as_map).unwrap();
        assert_eq!(data.get("ACK"), Some(&Value::Int(0)));
    }
}
