//! The receiver's grant scheduler (spec §2.4, `homa_grant.c`).
//!
//! Incoming messages that need more than their unscheduled bytes are *managed*: up to
//! `max_overcommit` of them are *active* and receive grants; the rest wait, ordered by SRPT
//! (fewest bytes still to receive first, then oldest). Each active message may have a
//! window of granted-but-unreceived bytes (`max_incoming / (active + 1)` by default), and
//! the total across the active messages stays within `max_incoming`; an active message that
//! could not get its full window because of that cap is *needy* and is topped up, in SRPT
//! order, when room appears. Activation balances peers: a waiting message from a peer with fewer active
//! messages goes first, and a victim is taken from the peer with the most. A small share of
//! the link (`grant_fifo_fraction`) goes to FIFO grants for the oldest message, so long
//! messages are never starved.
//!
//! Three differences from the module: SRPT ranks use each message's current bytes remaining,
//! where the module compares a copy taken when the message became active; a peer has
//! at most `max_active_per_peer` active messages besides those in their last round trip
//! (default 1, as in the paper's scheduler, which granted to senders rather than messages),
//! where today's module lets one peer fill every slot; and only the bytes active messages
//! still expect count against `max_incoming`, where the module counts every message's
//! outstanding bytes, unscheduled ones included, until they arrive. Bytes a sender was asked
//! to resend (it went silent) are presumed lost until new ones arrive. Otherwise senders
//! that announce messages and send nothing more (a broken or hostile host, from many ports)
//! hold the total at the cap, and nothing is granted until their messages time out.

use alloc::vec::Vec;

use crate::config::{Config, MAX_OVERCOMMIT};
use crate::metrics::Metrics;
use crate::msg::incoming::InMessage;
use crate::peer::{PeerId, PeerTable};
use crate::rpc::{RpcRef, RpcTable};
use crate::sched::tx::{Control, ControlBody, TxQueues};
use crate::time::Nanos;

/// Where the scheduler reads messages and writes GRANTs.
pub(crate) struct GrantCx<'a> {
    pub(crate) rpcs: &'a mut RpcTable,
    pub(crate) peers: &'a mut PeerTable,
    pub(crate) tx: &'a mut TxQueues,
    pub(crate) config: &'a Config,
    pub(crate) metrics: &'a mut Metrics,
    pub(crate) now: Nanos,
}

/// SRPT order: `a` outranks `b` if it has fewer bytes left, or as many and is older.
fn outranks(a: (u32, u64), b: (u32, u64)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    rpc: RpcRef,
    peer: PeerId,
    remaining: u32,
    birth: u64,
}

impl Entry {
    fn rank(&self) -> (u32, u64) {
        (self.remaining, self.birth)
    }
}

const _: () = assert!(MAX_OVERCOMMIT as u32 <= u8::BITS, "`Grants::needy` has a bit per slot");

#[derive(Debug)]
pub(crate) struct Grants {
    /// `max_overcommit` slots.
    active: [Option<Entry>; MAX_OVERCOMMIT as usize],
    slots: usize,
    /// `max_active_per_peer`: slots one peer's messages may hold, besides those in their
    /// last round trip.
    per_peer: u8,
    /// Bytes left to receive at which a message gives its peer's turn to the next: a round
    /// trip's worth (`unsched_bytes`), so the next one's data follows without a gap.
    handoff_bytes: u32,
    /// Occupied slots.
    num_active: usize,
    /// A bit for each slot whose message could not get its full window because of
    /// `max_incoming` (tested on every grant; the slots are scanned only when one is set).
    needy: u8,
    /// `Config::incoming_cap`, computed once.
    cap: u64,
    /// The window for each number of active messages (`Config::grant_window`, computed once
    /// like the module's `windows[]`).
    windows: [u32; MAX_OVERCOMMIT as usize + 1],
    /// `Config::max_sched_prio`, computed once.
    max_sched_prio: u8,
    /// Managed messages not active, in SRPT order.
    waiting: Vec<Entry>,
    /// Granted-but-unreceived bytes of all managed messages.
    total_incoming: u64,
    /// Target of FIFO grants until it stops needing them.
    oldest: Option<RpcRef>,
    next_fifo_grant: Nanos,
    /// Messages granted to since the caller last drained this list: they are now owed data,
    /// which the endpoint's timers must watch.
    granted: Vec<RpcRef>,
}

impl Grants {
    pub(crate) fn new(config: &Config) -> Grants {
        Grants {
            active: [None; MAX_OVERCOMMIT as usize],
            slots: usize::from(config.max_overcommit),
            per_peer: config.max_active_per_peer,
            handoff_bytes: config.unsched_bytes,
            num_active: 0,
            needy: 0,
            cap: u64::from(config.incoming_cap()),
            windows: core::array::from_fn(|n| config.grant_window(n)),
            max_sched_prio: config.max_sched_prio(),
            waiting: Vec::new(),
            total_incoming: 0,
            oldest: None,
            next_fifo_grant: 0,
            granted: Vec::new(),
        }
    }

    pub(crate) fn num_active(&self) -> usize {
        self.num_active
    }

    pub(crate) fn num_managed(&self) -> usize {
        self.num_active() + self.waiting.len()
    }

    pub(crate) fn total_incoming(&self) -> u64 {
        self.total_incoming
    }

    /// Takes the next message granted to since the last call.
    pub(crate) fn take_granted(&mut self) -> Option<RpcRef> {
        self.granted.pop()
    }

    fn slot_of(&self, rpc: RpcRef) -> Option<usize> {
        self.active[..self.slots].iter().position(|a| a.is_some_and(|a| a.rpc == rpc))
    }

    fn entry(cx: &GrantCx<'_>, rpc: RpcRef) -> Option<Entry> {
        let r = cx.rpcs.get(rpc)?;
        let m = r.msgin.as_ref()?;
        Some(Entry { rpc, peer: r.peer, remaining: m.bytes_remaining, birth: m.birth })
    }

    /// Called after a managed-or-not message received data (or was created): updates its
    /// place and sends whatever grants are now due (`homa_grant_check_rpc`).
    pub(crate) fn check_rpc(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef) {
        let Some(r) = cx.rpcs.get(rpc) else { return };
        let Some(m) = r.msgin.as_ref().filter(|m| m.grantable) else { return };
        if m.bytes_remaining == 0 {
            self.unmanage(cx, rpc);
        } else {
            if !r.grant_managed {
                self.manage(cx, rpc);
            }
            self.update_incoming(cx, rpc);
            if let Some(slot) = self.slot_of(rpc) {
                if let (Some(a), Some(e)) = (self.active[slot].as_mut(), Self::entry(cx, rpc)) {
                    a.remaining = e.remaining;
                }
                self.try_send(cx, slot, true);
                if self.active[slot].is_some_and(|a| !self.counts_for_peer(&a)) {
                    self.fill_free_slots(cx);
                }
            }
        }
        self.check_needy(cx);
    }

    /// A message in its last round trip no longer counts against its peer's limit: waiting
    /// messages of that peer may take free slots.
    fn fill_free_slots(&mut self, cx: &mut GrantCx<'_>) {
        while self.num_active < self.slots && !self.waiting.is_empty() {
            let Some(free) = self.active[..self.slots].iter().position(Option::is_none) else {
                return;
            };
            if !self.promote_waiting(cx, free) {
                return;
            }
        }
    }

    /// A message's RPC ends before the message completed (aborted, timed out, acked): stop
    /// granting to it and let the others use the room it leaves.
    pub(crate) fn end_rpc(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef) {
        self.unmanage(cx, rpc);
        self.check_needy(cx);
    }

    /// Stops granting to a message and hands its active slot, if any, to the best waiting
    /// message (`homa_grant_unmanage_rpc`).
    fn unmanage(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef) {
        let Some(r) = cx.rpcs.get_mut(rpc) else { return };
        let Some(m) = r.msgin.as_mut().filter(|m| m.grantable) else { return };
        m.grantable = false;
        r.grant_managed = false;
        if core::mem::take(&mut m.counted) {
            self.total_incoming -= u64::from(m.rec_incoming);
        }
        m.rec_incoming = 0;
        if let Some(slot) = self.slot_of(rpc) {
            self.remove_active(cx, slot);
            self.promote_waiting(cx, slot);
        } else if let Some(i) = self.waiting.iter().position(|e| e.rpc == rpc) {
            self.remove_waiting(cx.peers, i);
        }
        if self.oldest == Some(rpc) {
            self.oldest = None;
        }
    }

    fn manage(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef) {
        let Some(entry) = Self::entry(cx, rpc) else { return };
        match self.find_victim(cx, &entry) {
            Some(slot) => {
                if let Some(bumped) = self.active[slot] {
                    self.remove_active(cx, slot);
                    self.insert_waiting(cx.peers, bumped);
                }
                self.add_active(cx, slot, entry);
            }
            None => {
                self.insert_waiting(cx.peers, entry);
            }
        }
        if let Some(r) = cx.rpcs.get_mut(rpc) {
            r.grant_managed = true;
        }
    }

    fn add_active(&mut self, cx: &mut GrantCx<'_>, slot: usize, entry: Entry) {
        debug_assert!(self.active[slot].is_none(), "slot {slot} is taken");
        cx.peers.get_mut(entry.peer).active_grants += 1;
        self.active[slot] = Some(entry);
        self.needy &= !(1 << slot);
        self.num_active += 1;
        self.recount_rpc(cx, entry.rpc, true);
    }

    fn remove_active(&mut self, cx: &mut GrantCx<'_>, slot: usize) {
        if let Some(a) = self.active[slot].take() {
            cx.peers.get_mut(a.peer).active_grants -= 1;
            self.needy &= !(1 << slot);
            self.num_active -= 1;
            self.recount_rpc(cx, a.rpc, false);
        }
    }

    /// Queues `entry` in SRPT order; returns its index.
    fn insert_waiting(&mut self, peers: &mut PeerTable, entry: Entry) -> usize {
        let at = self.waiting.partition_point(|e| !outranks(entry.rank(), e.rank()));
        self.waiting.insert(at, entry);
        peers.get_mut(entry.peer).waiting_grants += 1;
        at
    }

    fn remove_waiting(&mut self, peers: &mut PeerTable, i: usize) -> Entry {
        let entry = self.waiting.remove(i);
        peers.get_mut(entry.peer).waiting_grants -= 1;
        entry
    }

    /// Picks a slot for `cand`: an empty one, or the lowest-priority active message if `cand`
    /// should replace it (`homa_grant_find_victim`); none, even with a slot empty, when its
    /// peer is at `max_active_per_peer` and `cand` does not outrank that peer's lowest.
    fn find_victim(&self, cx: &GrantCx<'_>, cand: &Entry) -> Option<usize> {
        let (holding, lowest) = self.holding(cand.peer);
        if holding >= self.per_peer && self.counts_for_peer(cand) {
            // Its peer holds all the slots it may, and it would count too: it can only take
            // the place of that peer's lowest-ranked message.
            return lowest.filter(|(_, a)| outranks(cand.rank(), a.rank())).map(|(slot, _)| slot);
        }
        let active_of = |peer: PeerId| usize::from(cx.peers.get(peer).active_grants);
        let mut lp: Option<(usize, usize, Entry)> = None; // (slot, its peer's active, entry)
        for slot in 0..self.slots {
            let Some(a) = self.active[slot] else { return Some(slot) };
            // Count `cand` as active too when it shares the peer: the state after a swap.
            let peer_active = active_of(a.peer) + usize::from(a.peer == cand.peer);
            let replace = match lp {
                None => true,
                Some((_, lp_active, _)) if peer_active != lp_active => peer_active > lp_active,
                // Same peer pressure: the lower SRPT priority (more left; then younger).
                Some((_, _, lp_entry)) => !outranks(a.rank(), lp_entry.rank()),
            };
            if replace {
                lp = Some((slot, peer_active, a));
            }
        }
        let (slot, lp_active, lp_entry) = lp?;
        if lp_active > active_of(cand.peer) + 1 || outranks(cand.rank(), lp_entry.rank()) {
            Some(slot)
        } else {
            None
        }
    }

    /// Fills an empty slot from the waiting messages: the best message of a peer with no
    /// active message, else of the peer with the fewest, of the messages that would not
    /// count against a peer at `max_active_per_peer` (`homa_grant_promote_queued`). Whether
    /// it found one.
    fn promote_waiting(&mut self, cx: &mut GrantCx<'_>, slot: usize) -> bool {
        let mut at_limit = [None; MAX_OVERCOMMIT as usize];
        for (i, a) in self.active[..self.slots].iter().enumerate() {
            if let Some(a) = a
                && self.holding(a.peer).0 >= self.per_peer
            {
                at_limit[i] = Some(a.peer);
            }
        }
        let mut best: Option<(usize, u8)> = None;
        for (i, e) in self.waiting.iter().enumerate() {
            let active = cx.peers.get(e.peer).active_grants;
            let may = !self.counts_for_peer(e) || !at_limit.contains(&Some(e.peer));
            if best.is_none_or(|(_, a)| active < a) && may {
                best = Some((i, active));
                if active == 0 {
                    break;
                }
            }
        }
        let Some((i, _)) = best else { return false };
        let entry = self.remove_waiting(cx.peers, i);
        self.add_active(cx, slot, entry);
        self.set_needy(slot);
        true
    }

    /// Whether `e` counts against its peer's `max_active_per_peer`: not once it is within its
    /// last round trip, when it hands the turn on.
    fn counts_for_peer(&self, e: &Entry) -> bool {
        e.remaining > self.handoff_bytes
    }

    /// The active messages of `peer` that count against `max_active_per_peer`: how many,
    /// and the lowest-ranked one with its slot.
    fn holding(&self, peer: PeerId) -> (u8, Option<(usize, Entry)>) {
        let (mut n, mut lowest) = (0, None::<(usize, Entry)>);
        for (slot, a) in self.active[..self.slots].iter().enumerate() {
            let Some(a) = *a else { continue };
            if a.peer != peer || !self.counts_for_peer(&a) {
                continue;
            }
            n += 1;
            if lowest.is_none_or(|(_, l)| outranks(l.rank(), a.rank())) {
                lowest = Some((slot, a));
            }
        }
        (n, lowest)
    }

    /// A waiting message got closer to completion: move it up, and into the active set if it
    /// is now its peer's best and outranks a victim (`homa_grant_promote_rpc`).
    fn promote_rpc(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef) {
        let Some(entry) = Self::entry(cx, rpc) else { return };
        // Its new place, found by rank: fewer bytes remain, so it moves forward and its old
        // entry follows, past the few messages it now outranks. A long queue is not scanned
        // from the front on every packet. (Ranks are unique: births are.)
        let at = self.waiting.partition_point(|e| !outranks(entry.rank(), e.rank()));
        let at = match self.waiting[at..].iter().position(|e| e.rpc == rpc) {
            Some(k) => {
                self.waiting[at..=at + k].rotate_right(1);
                self.waiting[at] = entry;
                at
            }
            None => {
                let Some(i) = self.waiting.iter().position(|e| e.rpc == rpc) else { return };
                self.remove_waiting(cx.peers, i);
                self.insert_waiting(cx.peers, entry)
            }
        };
        let alone = cx.peers.get(entry.peer).waiting_grants == 1;
        if !alone && self.waiting[..at].iter().any(|e| e.peer == entry.peer) {
            return; // not its peer's best
        }
        if let Some(slot) = self.find_victim(cx, &entry) {
            let mut at = at;
            if let Some(victim) = self.active[slot] {
                self.remove_active(cx, slot);
                if self.insert_waiting(cx.peers, victim) <= at {
                    at += 1;
                }
            }
            self.remove_waiting(cx.peers, at);
            self.add_active(cx, slot, entry);
        }
    }

    /// Records the message's outstanding bytes, granted - received (fewer than granted when
    /// the sender already sent past a grant), and makes them its share of `total_incoming`
    /// if it is `active` and its sender not silent, none otherwise.
    fn recount(&mut self, metrics: &mut Metrics, m: &mut InMessage, active: bool) {
        let incoming = m.granted.saturating_sub(m.received());
        let counts = active && !m.silent;
        let old = if m.counted { m.rec_incoming } else { 0 };
        let new = if counts { incoming } else { 0 };
        self.total_incoming = self.total_incoming + u64::from(new) - u64::from(old);
        (m.rec_incoming, m.counted) = (incoming, counts);
        metrics.peak_incoming = metrics.peak_incoming.max(self.total_incoming);
    }

    /// The sender of a message was asked to resend: what it owes no longer counts as
    /// incoming, and others may be granted the room.
    pub(crate) fn sender_silent(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef) {
        let active = self.slot_of(rpc).is_some();
        let Some(m) = cx.rpcs.get_mut(rpc).and_then(|r| r.msgin.as_mut()) else { return };
        if !m.grantable || m.silent {
            return;
        }
        m.silent = true;
        self.recount(cx.metrics, m, active);
        self.check_needy(cx);
    }

    /// Recounts a managed message that became active or stopped being active.
    fn recount_rpc(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef, active: bool) {
        if let Some(m) = cx.rpcs.get_mut(rpc).and_then(|r| r.msgin.as_mut()).filter(|m| m.grantable)
        {
            self.recount(cx.metrics, m, active);
        }
    }

    /// Brings the message's outstanding bytes up to date (`homa_grant_update_incoming`).
    /// (Whether it counts changes only where it becomes active or inactive, or its sender
    /// silent, and each of those recounts; new bytes from a silent sender move the count,
    /// unless nothing is outstanding either way.)
    fn update_incoming(&mut self, cx: &mut GrantCx<'_>, rpc: RpcRef) {
        let Some(m) = cx.rpcs.get_mut(rpc).and_then(|r| r.msgin.as_mut()) else { return };
        if m.granted.saturating_sub(m.received()) == m.rec_incoming || !m.grantable {
            return;
        }
        let active = self.slot_of(rpc).is_some();
        self.recount(cx.metrics, m, active);
        if !active {
            self.promote_rpc(cx, rpc);
        }
    }

    /// Level for a grant to a message that `rank` active messages outrank: the highest
    /// scheduled level minus the rank, shifted down when fewer messages are active than
    /// there are scheduled levels, so new short messages can still preempt.
    fn grant_priority(&self, rank: usize) -> u8 {
        let max_sched = i64::from(self.max_sched_prio);
        let mut level = max_sched - rank as i64;
        let extra = max_sched + 1 - self.num_active as i64;
        if extra >= 0 {
            level -= extra;
        }
        level.max(0) as u8
    }

    /// Grants the message in `slot` up to its window if `max_incoming` allows
    /// (`homa_grant_try_send`). With `check_needy`, defers to needy messages.
    fn try_send(&mut self, cx: &mut GrantCx<'_>, slot: usize, check_needy: bool) {
        let Some(a) = self.active[slot] else { return };
        let window = self.windows[self.num_active];
        let Some(m) = cx.rpcs.get(a.rpc).and_then(|r| r.msgin.as_ref()) else { return };
        if !m.grantable {
            return;
        }
        // Up to `window` past the received bytes, never past the end. Nothing to grant if
        // that is not beyond the grant already sent: a GRANT repeating its offset is wasted.
        let target = (m.received().saturating_add(window)).min(m.length);
        if target <= m.granted {
            return;
        }
        let headroom = self.cap as i64 - self.total_incoming as i64;
        if headroom <= 0 || (check_needy && self.needy != 0) {
            self.set_needy(slot);
            return;
        }
        // Only bytes beyond those received take headroom. (A sender that sent past its
        // grant would otherwise be granted the headroom again and again, a byte at a time:
        // bytes below `received` never count as incoming.)
        let base = m.granted.max(m.received());
        let wanted = target - base;
        let fully = u64::from(wanted) <= headroom as u64;
        let delta = (base - m.granted) + if fully { wanted } else { headroom as u32 };
        let rank = self
            .active
            .iter()
            .flatten()
            .filter(|o| o.rpc != a.rpc && outranks(o.rank(), a.rank()))
            .count();
        let priority = self.grant_priority(rank);
        let Some(r) = cx.rpcs.get_mut(a.rpc) else { return };
        let Some(m) = r.msgin.as_mut() else { return };
        m.granted += delta;
        m.sched_priority = priority;
        self.recount(cx.metrics, m, true);
        let offset = m.granted;
        let control = Control::about(r, ControlBody::Grant { offset, priority });
        cx.metrics.granted_bytes += u64::from(delta);
        push_control(cx, control);
        self.granted.push(a.rpc);
        self.check_fifo(cx);
        if !fully {
            self.set_needy(slot);
        }
    }

    fn set_needy(&mut self, slot: usize) {
        if self.active[slot].is_some() {
            self.needy |= 1 << slot;
        }
    }

    /// Spends free `max_incoming` headroom on needy messages, best first
    /// (`homa_grant_check_needy`).
    fn check_needy(&mut self, cx: &mut GrantCx<'_>) {
        while self.needy != 0 && self.total_incoming < self.cap {
            // The best needy message; of equal ranks, the lowest slot.
            let mut best: Option<(usize, (u32, u64))> = None;
            for slot in (0..self.slots).filter(|s| self.needy & (1 << s) != 0) {
                let Some(a) = self.active[slot] else { continue };
                if best.is_none_or(|(_, rank)| outranks(a.rank(), rank)) {
                    best = Some((slot, a.rank()));
                }
            }
            let Some((slot, _)) = best else { return };
            self.needy &= !(1 << slot);
            self.try_send(cx, slot, false);
        }
    }

    /// Every FIFO interval, grants `fifo_grant_increment` more bytes to the oldest message
    /// still missing grants (`homa_grant_check_fifo`). Runs whenever a grant goes out.
    fn check_fifo(&mut self, cx: &mut GrantCx<'_>) {
        if cx.now < self.next_fifo_grant {
            return;
        }
        let Some(interval) = cx.config.fifo_grant_interval() else { return };
        self.next_fifo_grant = cx.now.saturating_add(interval);
        let increment = cx.config.fifo_grant_increment;
        // A message holding this much ungranted-received is not answering FIFO grants.
        let limit = self.windows[self.num_active].saturating_add(increment.saturating_mul(2));
        let wants_fifo = |cx: &GrantCx<'_>, rpc: RpcRef| {
            cx.rpcs
                .get(rpc)
                .and_then(|r| r.msgin.as_ref())
                .is_some_and(|m| m.grantable && m.rec_incoming < limit && m.granted < m.length)
        };
        if self.oldest.is_some_and(|o| !wants_fifo(cx, o)) {
            self.oldest = None;
        }
        if self.oldest.is_none() {
            self.oldest = self
                .waiting
                .iter()
                .chain(self.active.iter().flatten())
                .filter(|e| wants_fifo(cx, e.rpc))
                .min_by_key(|e| e.birth)
                .map(|e| e.rpc);
        }
        let Some(rpc) = self.oldest else { return };
        let priority = high_priority(cx.config.num_priorities);
        let Some(r) = cx.rpcs.get_mut(rpc) else { return };
        let Some(m) = r.msgin.as_mut() else { return };
        m.granted = m.granted.saturating_add(increment).min(m.length);
        m.sched_priority = priority;
        let offset = m.granted;
        let control = Control::about(r, ControlBody::Grant { offset, priority });
        cx.metrics.fifo_grants += 1;
        self.update_incoming(cx, rpc);
        push_control(cx, control);
        self.granted.push(rpc);
    }
}

/// The next-to-highest level, for boosts that must not compete with control packets
/// (`homa_high_priority`).
pub(crate) fn high_priority(num_priorities: u8) -> u8 {
    num_priorities.saturating_sub(2)
}

fn push_control(cx: &mut GrantCx<'_>, control: Control) {
    if !cx.tx.push_control(control, cx.config.max_pending_control) {
        cx.metrics.control_overflow += 1;
    }
}
