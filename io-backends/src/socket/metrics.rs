//! [`Metrics`]: a snapshot of a socket's counters (endpoint, transport, driver).

use super::Histogram;
use crate::transport::TransportStats;

/// Counters of a socket: the endpoint's, the transport's, and the driver's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metrics {
    /// The Homa endpoint's counters (malformed packets are `core.drops.malformed`).
    pub core: homa_core::Metrics,
    /// Datagrams and system calls of the transport.
    pub transport: TransportStats,
    /// Packets from addresses outside the allow-list, dropped before Homa saw them.
    pub dropped_by_allow_list: u64,
    /// Times the driver thread woke up to do work.
    pub wakeups: u64,
    /// Waits that polled the socket before sleeping ([`Builder::busy_poll`]); not those
    /// whose packet was there at the first look.
    ///
    /// [`Builder::busy_poll`]: super::Builder::busy_poll
    pub busy_polls: u64,
    /// Of those, the ones that found what they waited for while polling.
    pub busy_polls_paid: u64,
    /// Calls waiting for a response.
    pub pending_calls: u64,
    /// Requests received and not yet taken by `recv_request`.
    pub queued_requests: u64,
    /// Receive calls that failed (e.g. EFAULT from a raw socket next to the Linux module);
    /// each ends a receive round, and Homa's resends recover what it lost.
    pub receive_errors: u64,
    /// Send calls that failed as a whole (their datagrams count as lost).
    pub send_errors: u64,
    /// Times the event loop driving the socket ([`Poller`](crate::Poller)) left datagrams
    /// waiting for four timer ticks (busy with the application's work) and the driver thread
    /// received for it until it drove again.
    pub loop_stalls: u64,
    /// Times the driver thread ran its timers `resend_ticks - 1` ticks or more after they
    /// were due: the host gave it no CPU, or another thread held the socket that long. A
    /// peer waiting on this host meanwhile hears nothing and may ask for a resend, for no
    /// lost packet; many mean the host is short of CPU.
    pub late_timers: u64,
    /// Payload bytes received straight into their messages: the kernel's copy put them in
    /// place (large DATA packets, or runs of one message's packets as GRO delivers them).
    /// Every other payload byte is copied once more, from the receive buffer.
    pub bytes_in_place: u64,
    /// Bytes of received messages the application holds now ([`Message`]s not yet
    /// dropped, and the views the bindings made of them). With the messages being received
    /// (`core.rx_bytes`) they may fill `max_rx_bytes`; new messages then wait.
    ///
    /// [`Message`]: crate::Message
    pub lent_bytes: u64,
    /// Latencies of the calls that completed with a response, from start to response.
    pub calls: Histogram,
    /// Latencies of the requests served, from their arrival to the reply.
    pub served: Histogram,
}

impl Metrics {
    /// Every counter by name, as the bindings and `homa` show them: `core`
    /// ([`homa_core::Metrics::to_value`]), `transport` ([`TransportStats::to_value`]), the
    /// driver's own, and the latency histograms `calls` and `served`
    /// ([`Histogram::to_value`]). [`to_prometheus`](Metrics::to_prometheus) writes them for
    /// Prometheus.
    pub fn to_value(&self) -> homa_core::Map {
        let mut v = homa_core::Map::new();
        v.insert("core", self.core.to_value());
        v.insert("transport", self.transport.to_value());
        for (name, n) in [
            ("dropped_by_allow_list", self.dropped_by_allow_list),
            ("wakeups", self.wakeups),
            ("busy_polls", self.busy_polls),
            ("busy_polls_paid", self.busy_polls_paid),
            ("pending_calls", self.pending_calls),
            ("queued_requests", self.queued_requests),
            ("receive_errors", self.receive_errors),
            ("send_errors", self.send_errors),
            ("loop_stalls", self.loop_stalls),
            ("late_timers", self.late_timers),
            ("bytes_in_place", self.bytes_in_place),
            ("lent_bytes", self.lent_bytes),
        ] {
            v.insert(name, n);
        }
        v.insert("calls", self.calls.to_value());
        v.insert("served", self.served.to_value());
        v
    }
}
