//! Control packets received: GRANT, RESEND, RPC_UNKNOWN, BUSY, NEED_ACK, ACK.

use core::net::SocketAddr;

use crate::peer::MAX_PATIENCE;
use crate::rpc::{RpcRef, State};
use crate::sched::tx::{Control, ControlBody};
use crate::wire::{self, Ack, MAX_ACKS, header};

use super::{Endpoint, RESTARTS_THAT_END_SILENCE};

impl Endpoint {
    pub(super) fn handle_grant(&mut self, r: RpcRef, g: wire::grant::Repr) {
        self.reset_silence(r);
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if x.state != State::Outgoing {
            return;
        }
        let Some(m) = x.msgout.as_mut() else { return };
        m.grant(g.offset);
        m.sched_priority = g.priority;
        self.queue_tx(r);
        self.refresh_worry(r);
    }

    pub(super) fn handle_resend(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        rpc: Option<RpcRef>,
        rs: wire::resend::Repr,
    ) -> bool {
        let reply = |body| Control { to: from, sport: h.dport, dport: h.sport, id, body };
        let Some(r) = rpc else {
            self.push_control(reply(ControlBody::RpcUnknown));
            return true;
        };
        // A peer asking for our message is alive and waiting on us: while we send it (or wait
        // for grants to), its RESENDs count as hearing from it (the module does not count
        // them; we do, so a server waiting for grants does not time out while its client asks
        // for data). Not while we receive: then only the data we asked for does, or two sides
        // each waiting on the other (RESEND one way, BUSY back) would keep each other alive.
        if self.rpcs.get(r).is_some_and(|x| x.state == State::Outgoing) {
            self.reset_silence(r);
        }
        let Some(x) = self.rpcs.get_mut(r) else { return true };
        let sending = x.is_client() || x.state == State::Outgoing;
        let Some(m) = x.msgout.as_mut().filter(|_| sending) else {
            // A server still working on the request: keep the client waiting.
            self.push_control(reply(ControlBody::Busy));
            return true;
        };
        let tx_end = m.next_offset;
        let end = match rs.length {
            wire::resend::ALL_SENT => tx_end,
            length => rs.offset.saturating_add(length),
        };
        // Asked for bytes beyond the grant: a GRANT must have been lost.
        let grant_lost = end > m.granted;
        if grant_lost {
            m.grant(end);
        }
        // Granted bytes still unsent: we chose to send other messages first, and the asker
        // heard nothing because of that, not because of a loss; what it lacks may be on its
        // way. BUSY, as the module does: a real gap is asked for again once all granted is
        // out. Otherwise resend what was sent of the range; if nothing was, BUSY too. Not
        // for a range past the end of the message, which never comes (the asker has another
        // idea of the message, e.g. a damaged length): it must time out, not wait for ever.
        // New data sent within the last few ticks: the asker's RESEND crossed it (the asker
        // counts `resend_ticks` silent ticks before asking, so it was not lost yet): BUSY.
        let recent = self.tick.saturating_sub(m.sent_tick)
            < u64::from(self.config.resend_ticks.saturating_sub(1).max(1));
        let behind = tx_end < m.granted || recent;
        if !behind && m.queue_resend(rs.offset, end, self.max_payload) && !x.resend_queued {
            x.resend_queued = true;
            self.tx.resends.push_back(r);
        }
        if (behind || rs.offset >= tx_end) && rs.offset < m.length {
            self.push_control(reply(ControlBody::Busy));
        }
        if grant_lost {
            self.queue_tx(r);
        }
        self.refresh_worry(r);
        true
    }

    /// A BUSY answered our RESEND for granted bytes: the sender still had them queued (it
    /// sends shorter messages first, or its host fell behind), so none was lost. Its next
    /// silences are given longer before we ask again (`Peer::patience`).
    pub(super) fn busy_answered(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get(r) else { return };
        if x.state == State::Incoming && x.timer.asked > 0 {
            let p = self.peers.get_mut(x.peer);
            p.patience = (p.patience + 1).min(MAX_PATIENCE);
        }
    }

    pub(super) fn handle_rpc_unknown(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if !x.is_client() {
            self.end_rpc(r);
            return;
        }
        if self.tick < x.timer.stale_until {
            return; // an answer to a RESEND from before the last restart (see below)
        }
        if x.state == State::Incoming {
            // The server forgot the RPC while answering it (it gave up waiting for our
            // grants while we were stalled, or it restarted): the rest of the response
            // never comes. Ask again from the start, as for a lost request. (The module
            // ignores this and times out; a restart can re-execute the request in both
            // cases.)
            if x.grant_managed {
                self.grant_cx(|g, cx| g.end_rpc(cx, r));
            }
            let Some(x) = self.rpcs.get_mut(r) else { return };
            let partial = x.msgin.take().map_or(0, |m| m.length);
            x.state = State::Outgoing;
            let peer = x.peer;
            self.release_rx(peer, u64::from(partial));
        }
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if x.state != State::Outgoing {
            return;
        }
        let Some(m) = x.msgout.as_mut() else { return };
        // The server lost everything: send all we sent again.
        if m.queue_resend(0, m.next_offset, self.max_payload) && !x.resend_queued {
            x.resend_queued = true;
            self.tx.resends.push_back(r);
        }
        self.metrics.restarts += 1;
        // The server is alive and gets the request again, but the silence began before it
        // could answer: a user-space server may have been stalled for most of it (the
        // module's kernel code never is), which would leave the resent request only what
        // remains of `timeout_ticks`. So the silence starts over (the module's does not), a
        // few times, as the resent request may be lost too; a server that keeps forgetting
        // the request, and says nothing else, must still time out.
        //
        // The RESENDs sent since the first of this silence (or since the last restart) may
        // still draw RPC_UNKNOWNs, each of which would send the request once more (a client
        // that read its socket late, after a stall, sent storms of requests). The first
        // came back within the time since then, so that long from now the rest have: until
        // then none restarts the RPC, unless the server speaks of it first (then they have
        // come). At most a quarter of the timeout, as the request resent now may be lost
        // too, and the next RPC_UNKNOWN then has to count.
        let tick = self.tick;
        let first_resend =
            x.timer.silent_since.max(x.timer.restarted_at) + u64::from(self.config.resend_ticks);
        let most = u64::from(self.config.timeout_ticks / 4);
        let quiet = tick.saturating_sub(first_resend).min(most);
        let restarts = x.timer.restarts;
        if restarts < RESTARTS_THAT_END_SILENCE {
            self.reset_silence(r);
        }
        if let Some(x) = self.rpcs.get_mut(r) {
            x.timer.restarts = restarts.saturating_add(1);
            x.timer.restarted_at = tick;
            x.timer.stale_until = tick + quiet;
        }
        // Bytes it may send but has not: back in the sender's queue, which dropped it while
        // it was receiving (fuzz finding: DATA naming a request still being sent turned it to
        // receiving, and after this restart it sent nothing more, with no deadline).
        self.queue_tx(r);
        self.refresh_worry(r);
    }

    pub(super) fn handle_need_ack(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        rpc: Option<RpcRef>,
    ) -> bool {
        if let Some(r) = rpc {
            // Still receiving the response: not safe to ack; ask for the rest instead.
            self.request_retransmission(r);
            return true;
        }
        let mut acks = [Ack::NONE; MAX_ACKS];
        let count = match self.peers.find(from) {
            Some(peer) => self.peers.get_mut(peer).take_acks(MAX_ACKS, &mut acks),
            None => 0,
        };
        let body = ControlBody::Ack { acks, count: count as u8 };
        self.push_control(Control { to: from, sport: h.dport, dport: h.sport, id, body });
        true
    }

    /// A client acknowledged a finished RPC: the server may forget it.
    pub(super) fn handle_ack(&mut self, from: SocketAddr, ack: Ack) {
        let Some(r) = self.rpcs.find_server(from, wire::local_id(ack.client_id)) else { return };
        if self.rpcs.get(r).is_some_and(|x| x.local_port == ack.server_port) {
            self.end_rpc(r);
        }
    }
}
