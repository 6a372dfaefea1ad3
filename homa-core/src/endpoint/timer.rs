//! The clock and the timers: ticks, RESENDs, timeouts, NEED_ACKs.

use crate::rpc::{Rpc, RpcRef, State};
use crate::sched::tx::{Control, ControlBody};
use crate::time::MaybeTick;
use crate::time::{Instant, Nanos};

use super::{Endpoint, FailReason, NEED_ACK_BACKOFFS};

impl Endpoint {
    pub(super) fn advance(&mut self, now: Nanos) {
        self.now = self.now.max(now);
        if self.now - self.stalled < self.tick_end {
            return; // the common case: still in the same tick
        }
        // A timer due more than a tick before now did not run when it was due: the
        // endpoint was stalled since then, and those ticks do not count. (Whoever drives
        // by `poll_timeout` runs each tick's timers within the tick.)
        let len = self.config.tick();
        if let Some(due) = self.timers.next_tick() {
            let late = self.now.saturating_sub(self.tick_start(due).saturating_add(len));
            // A tick boundary passed: the endpoint runs at least one tick on (the clock
            // never goes back to a tick already seen).
            let room = (self.now - self.stalled).saturating_sub((self.tick + 1) * len);
            self.stalled += late.min(room);
        }
        // A division only when a tick boundary passes, not on every call.
        self.tick = (self.now - self.stalled) / len;
        self.tick_end = (self.tick + 1).saturating_mul(len);
    }

    /// When tick `tick` starts, on the caller's clock.
    pub(super) fn tick_start(&self, tick: u64) -> Nanos {
        tick.saturating_mul(self.config.tick()).saturating_add(self.stalled)
    }

    /// The current timer tick: tick T spans [T * tick, (T + 1) * tick).
    pub(super) fn tick(&self) -> u64 {
        self.tick
    }

    /// How many arriving packets this host has dropped so far before the endpoint saw them
    /// (for a socket, `SK_MEMINFO_DROPS`: its receive buffer was full). Tell it before each
    /// [`handle_timeout`](Self::handle_timeout) if the I/O layer can know: while the count
    /// grows, RPCs count a tenth of each tick as silence, so an overloaded host drains its
    /// input before it asks for more, and fails no call whose peer is alive.
    pub fn note_input_drops(&mut self, now: Instant, dropped: u64) {
        self.advance(now.as_nanos());
        self.overload.read(self.tick, dropped);
    }

    /// Runs timer work due at `now`: RESENDs, NEED_ACKs and timeouts. A call with nothing
    /// due changes nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = now.as_nanos();
        self.settle_data();
        self.advance(now);
        let tick = self.tick();
        loop {
            // Sorted again each time (O(1) unless something new is due): running one timer
            // may arm another for this tick, which must run now, not at the next call.
            let rpcs = &self.rpcs;
            self.timers.sort_recent(tick, |due, r| {
                rpcs.get(r).is_some_and(|x| x.timer.armed_tick.get() == Some(due))
            });
            let Some((due, r)) = self.timers.pop_due(tick) else { break };
            let Some(x) = self.rpcs.get_mut(r) else { continue };
            if x.timer.armed_tick.get() != Some(due) {
                continue; // superseded by a later plan
            }
            x.timer.armed_tick = MaybeTick::NONE;
            self.check_rpc_timer(r, tick);
        }
    }

    /// `homa_timer_check_rpc` for one RPC at `tick`.
    fn check_rpc_timer(&mut self, r: RpcRef, tick: u64) {
        let Some(x) = self.rpcs.get(r) else { return };
        if let Some(done) = x.timer.done_tick.get() {
            // A server whose response is out asks for the ack `request_ack_ticks` later,
            // then after 1, 2, 4 ... ticks (at most 32: `NEED_ACK_BACKOFFS`) until
            // `ack_timeout_ticks`. A client that answers does at once; one that is stalled
            // with a thousand responses waiting is not sent a thousand NEED_ACKs a tick,
            // which would overflow its socket when it resumes. (The module asks each tick.)
            let (first, end) = (
                done + u64::from(self.config.request_ack_ticks),
                done + u64::from(self.config.ack_timeout_ticks),
            );
            if tick >= end {
                self.metrics.server_timeouts += 1;
                self.end_rpc(r);
                return;
            }
            let mut next = first;
            if tick >= first {
                let need_ack = Control::about(x, ControlBody::NeedAck);
                self.push_control(need_ack);
                let Some(x) = self.rpcs.get_mut(r) else { return };
                next = tick + (1 << x.timer.asked.min(NEED_ACK_BACKOFFS));
                x.timer.asked += 1;
            }
            self.arm(r, next.min(end));
            return;
        }
        self.refresh_worry(r);
        let Some(x) = self.rpcs.get(r) else { return };
        if !x.timer.worried {
            return;
        }
        let c = &self.config;
        // A server waiting for grants hears nothing while its client grants other messages
        // first (more than `max_overcommit` arriving, the rest queued): it keeps its response
        // as long as one waiting for an ACK does, far longer than an RPC the peer owes data.
        let waits_for_grants = !x.is_client() && x.state == State::Outgoing;
        let timeout = if waits_for_grants { c.ack_timeout_ticks } else { c.timeout_ticks };
        let (resend, interval, timeout) =
            (u64::from(c.resend_ticks), u64::from(c.resend_interval), u64::from(timeout));
        let mut silent = tick.saturating_sub(x.timer.silent_since);
        // A client is owed nothing either while the server has its request in hand: while
        // the request waits for grants (the server grants shortest first, so a long one may
        // wait behind many; a lost GRANT is found by the server's own RESEND for what it
        // granted), and once it is all sent if the server granted some of it (the server
        // asks for what it lacks itself, and a lost response draws its NEED_ACK, which the
        // client answers with a RESEND). A request never granted may have been lost whole:
        // it is asked after as usual. Such a client only checks that the server is there,
        // by RESEND (answered with BUSY) halfway to the timeout. Any packet from the server
        // shows it is; the RPC's own silence counts a tenth (`timeout_ticks` over
        // `ack_timeout_ticks`, the time a server waits for a stalled client), for a server
        // that restarted and forgot it but talks of others. (The module asks every
        // `resend_interval`: thousands of RESENDs under load, for no lost packet.)
        let server_has_turn = x.is_client()
            && x.state == State::Outgoing
            && x.msgout
                .as_ref()
                .is_some_and(|m| m.next_offset < m.length || m.granted > m.unscheduled);
        let resend = if server_has_turn {
            let heard = u64::from((tick as u32).wrapping_sub(self.peers.get(x.peer).heard));
            let own = silent * timeout / u64::from(c.ack_timeout_ticks).max(timeout);
            silent = heard.min(silent).max(own);
            timeout / 2
        } else if x.state == State::Incoming {
            (resend << self.peers.get(x.peer).patience).min(timeout / 2)
        } else {
            resend
        };
        // Less the ticks in which this host dropped input (see `overload`).
        let silent = silent - (self.overload.excused() - x.timer.excused_at).min(silent);
        if silent >= timeout {
            let reason = FailReason::Timeout;
            if x.is_client() {
                self.metrics.client_timeouts += 1;
            } else {
                self.metrics.server_timeouts += 1;
            }
            self.fail_or_drop(r, reason);
            return;
        }
        let asked = x.timer.asked;
        // A RESEND is due resend_ticks into the silence, then every resend_interval, counting
        // neither the ticks in which the downlink may only have queued the awaited bytes
        // (see `downlink`) nor, past half the timeout, any fewer ticks than elapsed: a lost
        // packet is still asked for well before its RPC would fail.
        let held = self.downlink.held(tick, x.timer.held_level) - x.timer.held_at;
        let waited = (silent - held.min(silent)).max(silent.saturating_sub(timeout / 2));
        // A server asks for a silent request at intervals that double (5, 10, 20, 40 ...
        // ticks in): giving up loses nothing, as its client still holds the request and
        // sends it again when its own RESEND draws RPC_UNKNOWN, and a host that opens
        // thousands of requests and goes silent would otherwise draw a RESEND for each of
        // them every interval (`homa hostile`). A client keeps asking every interval:
        // giving up fails its call.
        let backoff = !x.is_client() && x.state == State::Incoming;
        let due = match (waited.checked_sub(resend), backoff) {
            (None, _) => 0,
            (Some(late), false) => late / interval + 1,
            (Some(late), true) => u64::from((late / interval + 1).ilog2()) + 1,
        };
        // One RESEND per due point, however late the driver ran this timer. A server
        // waiting for grants has nothing to ask for; it only times out.
        let may_ask = x.is_client() || x.state == State::Incoming;
        if due > u64::from(asked) {
            if may_ask {
                self.request_retransmission(r);
            }
            if self.rpcs.get(r).is_some_and(|x| x.grant_managed) {
                self.grant_cx(|g, cx| g.sender_silent(cx, r));
            }
            if let Some(x) = self.rpcs.get_mut(r) {
                x.timer.asked = due as u32;
            }
        }
        // The next due point, if no tick holds the awaited bytes from now on.
        let next_due = match backoff {
            false => resend + due * interval,
            true => resend + ((1 << due) - 1) * interval,
        };
        self.arm(r, tick + (next_due - waited).min(timeout - silent));
    }

    /// Whether an RPC waits on its peer and counts silent ticks (spec §2.6): receiving with
    /// granted bytes outstanding, or having sent all it may (a client then awaits the
    /// response; a server awaits grants for the rest of its response).
    ///
    /// The module never times out a server waiting for grants; we do, after
    /// `ack_timeout_ticks` (as a server waiting for an ACK), so a vanished client cannot pin
    /// a response in memory forever.
    fn waits_on_peer(x: &Rpc) -> bool {
        match x.state {
            State::Incoming => x.msgin.as_ref().is_some_and(|m| m.received() < m.granted),
            State::Outgoing => x.msgout.as_ref().is_some_and(|m| {
                m.next_offset >= m.granted && (x.is_client() || m.next_offset < m.length)
            }),
            State::InService => false,
        }
    }

    /// Starts counting silence when an RPC becomes owed data, and keeps a wake-up armed for
    /// its first RESEND.
    pub(super) fn refresh_worry(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get_mut(r) else { return };
        let owed = Self::waits_on_peer(x);
        let begins = owed && !x.timer.worried;
        x.timer.worried = owed;
        if begins {
            self.reset_silence(r);
        }
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if owed {
            let due = x.timer.silent_since + u64::from(self.config.resend_ticks);
            if x.timer.armed_tick.get().is_none_or(|t| t > due) {
                self.arm(r, due);
            }
        }
    }

    /// Wakes `r` at `tick`, or at the current tick if that has passed (a plan made from an
    /// old silence start): not in the past, which would read as a timer the driver ran late.
    pub(super) fn arm(&mut self, r: RpcRef, tick: u64) {
        let tick = tick.max(self.tick);
        if let Some(x) = self.rpcs.get_mut(r) {
            x.timer.armed_tick = MaybeTick::some(tick);
            self.timers.push(tick, r);
        }
    }

    /// Asks the peer for missing bytes (`homa_request_retrans`): one RESEND per gap and one
    /// for [received, granted), or one for the first packet when nothing of the message
    /// arrived. Resent bytes keep the level they were first sent at (the unscheduled level
    /// of the message's length under this receiver's cutoffs, or the last grant's), so a
    /// retransmission does not jump ahead of the short messages; a first packet of unknown
    /// length is asked for at the top level.
    pub(super) fn request_retransmission(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get(r) else { return };
        let top = self.config.num_priorities - 1;
        let level = |offset: u32| x.msgin.as_ref().map_or(top, |m| m.level_at(offset));
        let limit = self.config.max_pending_control;
        let mut resend = |offset, length| {
            let priority = level(offset);
            let body = ControlBody::Resend { offset, length, priority };
            if !self.tx.push_control(Control::about(x, body), limit) {
                self.metrics.control_overflow += 1;
            }
        };
        match x.msgin.as_ref() {
            Some(m) => {
                for g in &m.gaps {
                    resend(g.start, g.end - g.start);
                }
                if m.granted > m.recv_end {
                    resend(m.recv_end, m.granted - m.recv_end);
                }
            }
            // Nothing of the response yet: ask for its first packet only (as the module once
            // did). The server may have sent it all while this RESEND was on its way (a busy
            // server reads late), and all of a message being lost is rare; its first packet
            // gives the length, and the next RESEND the gaps.
            None => resend(0, self.max_payload),
        }
    }
}
