//! What the endpoint sends: control packets first, then resends, then new DATA by SRPT.

use crate::metrics::type_index;
use crate::msg::PayloadSlice;
use crate::msg::outgoing::OutMessage;
use crate::rpc::{Rpc, RpcRef, State};
use crate::sched::tx::{Control, ControlBody, TxKey};
use crate::time::MaybeTick;
use crate::time::{Instant, Nanos};
use crate::wire::{self, Ack, Body, MAX_ACKS, PacketType, data, header};

use super::{BufferTooShort, Endpoint, Run, Transmit};

/// A message's next packet, which may follow its last in a GSO run (`next_of`).
#[derive(Clone, Copy)]
struct Next {
    /// Its SRPT key.
    key: TxKey,
    /// It is unscheduled data (sent at the unscheduled level; else at the granted one).
    unscheduled: bool,
}

/// `x`'s outgoing message, if it is queued to send new DATA and may send some now.
fn sending_new(x: &Rpc) -> Option<&OutMessage> {
    let may = |m: &&OutMessage| x.tx_queued && x.state == State::Outgoing && m.can_send_new();
    x.msgout.as_ref().filter(may)
}

impl Endpoint {
    /// Writes the next packet into `buf` and says where it goes; `None` when nothing may
    /// be sent now. `buf` must hold [`Config::max_packet_len`] bytes: a shorter one is
    /// refused, and nothing changes.
    ///
    /// [`Config::max_packet_len`]: crate::Config::max_packet_len
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Option<Transmit>, BufferTooShort> {
        let now = now.as_nanos();
        self.check_buffer(buf)?;
        Ok(self.transmit(now, buf, None))
    }

    /// As [`poll_transmit`](Endpoint::poll_transmit), but a DATA packet of a message longer
    /// than one packet leaves its message bytes out: `buf[..len]` gets the headers, and the
    /// returned slice is the rest of the packet (for a vectored send, without a copy).
    /// Other packets are written whole.
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Option<(Transmit, Option<PayloadSlice>)>, BufferTooShort> {
        let now = now.as_nanos();
        self.check_buffer(buf)?;
        let mut slice = None;
        Ok(self.transmit(now, buf, Some(&mut slice)).map(|t| (t, slice)))
    }

    /// Packets for one GSO send: as [`poll_transmit`](Endpoint::poll_transmit), each into
    /// its own [`Config::max_packet_len`]-byte slot of `buf`, back to back (so that a run
    /// of full packets is one contiguous buffer). They are the packets that successive
    /// `poll_transmit` calls would write, byte for byte and with the same effects, for as
    /// long as they are new DATA of one message at one priority and each but the last
    /// fills its slot; the rest waits for the next call. As with `poll_transmit`, call
    /// again until it returns `None` (the pacer may have been asked about the next packet).
    /// `buf` must hold at least one slot.
    ///
    /// [`Config::max_packet_len`]: crate::Config::max_packet_len
    pub fn poll_transmit_run(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Option<Run>, BufferTooShort> {
        let now = now.as_nanos();
        self.check_buffer(buf)?;
        let slot = self.config.max_packet_len();
        let first = &mut buf[..slot];
        if let Some(t) = self.transmit_urgent(now, first, None) {
            return Ok(Some(Run::one(t)));
        }
        let Some((key, head)) = self.pick_new() else { return Ok(None) };
        let unscheduled = self.next_of(key).is_some_and(|n| n.unscheduled); // the run's side
        let Some(t) = self.send_new(key, head, first, None) else { return Ok(None) };
        let mut run = Run::one(t);
        // Only the SRPT head goes on, and it stays the head as it sends (fewer bytes left
        // only raise it): `last` is the key it went under.
        let mut last = head.then_some(key);
        while run.last_len == slot && (run.packets + 1) * slot <= buf.len() {
            let next = last.and_then(|k| self.next_of(k));
            let Some(key) = next.and_then(|n| self.pick_in_run(n, unscheduled)) else { break };
            let at = run.packets * slot;
            let Some(t) = self.send_new(key, true, &mut buf[at..at + slot], None) else { break };
            (run.packets, run.last_len, last) = (run.packets + 1, t.len, Some(key));
        }
        Ok(Some(run))
    }

    fn check_buffer(&self, buf: &[u8]) -> Result<(), BufferTooShort> {
        let need = self.config.max_packet_len();
        if buf.len() < need { Err(BufferTooShort { len: buf.len(), need }) } else { Ok(()) }
    }

    /// The next packet; with `gather`, a multi-packet message's bytes go there instead of
    /// into `buf` (see `poll_transmit_gather`). An out-parameter, not a returned slice: the
    /// copying path then returns only a `Transmit` (BENCHMARKS.md: 118 instructions per RPC).
    /// The steps it shares with `poll_transmit_run` are inlined into both: called, they
    /// cost the RPC and DATA paths 2-3 % more instructions.
    fn transmit(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        mut gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        if let Some(sent) = self.transmit_urgent(now, buf, gather.as_deref_mut()) {
            return Some(sent);
        }
        let (key, head) = self.pick_new()?;
        self.send_new(key, head, buf, gather)
    }

    /// What goes before new DATA (once arrivals are settled and the clock advanced): the
    /// next control packet, else the next retransmission.
    #[inline(always)]
    fn transmit_urgent(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        mut gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        self.settle_data();
        self.advance(now);
        if let Some(c) = self.tx.control.pop_front() {
            return Some(self.emit_control(c, buf));
        }
        while let Some(&r) = self.tx.resends.front() {
            if let Some(sent) = self.emit_resend(r, buf, gather.as_deref_mut()) {
                return Some(sent);
            }
            self.tx.resends.pop_front();
            if let Some(x) = self.rpcs.get_mut(r) {
                x.resend_queued = false;
            }
        }
        None
    }

    #[inline(always)]
    fn emit_control(&mut self, c: Control, buf: &mut [u8]) -> Transmit {
        let body = match c.body {
            ControlBody::Grant { offset, priority } => {
                Body::Grant(wire::grant::Repr { offset, priority })
            }
            ControlBody::Resend { offset, length, priority } => {
                Body::Resend(wire::resend::Repr { offset, length, priority })
            }
            ControlBody::RpcUnknown => Body::RpcUnknown,
            ControlBody::Busy => Body::Busy,
            ControlBody::Cutoffs { cutoffs, version } => Body::Cutoffs(wire::cutoffs::Repr {
                unsched_cutoffs: cutoffs,
                cutoff_version: version,
            }),
            ControlBody::NeedAck => Body::NeedAck,
            ControlBody::Ack { acks, count } => Body::Ack(
                wire::ack::Repr::new(&acks[..usize::from(count)]).expect("at most MAX_ACKS acks"),
            ),
        };
        let header = header::Repr::new(body.packet_type(), c.sport, c.dport, c.id);
        let repr = wire::Repr { header, body };
        let len = repr.emit(buf).expect("buffer holds max_packet_len >= 80 bytes");
        self.count_out(repr.packet_type(), len);
        // The NIC sends control packets too: the module's qdisc counts every Homa packet.
        self.tx.pacer.record(self.now, self.config.wire_time(self.config.wire_bytes(len)));
        Transmit { to: c.to, len, priority: self.config.num_priorities - 1 }
    }

    /// Writes the next retransmitted packet of `r`, if it has one.
    fn emit_resend(
        &mut self,
        r: RpcRef,
        buf: &mut [u8],
        gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        let max_payload = self.max_payload;
        let x = self.rpcs.get_mut(r)?;
        let m = x.msgout.as_mut()?;
        let (start, end, incoming) = m.next_resend(max_payload)?;
        let priority = self.data_priority(r, start)?;
        self.metrics.retransmitted_packets += 1;
        self.emit_data(r, start, end, incoming, priority, true, buf, gather)
    }

    /// The level of `r`'s DATA packet starting at `start`: the receiver's cutoff level
    /// for unscheduled bytes, the latest GRANT's for scheduled ones. A retransmission goes
    /// at the level its original had, whatever the RESEND asks (the module uses the
    /// RESEND's level, the highest for its own receivers: resent bulk data would share
    /// the short messages' class).
    fn data_priority(&self, r: RpcRef, start: u32) -> Option<u8> {
        let x = self.rpcs.get(r)?;
        let m = x.msgout.as_ref()?;
        Some(if start < m.unscheduled {
            self.peers.get(x.peer).unsched_priority(m.length, self.config.num_priorities)
        } else {
            m.sched_priority
        })
    }

    /// Picks the message for the next new DATA packet (SRPT, with the FIFO share), if the
    /// pacer allows one; with whether it is the SRPT head.
    #[inline(always)]
    fn pick_new(&mut self) -> Option<(TxKey, bool)> {
        let top = self.peek_sendable()?;
        if !self.paced_in(top) {
            return None;
        }
        let key = if self.tx.fifo_turn() { self.oldest_sendable().unwrap_or(top) } else { top };
        Some((key, key == top))
    }

    /// Whether the pacer lets new DATA of the message queued under `key` go now (a message
    /// with at most `defer_min_bytes` left always may).
    #[inline(always)]
    fn paced_in(&mut self, key: TxKey) -> bool {
        key.bytes_left <= self.config.defer_min_bytes || self.tx.pacer.admit(self.now)
    }

    /// `pick_new` for the next packet of a run (`poll_transmit_run`): if `pick_new` would
    /// pick the SRPT head `next` now, with nothing to send before it, for a packet on the
    /// `unscheduled` side of its message (where its level is the run's), counts the pick
    /// and returns its key. Stops before any effect that the next call would not repeat (a
    /// FIFO pick due, a change of level); the pacer's verdict, if asked, stands either way.
    fn pick_in_run(&mut self, next: Next, unscheduled: bool) -> Option<TxKey> {
        if !self.tx.control.is_empty()
            || !self.tx.resends.is_empty()
            || self.tx.fifo_turn_due()
            || next.unscheduled != unscheduled
            || !self.paced_in(next.key)
        {
            return None;
        }
        self.tx.fifo_turn(); // not due: it counts the pick
        Some(next.key)
    }

    /// The next packet of the message that was queued under `key`, if it can go now: its
    /// key then (with which `peek_sendable` returns it, if it heads the queue).
    fn next_of(&self, key: TxKey) -> Option<Next> {
        let m = self.rpcs.get(key.rpc).and_then(sending_new)?;
        let key = TxKey { bytes_left: m.bytes_left(), ..key };
        Some(Next { key, unscheduled: m.next_offset < m.unscheduled })
    }

    /// Sends the next packet of new DATA of the message queued under `key` (`head`: the
    /// SRPT head) and requeues it.
    #[inline(always)]
    fn send_new(
        &mut self,
        key: TxKey,
        head: bool,
        buf: &mut [u8],
        gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        let x = self.rpcs.get(key.rpc)?;
        let m = x.msgout.as_ref()?;
        let start = m.next_offset;
        let end = m.packet_end(start, self.max_payload);
        let incoming = m.unscheduled;
        let priority = self.data_priority(key.rpc, start)?;
        let sent = self.emit_data(key.rpc, start, end, incoming, priority, false, buf, gather)?;
        self.metrics.message_bytes_out += u64::from(end - start);
        let x = self.rpcs.get_mut(key.rpc)?;
        let m = x.msgout.as_mut()?;
        m.next_offset = end;
        m.sent_tick = self.tick;
        let fully_sent = end == m.length;
        let still_sendable = m.can_send_new();
        // Queue it under its new key if it has more to send. The SRPT head keeps its place
        // (fewer bytes left only raise it); after a FIFO pick, its old entry stays in the
        // heap and is skipped as stale.
        x.tx_queued = still_sendable;
        if still_sendable {
            let new_key = TxKey { bytes_left: m.bytes_left(), birth: key.birth, rpc: key.rpc };
            if head { self.tx.replace_top(new_key) } else { self.tx.push(new_key) }
        } else if head {
            self.tx.pop();
        }
        let worried = x.timer.worried;
        if fully_sent && !x.is_client() {
            // NEED_ACK starts `request_ack_ticks` after the first tick that sees it done.
            let done = self.tick + 1;
            x.timer.done_tick = MaybeTick::some(done);
            x.timer.asked = 0;
            self.arm(key.rpc, done + u64::from(self.config.request_ack_ticks));
        }
        // A message that can send on is owed nothing (`waits_on_peer`): unless it was
        // worried, there is nothing to refresh (the common case, once per packet).
        if !still_sendable || worried {
            self.refresh_worry(key.rpc);
        }
        Some(sent)
    }

    /// The SRPT head, after discarding stale entries. O(1) amortised.
    pub(super) fn peek_sendable(&mut self) -> Option<TxKey> {
        while let Some(key) = self.tx.peek() {
            let valid = self.rpcs.get(key.rpc).and_then(|x| x.msgout.as_ref().map(|m| (x, m)));
            match valid {
                Some((x, m)) if x.tx_queued && m.bytes_left() == key.bytes_left => {
                    if m.can_send_new() && x.state == State::Outgoing {
                        return Some(key);
                    }
                    // Waiting for grants: leave the queue until a GRANT arrives.
                    self.tx.pop();
                    if let Some(x) = self.rpcs.get_mut(key.rpc) {
                        x.tx_queued = false;
                    }
                }
                _ => {
                    self.tx.pop();
                }
            }
        }
        None
    }

    /// The oldest queued message that can send now (the pacer's FIFO pick).
    fn oldest_sendable(&self) -> Option<TxKey> {
        self.tx
            .queued()
            .filter(|k| {
                let m = self.rpcs.get(k.rpc).and_then(sending_new);
                m.is_some_and(|m| m.bytes_left() == k.bytes_left)
            })
            .min_by_key(|k| (k.birth, k.rpc))
    }

    /// Writes one DATA packet for bytes [start, end) of `r`'s outgoing message: whole,
    /// unless `gather` and the message is longer than one packet (for one packet a copy
    /// costs less than sharing its bytes): then its headers, with those bytes put in
    /// `gather`.
    #[allow(clippy::too_many_arguments)]
    fn emit_data(
        &mut self,
        r: RpcRef,
        start: u32,
        end: u32,
        incoming: u32,
        priority: u8,
        retransmit: bool,
        buf: &mut [u8],
        gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        let x = self.rpcs.get_mut(r)?;
        let m = x.msgout.as_mut()?;
        let peer = self.peers.get_mut(x.peer);
        let mut acks = [Ack::NONE; MAX_ACKS];
        let ack = if peer.take_acks(1, &mut acks) == 1 { acks[0] } else { Ack::NONE };
        let out = &mut buf[..data::HEADER_LEN];
        let mut header = header::Repr::new(PacketType::Data, x.local_port, x.remote_port, x.id);
        header.sequence = start;
        header.emit(PacketType::Data, &mut header::Packet::new_unchecked(&mut *out));
        let fields = data::Repr {
            message_length: m.length,
            incoming,
            ack,
            cutoff_version: peer.cutoff_version,
            retransmit: u8::from(retransmit),
            pad: [0; 3],
            seg_offset: start,
        };
        fields.emit(&mut data::Packet::new_unchecked(out));
        let len = data::HEADER_LEN + (end - start) as usize;
        let written = match gather {
            Some(slice) if m.length > self.max_payload => {
                *slice = Some(PayloadSlice::new(&mut m.payload, start, end));
                data::HEADER_LEN
            }
            _ => {
                buf[data::HEADER_LEN..len]
                    .copy_from_slice(&m.payload.as_slice()[start as usize..end as usize]);
                len
            }
        };
        let to = x.addr;
        self.tx.pacer.record(self.now, self.config.wire_time(self.config.wire_bytes(len)));
        self.count_out(PacketType::Data, len);
        Some(Transmit { to, len: written, priority })
    }

    fn count_out(&mut self, t: PacketType, len: usize) {
        let i = type_index(t);
        self.metrics.packets_out_by_type[i] += 1;
        self.metrics.bytes_out_by_type[i] += len as u64;
    }
}
