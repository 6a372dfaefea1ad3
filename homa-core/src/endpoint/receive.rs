//! Received packets: parsing, dispatch to their RPC, DATA and new server RPCs.

use alloc::vec::Vec;
use core::net::SocketAddr;

use crate::metrics::type_index;
use crate::msg::incoming::{InMessage, Rejected};
use crate::peer::PeerId;
use crate::rpc::{Rpc, RpcRef, State, TimerState};
use crate::sched::tx::{Control, ControlBody};
use crate::time::{Instant, MaybeTick, Nanos};
use crate::wire::{self, Body, data, header};

use super::{Arrived, Endpoint, MIN_EPHEMERAL_PORT, NoRpc, Placed};

impl Endpoint {
    /// Handles one received packet (the bytes from the Homa header on) from transport
    /// address `from`. Malformed bytes return the error and change nothing but counters.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        from: SocketAddr,
        bytes: &[u8],
    ) -> Result<(), wire::Error> {
        let now = now.as_nanos();
        self.receive(now, from, bytes, None)
    }

    /// Receive-in-place, for I/O layers that can read a datagram's first bytes before the
    /// rest (e.g. with `MSG_PEEK`). When the DATA packet from `from` that starts with
    /// `header` (at least [`data::HEADER_LEN`] bytes) and carries `payload_len` bytes of
    /// payload extends its message's bytes in order, calls `fill` with the message's
    /// buffer, which holds the bytes before the packet's and has room for its payload:
    /// `fill` appends the payload (e.g. receives it straight into the spare capacity,
    /// sparing the copy that [`handle_packet`](Self::handle_packet) makes) and returns
    /// whether it did. The packet is then handled as `handle_packet` would handle it.
    /// Returns whether `fill` was called; if not, receive the packet and hand it to
    /// `handle_packet` as usual. Whatever `fill` leaves but the packet's payload (it
    /// returned false, or appended another length) is discarded, and the packet with it.
    pub fn place(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: &[u8],
        payload_len: usize,
        fill: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> bool {
        self.place_run(now, from, header, payload_len, 1, fill)
    }

    /// [`place`](Self::place) for a run of `packets` DATA packets of one message that
    /// arrived together (a GRO batch of a GSO sender's packets): `header` is the first's,
    /// `payload_len` the bytes of all, which `fill` appends. The caller has checked that
    /// the others continue the first (`wire::data::continues`): they are handled as one
    /// packet, and counted as `packets`.
    pub fn place_run(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: &[u8],
        payload_len: usize,
        packets: u32,
        fill: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> bool {
        let now = now.as_nanos();
        let Some(header) = header.get(..data::HEADER_LEN) else { return false };
        let Ok(repr) = wire::Repr::parse_up_to(header, self.config.max_message_length) else {
            return false;
        };
        let Body::Data { repr: d, .. } = repr.body else { return false };
        let h = &repr.header;
        let Ok(len) = u32::try_from(payload_len) else { return false };
        let Some(r) = self.find_rpc(from, h) else { return false };
        let placeable = self.rpcs.get(r).is_some_and(|x| {
            x.state == State::Incoming
                && x.local_port == h.dport
                && x.msgin.as_ref().is_some_and(|m| m.length == d.message_length)
        });
        let offset = data::effective_offset(d.seg_offset, h.sequence);
        let Some(m) = self.rpcs.get_mut(r).and_then(|x| x.msgin.as_mut()).filter(|_| placeable)
        else {
            return false;
        };
        let Some(buf) = m.place(offset, len) else { return false };
        let before = buf.len();
        if !fill(buf) || buf.len() != before + payload_len {
            buf.truncate(before);
            return true;
        }
        // Parsed above: it parses again.
        let _ = self.receive(now, from, header, Some(Placed { len, packets: packets.max(1) }));
        true
    }

    /// `handle_packet`, or with `placed`, `place_run` (`bytes` is then the first header,
    /// and the run's payload is in its message already).
    fn receive(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        bytes: &[u8],
        placed: Option<Placed>,
    ) -> Result<(), wire::Error> {
        if now > self.now {
            self.settle_data(); // at the time of the packets that owe it
        }
        self.advance(now);
        self.metrics.packets_in += 1;
        let repr = match wire::Repr::parse_up_to(bytes, self.config.max_message_length) {
            Ok(repr) => repr,
            Err(e) => {
                match e {
                    wire::Error::BadMessageLength { len, max } if len > max => {
                        self.metrics.drops.too_long += 1;
                    }
                    _ => self.metrics.drops.malformed += 1,
                }
                return Err(e);
            }
        };
        let i = type_index(repr.packet_type());
        self.metrics.packets_in_by_type[i] += 1;
        let placed_len = placed.map(|p| p.len);
        self.metrics.bytes_in_by_type[i] += (bytes.len() + placed_len.unwrap_or(0) as usize) as u64;
        if self.dispatch(from, &repr, placed_len) {
            self.metrics.accepted += 1;
            // The rest of a placed run, counted as what they are: accepted packets.
            if let Some(more) = placed.map(|p| u64::from(p.packets - 1)).filter(|&n| n > 0) {
                self.metrics.packets_in += more;
                self.metrics.accepted += more;
                self.metrics.packets_in_by_type[i] += more;
                self.metrics.bytes_in_by_type[i] += more * bytes.len() as u64;
            }
        }
        Ok(())
    }

    /// Routes a valid packet (DATA with `placed_len`: that many bytes of payload are in its
    /// message already); returns whether it was accepted (drops are counted here).
    fn dispatch(&mut self, from: SocketAddr, p: &wire::Repr<'_>, placed_len: Option<u32>) -> bool {
        let h = &p.header;
        let id = wire::local_id(h.sender_id);
        let server_side = !wire::is_client_id(id);
        // The destination port must be open, and a request needs a server port.
        if h.dport == 0
            || !self.port_taken(h.dport)
            || (server_side && h.dport >= MIN_EPHEMERAL_PORT)
        {
            self.metrics.drops.no_port += 1;
            return false;
        }
        let data = matches!(p.body, Body::Data { .. });
        // A run of DATA for one message (a GRO batch) looks its RPC up once.
        let same = |x: &Rpc| (x.id, x.addr, x.local_port) == (id, from, h.dport);
        let rpc = (self.deferred)
            .filter(|&r| data && self.rpcs.get(r).is_some_and(same))
            .or_else(|| self.find_rpc(from, h));
        if self.deferred.is_some() && (rpc != self.deferred || !data) {
            self.settle_deferred();
        }
        // The peer is there (`Peer::heard`); DATA says so once per run, in `handle_data`.
        if !data && let Some(x) = rpc.and_then(|r| self.rpcs.get(r)) {
            self.peers.get_mut(x.peer).heard = self.tick as u32;
        }
        match p.body {
            Body::Data { repr, payload } => {
                let offset = data::effective_offset(repr.seg_offset, h.sequence);
                let payload = match placed_len {
                    Some(len) => Arrived::Placed(len),
                    None => Arrived::Bytes(payload),
                };
                self.handle_data(from, h, id, rpc, &repr, offset, payload)
            }
            Body::Grant(g) => self.with_rpc(rpc, |ep, r| ep.handle_grant(r, g)),
            Body::Resend(rs) => self.handle_resend(from, h, id, rpc, rs),
            Body::RpcUnknown => self.with_rpc(rpc, |ep, r| ep.handle_rpc_unknown(r)),
            Body::Busy => self.with_rpc(rpc, |ep, r| {
                ep.busy_answered(r);
                ep.reset_silence(r);
            }),
            Body::Cutoffs(c) => match self.peers.get_or_insert(from, self.now) {
                Some(peer) => {
                    self.peers.get_mut(peer).set_cutoffs(c.unsched_cutoffs, c.cutoff_version);
                    true
                }
                None => {
                    self.metrics.drops.peer_limit += 1;
                    false
                }
            },
            Body::NeedAck => self.handle_need_ack(from, h, id, rpc),
            Body::Ack(a) => {
                // ACKs go from clients to servers: only a server RPC ends by one. (A client
                // RPC ends with an event; an ACK naming one is bogus, from whoever sent it.)
                if let Some(r) = rpc.filter(|_| server_side) {
                    self.end_rpc(r);
                }
                for ack in a.acks() {
                    self.handle_ack(from, *ack);
                }
                true
            }
            Body::Freeze => {
                self.metrics.drops.freeze += 1;
                false
            }
        }
    }

    /// The RPC a packet with header `h` from `from` is about, if it exists.
    fn find_rpc(&self, from: SocketAddr, h: &header::Repr) -> Option<RpcRef> {
        let id = wire::local_id(h.sender_id);
        if wire::is_client_id(id) {
            self.rpcs
                .find_client(id)
                .filter(|&r| self.rpcs.get(r).is_some_and(|x| x.local_port == h.dport))
        } else {
            self.rpcs.find_server(from, id)
        }
    }

    fn with_rpc(&mut self, rpc: Option<RpcRef>, f: impl FnOnce(&mut Endpoint, RpcRef)) -> bool {
        match rpc {
            Some(r) => {
                f(self, r);
                true
            }
            None => {
                self.metrics.drops.unknown_rpc += 1;
                false
            }
        }
    }

    /// Any DATA, GRANT or BUSY for an RPC restarts its silence count.
    pub(super) fn reset_silence(&mut self, r: RpcRef) {
        let tick = self.tick();
        let top = self.config.num_priorities - 1;
        let Some(x) = self.rpcs.get_mut(r) else { return };
        // The lowest level of the bytes it waits for: the first missing byte's, or the last
        // granted one's (the two sides of `unsched_end`). A response not begun: the top.
        // The state first: a sender's packet need not read the (absent) message's line.
        let incoming = if x.state == State::Incoming { x.msgin.as_ref() } else { None };
        let level = match incoming {
            Some(m) => {
                let missing = m.gaps.first().map_or(m.recv_end, |g| g.start);
                m.level_at(missing).min(m.level_at(m.granted.saturating_sub(1)))
            }
            None => top,
        };
        let t = &mut x.timer;
        t.silent_since = tick;
        t.asked = 0;
        t.restarts = 0;
        t.stale_until = 0;
        t.held_level = level;
        t.held_at = self.downlink.held(tick, level);
        t.excused_at = self.overload.excused();
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_data(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        rpc: Option<RpcRef>,
        d: &data::Repr,
        offset: u32,
        payload: Arrived<'_>,
    ) -> bool {
        let r = match rpc {
            Some(r) => r,
            None if !wire::is_client_id(id) => match self.new_server_rpc(from, h, id, d) {
                Ok(r) => r,
                Err(NoRpc::Memory) if offset == 0 => {
                    // The request waits for memory (delivered messages the application
                    // holds, or others in reassembly): its client hears that we are busy,
                    // not silence, and sends it again when its RESEND finds no RPC here.
                    let busy = Control {
                        to: from,
                        sport: h.dport,
                        dport: h.sport,
                        id,
                        body: ControlBody::Busy,
                    };
                    self.push_control(busy);
                    return false;
                }
                Err(_) => return false,
            },
            None => {
                self.metrics.drops.unknown_rpc += 1;
                return false;
            }
        };
        if d.ack.is_some() {
            self.handle_ack(from, d.ack);
        }
        // A client's first response packet creates the incoming message.
        let Some(x) = self.rpcs.get(r) else { return true };
        if x.is_client() && x.state == State::Outgoing {
            // Counted for the server's host.
            if !self.reserve_rx(x.peer, d.message_length) {
                // The response waits for memory: the server is alive, and our RESENDs
                // ask for it again later.
                self.reset_silence(r);
                return false;
            }
            let birth = self.birth();
            let level = self.config.unsched_level(d.message_length);
            let x = self.rpcs.get_mut(r).expect("checked above");
            x.state = State::Incoming;
            x.msgin = Some(InMessage::new(d.message_length, d.incoming, level, birth));
        }
        let x = self.rpcs.get_mut(r).expect("checked above");
        let (peer, state) = (x.peer, x.state);
        let Some(m) = x.msgin.as_mut().filter(|_| state == State::Incoming) else {
            self.metrics.drops.not_receiving += 1;
            return false;
        };
        if m.length != d.message_length {
            self.metrics.drops.inconsistent += 1;
            return false;
        }
        let len = match payload {
            Arrived::Bytes(bytes) => bytes.len(),
            Arrived::Placed(len) => len as usize,
        };
        let tick = self.tick;
        let wire_bytes = self.config.wire_bytes(data::HEADER_LEN + len);
        self.downlink.record(tick, wire_bytes, m.level_at(offset));
        let max_gaps = self.config.max_gaps as usize;
        let added = match payload {
            Arrived::Bytes(bytes) => m.add(offset, bytes, max_gaps),
            Arrived::Placed(len) => m.add_placed(offset, len, max_gaps),
        };
        let (complete, grantable) = (m.is_complete(), m.grantable);
        if added.is_ok() && d.retransmit != 0 {
            // Resent bytes that fill a hole: a RESEND found a loss. Ask promptly again.
            self.peers.get_mut(peer).patience = 0;
        }
        self.send_cutoffs_if_stale(r, peer, d.cutoff_version);
        // The rest waits while DATA of this message keeps coming (a GRO batch, a run in the
        // receive queue): it reads the message's state, which the run's last packet settles.
        // (The module too checks grants once per RPC per batch of packets.)
        if added.is_ok() && !complete {
            self.deferred = Some(r); // (`dispatch` settled any other RPC's)
            return true;
        }
        self.settle_data(); // the run's earlier packets, before this one ends it
        self.peers.get_mut(peer).heard = tick as u32;
        match added {
            Ok(()) => {}
            Err(Rejected::Duplicate) => self.metrics.drops.duplicate += 1,
            Err(Rejected::PastEnd) => self.metrics.drops.inconsistent += 1,
            Err(Rejected::TooManyGaps) => self.metrics.drops.gap_limit += 1,
        }
        // Data that cannot belong to the message (past its end, or of another length above)
        // is no sign of progress: a sender that disagrees about the message must not keep it
        // alive. (Fuzz finding: a request whose length was damaged in flight drew RESENDs
        // that the client answered with DATA the server dropped as inconsistent, each
        // resetting its silence, forever.)
        if added != Err(Rejected::PastEnd) {
            self.reset_silence(r);
        }
        // Also for a dropped packet: it may have created the message (an empty or
        // out-of-reach first packet), which must then be granted to and watched by the
        // timers like any other, or it would hold its memory forever.
        if grantable {
            self.grant_cx(|g, cx| g.check_rpc(cx, r));
        }
        if added.is_err() {
            self.refresh_worry(r);
            return false;
        }
        self.deliver(r);
        true
    }

    /// The bookkeeping after DATA that extends a message: its silence count restarts, the
    /// grant scheduler places it again and sends what is due, its loss timer follows.
    fn after_data(&mut self, r: RpcRef) {
        self.reset_silence(r);
        if self.rpcs.get(r).and_then(|x| x.msgin.as_ref()).is_some_and(|m| m.grantable) {
            self.grant_cx(|g, cx| g.check_rpc(cx, r));
        }
        self.refresh_worry(r);
    }

    /// Runs the bookkeeping that DATA packets deferred, if any (see `after_data`). Before
    /// anything that reads or changes RPCs, and before time moves.
    #[inline]
    pub(super) fn settle_data(&mut self) {
        if self.deferred.is_some() {
            self.settle_deferred();
        }
    }

    #[inline(never)]
    fn settle_deferred(&mut self) {
        if let Some(r) = self.deferred.take() {
            self.after_data(r);
        }
    }

    /// Creates a server RPC for the first DATA of a request, within the limits.
    fn new_server_rpc(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        d: &data::Repr,
    ) -> Result<RpcRef, NoRpc> {
        let Some(peer) = self.peers.get_or_insert(from, self.now) else {
            self.metrics.drops.peer_limit += 1;
            return Err(NoRpc::Limit);
        };
        if self.peers.get(peer).server_rpcs >= self.config.max_rpcs_per_peer {
            self.metrics.drops.rpc_limit += 1;
            return Err(NoRpc::Limit);
        }
        if !self.reserve_rx(peer, d.message_length) {
            return Err(NoRpc::Memory);
        }
        let birth = self.birth();
        let level = self.config.unsched_level(d.message_length);
        let p = self.peers.get_mut(peer);
        p.rpcs += 1;
        p.server_rpcs += 1;
        Ok(self.rpcs.insert(|| Rpc {
            id,
            peer,
            addr: from,
            local_port: h.dport,
            remote_port: h.sport,
            state: State::Incoming,
            cookie: 0,
            msgout: None,
            msgin: Some(InMessage::new(d.message_length, d.incoming, level, birth)),
            timer: TimerState::default(),
            tx_queued: false,
            resend_queued: false,
            grant_managed: false,
        }))
    }

    /// Reserves reassembly memory for a new message from `peer`, or counts the drop.
    fn reserve_rx(&mut self, peer: PeerId, length: u32) -> bool {
        let length = u64::from(length);
        if self.rx_bytes + self.lent_bytes + length > self.config.max_rx_bytes {
            self.metrics.drops.rx_memory += 1;
            return false;
        }
        let host = self.peers.get(peer).host;
        if !self.peers.hosts.reserve(host, length, self.config.max_bytes_per_host) {
            self.metrics.drops.host_memory += 1;
            return false;
        }
        self.rx_bytes += length;
        true
    }

    /// Gives back what [`reserve_rx`](Self::reserve_rx) reserved.
    pub(super) fn release_rx(&mut self, peer: PeerId, length: u64) {
        self.rx_bytes -= length;
        let host = self.peers.get(peer).host;
        self.peers.hosts.release(host, length);
    }

    pub(super) fn birth(&mut self) -> u64 {
        self.next_birth += 1;
        self.next_birth
    }

    /// Sends our CUTOFFS when a peer's DATA carries a stale version (one per tick per peer).
    fn send_cutoffs_if_stale(&mut self, r: RpcRef, peer: PeerId, version: u16) {
        let tick = self.tick();
        let p = self.peers.get_mut(peer);
        if version == self.config.cutoff_version || p.cutoffs_sent_tick.get() == Some(tick) {
            return;
        }
        p.cutoffs_sent_tick = MaybeTick::some(tick);
        let Some(x) = self.rpcs.get(r) else { return };
        let body = ControlBody::Cutoffs {
            cutoffs: self.config.advertised_cutoffs(),
            version: self.config.cutoff_version,
        };
        let control = Control::about(x, body);
        self.push_control(control);
    }
}
