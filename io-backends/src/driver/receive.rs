//! Receiving: batches of datagrams into the endpoint, or large DATA packets received
//! straight into their message.

use homa_core::Instant;
use std::mem;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use homa_core::time::Nanos;
use homa_core::wire::{self, data};

use super::{BATCH, Inner};
use crate::transport::{Batch, Datagram, MAX_RUN, RECV_SLOT_LEN, TransportStats};

/// Receive batches handled per wake-up before timers run anyway and the lock is released.
pub(super) const RX_ROUNDS: usize = 64;
/// Datagrams from this long are received in place when they can be (`Intake::placing`):
/// the payload copy saved then outweighs the extra system call that looks at the header.
const PLACE_MIN: usize = 16 * 1024;
/// Runs of packets from this size are received in place (smaller ones are not bulk data:
/// many short messages, each its own).
const RUN_SEGMENT_MIN: usize = 1024;

/// What `receive_in_place` found in the socket queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InPlace {
    /// A datagram, now taken (received in place, or dropped as another than the one seen).
    Taken,
    /// A datagram to take by copy (`receive_one`).
    Left,
    /// None (or the look failed).
    Nothing,
}

/// Receive buffers and how datagrams are taken.
#[derive(Debug)]
pub(super) struct Intake {
    rx: Batch,
    /// One slot, for receiving one datagram (`Inner::receive_one`).
    rx1: Batch,
    /// Datagrams the next event-loop turn ([`Shared::drive`](super::Shared::drive)) asks
    /// for: 1, or a batch after a turn that found as many as it asked for.
    pub(super) loop_vlen: usize,
    /// Bulk data is arriving: receive in place (`homa_core::Endpoint::place_run`), one
    /// datagram at a time, while the datagrams are large DATA packets or runs of them.
    /// Only for transports that can.
    pub(super) placing: bool,
    /// The headers of a run received in place.
    heads: Vec<u8>,
    /// A run received in place that was not one message's: its packets, to handle as
    /// received.
    unplaced: Vec<u8>,
}

impl Intake {
    pub(super) fn new() -> Intake {
        Intake {
            rx: Batch::new(BATCH, RECV_SLOT_LEN),
            rx1: Batch::new(1, RECV_SLOT_LEN),
            loop_vlen: 1,
            placing: false,
            heads: Vec::new(),
            unplaced: Vec::new(),
        }
    }
}

impl Inner {
    fn allowed(&self, from: SocketAddr) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|c| c.contains(from.ip()))
    }

    /// Receives what is waiting (a bounded number of batches; while bulk data arrives, a
    /// batch's worth, one datagram at a time) and feeds it to the endpoint; returns the
    /// number of datagrams.
    pub(super) fn receive(&mut self, now: Nanos) -> usize {
        if self.intake.placing {
            return self.receive_bulk(now);
        }
        let mut rx = mem::replace(&mut self.intake.rx, Batch::new(0, 0));
        let mut got = 0;
        for round in 0..RX_ROUNDS {
            if round > 0 {
                self.drain(now); // answer the last batch before taking more
            }
            rx.clear();
            let Some(transport) = self.transport.as_mut() else { break };
            if let Err(e) = transport.recv(&mut rx) {
                self.receive_failed(&e);
                break;
            }
            got += rx.len();
            self.feed(now, &rx);
            if !rx.is_full() {
                break;
            }
        }
        self.intake.rx = rx;
        got
    }

    /// A receive failed (the round ends; what was lost, Homa's resends recover).
    pub(super) fn receive_failed(&mut self, e: &std::io::Error) {
        self.counters.receive_errors += 1;
        tracing::error!("receive failed: {e}");
    }

    /// `receive` while bulk data arrives: up to a batch's worth of datagrams, each
    /// received in place if it can be, else alone by copy, and each answered at once (the
    /// sender may be waiting for its GRANTs). Then the caller's turn: it may be waiting for
    /// what came.
    fn receive_bulk(&mut self, now: Nanos) -> usize {
        let mut got = 0;
        while got < BATCH && self.intake.placing {
            // (A datagram taken by copy may end the bulk mode.) A queue found empty ends
            // the turn without another look, but for the first: a look that failed is
            // left to a plain receive, which reports why.
            let taken = match self.receive_in_place(now) {
                InPlace::Taken => true,
                InPlace::Nothing if got > 0 => false,
                InPlace::Left | InPlace::Nothing => self.receive_one(now) > 0,
            };
            if !taken {
                break;
            }
            got += 1;
            self.drain(now);
            self.flush();
        }
        got
    }

    /// Receives one datagram (one `recvfrom`, no batch set up) and feeds it to the endpoint;
    /// returns how many it took, 0 or 1.
    pub(super) fn receive_one(&mut self, now: Nanos) -> usize {
        let mut rx = mem::replace(&mut self.intake.rx1, Batch::new(0, 0));
        rx.clear();
        if let Some(Err(e)) = self.transport.as_mut().map(|t| t.recv(&mut rx)) {
            self.receive_failed(&e);
        }
        self.feed(now, &rx);
        let got = rx.len();
        self.intake.rx1 = rx;
        got
    }

    /// Receives the next datagram straight into its message, if it is a large DATA packet,
    /// or a run of DATA packets of one message, that extends its message in order (see
    /// `Endpoint::place_run`). If not, it is left for `recv`.
    fn receive_in_place(&mut self, now: Nanos) -> InPlace {
        const H: usize = data::HEADER_LEN;
        let mut head = [0; H];
        let Some(p) = self.transport.as_mut().and_then(|t| t.peek(&mut head)) else {
            return InPlace::Nothing;
        };
        // Small or empty (a peer may send an empty datagram: it holds no packet at all).
        if p.len < PLACE_MIN {
            return InPlace::Left;
        }
        let segment = if p.segment == 0 { p.len } else { p.segment };
        let packets = p.len.div_ceil(segment);
        let last = p.len - (packets - 1) * segment;
        let placeable =
            (packets == 1 || segment >= RUN_SEGMENT_MIN) && last > H && packets <= MAX_RUN;
        if !placeable || !self.allowed(p.from) {
            return InPlace::Left;
        }
        let step = segment - H;
        let payload_len = p.len - packets * H;
        let first = data::Packet::new_unchecked(&head[..]).offset();
        let mut heads = mem::take(&mut self.intake.heads);
        heads.resize(packets * H, 0);
        let mut unplaced = mem::take(&mut self.intake.unplaced);
        let Some(transport) = self.transport.as_mut() else { return InPlace::Nothing };
        let (mut failed, mut in_place) = (None, 0);
        let placed = self.endpoint.place_run(
            Instant::from_nanos(now),
            p.from,
            &head,
            payload_len,
            packets as u32,
            |message| {
                let before = message.len();
                match transport.recv_split(&mut heads, H, segment, message, payload_len) {
                    Ok(Some(from)) if from == p.from && heads[..H] == head => {}
                    // Another datagram than the one peeked at: never seen (receives are
                    // serialized). What it appended is past the message's bytes, and goes.
                    Ok(_) => {
                        tracing::debug!("a datagram other than the one peeked at: dropped");
                        return false;
                    }
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                }
                let continues = heads.chunks_exact(H).enumerate().skip(1).all(|(i, h)| {
                    u32::try_from(i * step).is_ok_and(|d| data::continues(&head, h, first + d))
                });
                if continues {
                    in_place = payload_len as u64;
                } else {
                    // Not one message's run after all: its packets go the usual way (the
                    // copies made here are the price of a wrong guess).
                    for (h, payload) in heads.chunks_exact(H).zip(message[before..].chunks(step)) {
                        unplaced.extend_from_slice(h);
                        unplaced.extend_from_slice(payload);
                    }
                }
                continues
            },
        );
        self.counters.bytes_in_place += in_place;
        if !unplaced.is_empty() {
            for packet in unplaced.chunks(segment) {
                let _ = self.endpoint.handle_packet(Instant::from_nanos(now), p.from, packet);
            }
            unplaced.clear();
        }
        self.intake.heads = heads;
        self.intake.unplaced = unplaced;
        if let Some(e) = failed {
            self.receive_failed(&e);
            return InPlace::Left;
        }
        if placed { InPlace::Taken } else { InPlace::Left }
    }

    /// Hands the datagrams in `rx` to the endpoint (those the allow-list admits). The caller
    /// drains next (before receiving more, or settling), so the endpoint answers the whole
    /// batch together: one GRANT per message, not one per DATA packet; the DATA that GRANTs
    /// allow, in runs. Large datagrams start receiving in place, if the transport can.
    pub(super) fn feed(&mut self, now: Nanos, rx: &Batch) {
        self.endpoint.set_lent_bytes(self.lent.load(Ordering::Relaxed));
        if !rx.is_empty() {
            // (Not for what GRO coalesced of small packets.)
            let bulk = |d: Datagram| {
                d.len >= PLACE_MIN && (d.segment == 0 || d.segment >= RUN_SEGMENT_MIN)
            };
            self.intake.placing = (0..rx.len()).map(|i| rx.get(i).0).any(bulk)
                && self.transport.as_ref().is_some_and(|t| t.receives_in_place());
        }
        for i in 0..rx.len() {
            let (d, bytes) = rx.get(i);
            if !self.allowed(d.addr) {
                self.counters.dropped_by_allow_list += 1;
                continue;
            }
            for packet in d.packets(bytes) {
                // Malformed packets are counted by the endpoint. Messages over our length
                // limit are a configuration mismatch the user must hear of.
                if let Err(wire::Error::BadMessageLength { len, max }) =
                    self.endpoint.handle_packet(Instant::from_nanos(now), d.addr, packet)
                    && len > max
                {
                    self.warn_too_long(d.addr, len, max);
                }
            }
        }
    }

    /// Warns, once per socket, that a peer sends messages longer than we accept.
    fn warn_too_long(&mut self, from: SocketAddr, len: u32, max: u32) {
        if mem::replace(&mut self.warned_too_long, true) {
            return;
        }
        let warning = format!(
            "dropping a message of {len} bytes from {from}: longer than this socket's \
             max_message_length ({max}); set the same max_message_length on both ends \
             (counted in drops.too_long; said once)"
        );
        tracing::warn!("{warning}");
        self.warnings.push(warning);
    }

    /// The transport's counters, with what the waiter received.
    pub(crate) fn transport_stats(&self) -> TransportStats {
        let Some(transport) = &self.transport else { return self.closed_stats };
        let (t, w) = (transport.stats(), self.waiter_stats);
        TransportStats {
            rx_datagrams: t.rx_datagrams + w.rx_datagrams,
            rx_calls: t.rx_calls + w.rx_calls,
            rx_dropped: t.rx_dropped + w.rx_dropped,
            unreachable: t.unreachable + w.unreachable,
            ..t
        }
    }

    /// Reads the errors queued on the transport's socket (see `Transport::read_errors`);
    /// the next settle hands the endpoint the unreachable peers among them.
    pub(super) fn read_errors(&mut self) {
        if let Some(t) = self.transport.as_mut() {
            t.read_errors();
        }
    }

    /// Whether datagrams or error reports wait (`Transport::input_waiting`).
    pub(super) fn input_waiting(&mut self) -> bool {
        self.transport.as_mut().is_some_and(|t| t.input_waiting())
    }

    /// The calling thread is about to wait for datagrams (`Transport::receive_here`).
    pub(super) fn receive_here(&mut self) {
        if let Some(t) = self.transport.as_mut() {
            t.receive_here();
        }
    }

    /// Tells the transport whether its waiter is in use (`Transport::waiter_in_use`).
    pub(super) fn waiter_in_use(&mut self, in_use: bool) {
        if let Some(t) = self.transport.as_mut() {
            t.waiter_in_use(in_use);
        }
    }

    /// Hands the endpoint the peers the transport found unreachable; whether there were.
    pub(super) fn feed_unreachable(&mut self) -> bool {
        let mut fed = false;
        while let Some(u) = self.transport.as_mut().and_then(|t| t.poll_unreachable()) {
            self.endpoint.handle_unreachable(u.peer, u.port);
            fed = true;
        }
        fed
    }
}
