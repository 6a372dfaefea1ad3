//! What the sender puts on the wire next.
//!
//! Order of service: control packets first (they are small and steer everyone else), then
//! retransmissions (never held back), then new data of the message with the fewest bytes
//! left (SRPT), except that every `1000 / pacer_fifo_fraction`-th pick goes to the oldest
//! message so long ones are not starved. New data waits while the pacer's estimate of the
//! NIC queue (every packet sent, control packets too) exceeds `max_nic_est_backlog_usecs`
//! (or two batches of `pacer_batch_packets`), unless its message has at most
//! `defer_min_bytes` left; once it waits, it is due again when a batch has drained.

use alloc::collections::{BinaryHeap, VecDeque};
use core::cmp::Reverse;
use core::net::SocketAddr;

use crate::rpc::{Rpc, RpcRef};
use crate::time::Duration;
use crate::time::Nanos;
use crate::wire::{Ack, MAX_ACKS, MAX_PRIORITIES};

/// How far back in the control queue a new GRANT looks for one to merge with. GRANTs go to
/// at most `max_overcommit` (<= 8) active messages and one FIFO message, so a batch's GRANTs
/// sit close together; one found no further back goes as its own packet (correct, one
/// packet more).
const GRANT_MERGE_DEPTH: usize = 16;

/// A control packet waiting to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Control {
    pub(crate) to: SocketAddr,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    /// `sender_id`: the RPC id as this endpoint knows it.
    pub(crate) id: u64,
    pub(crate) body: ControlBody,
}

impl Control {
    /// A control packet about RPC `x`, to its peer.
    pub(crate) fn about(x: &Rpc, body: ControlBody) -> Control {
        Control { to: x.addr, sport: x.local_port, dport: x.remote_port, id: x.id, body }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ControlBody {
    Grant { offset: u32, priority: u8 },
    Resend { offset: u32, length: u32, priority: u8 },
    RpcUnknown,
    Busy,
    Cutoffs { cutoffs: [u32; MAX_PRIORITIES as usize], version: u16 },
    NeedAck,
    Ack { acks: [Ack; MAX_ACKS], count: u8 },
}

/// Estimates when the NIC's queue drains (`homa_pacer_check_nic_q`), and releases deferrable
/// data a batch at a time.
#[derive(Debug)]
pub(crate) struct Pacer {
    /// When the link will have sent everything handed to it so far.
    link_idle: Nanos,
    /// Most queue a deferrable packet may join.
    max_backlog: Duration,
    /// The queue left when a throttled sender is due again: `max_backlog` less one batch.
    low_water: Duration,
    /// A deferrable packet was held back: none goes until the queue is down to `low_water`.
    throttled: bool,
}

impl Pacer {
    /// A pacer that lets the queue reach `max_backlog`, or two batches of `batch` if more.
    pub(crate) fn new(max_backlog: Duration, batch: Duration) -> Pacer {
        let max_backlog = max_backlog.max(batch.saturating_mul(2));
        Pacer { link_idle: 0, max_backlog, low_water: max_backlog - batch, throttled: false }
    }

    fn allowance(&self) -> Duration {
        if self.throttled { self.low_water } else { self.max_backlog }
    }

    /// Whether the queue is short enough for a deferrable packet now.
    pub(crate) fn may_send(&self, now: Nanos) -> bool {
        self.link_idle <= now.saturating_add(self.allowance())
    }

    /// [`Pacer::may_send`], remembering a refusal until the queue is down to `low_water`,
    /// so a throttled sender sends a batch per wake-up.
    pub(crate) fn admit(&mut self, now: Nanos) -> bool {
        self.throttled = !self.may_send(now);
        !self.throttled
    }

    /// When deferrable packets may go again.
    pub(crate) fn next_slot(&self) -> Nanos {
        self.link_idle.saturating_sub(self.allowance())
    }

    /// Accounts for a packet taking `wire_time` on the link.
    pub(crate) fn record(&mut self, now: Nanos, wire_time: Duration) {
        self.link_idle = self.link_idle.max(now).saturating_add(wire_time);
    }
}

/// Key of a message in the SRPT queue: fewest bytes left first, then oldest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TxKey {
    pub(crate) bytes_left: u32,
    pub(crate) birth: u64,
    pub(crate) rpc: RpcRef,
}

#[derive(Debug)]
pub(crate) struct TxQueues {
    pub(crate) control: VecDeque<Control>,
    /// RPCs with retransmissions waiting, in arrival order of the requests.
    pub(crate) resends: VecDeque<RpcRef>,
    /// Messages with new data to send. Entries are refreshed lazily: an entry whose key no
    /// longer matches its message (or whose RPC ended) is skipped.
    srpt: BinaryHeap<Reverse<TxKey>>,
    pub(crate) pacer: Pacer,
    /// Counts down to the next FIFO pick (thousandths, as the module's `fifo_count`).
    fifo_count: i32,
    fifo_fraction: i32,
}

impl TxQueues {
    pub(crate) fn new(pacer: Pacer, pacer_fifo_fraction: u32) -> TxQueues {
        TxQueues {
            control: VecDeque::new(),
            resends: VecDeque::new(),
            srpt: BinaryHeap::new(),
            pacer,
            fifo_count: 1000,
            fifo_fraction: pacer_fifo_fraction as i32,
        }
    }

    /// Queues a control packet unless `limit` are already waiting; false if dropped. A
    /// GRANT whose RPC's latest queued GRANT (among the last `GRANT_MERGE_DEPTH` controls)
    /// has the same level raises that one's offset instead: grants are cumulative, so the
    /// peer ends up where both would have left it, with one packet (a caller that handles
    /// a batch of DATA before draining sends one GRANT per message, not one per packet). A
    /// GRANT at another level (a FIFO grant, a new rank) goes as its own packet: with one
    /// input between drains, every GRANT goes out as the module sends it.
    pub(crate) fn push_control(&mut self, control: Control, limit: u32) -> bool {
        if let ControlBody::Grant { offset, priority } = control.body
            && !self.control.is_empty()
        {
            let ours = |c: &&mut Control| {
                matches!(c.body, ControlBody::Grant { .. })
                    && (c.id, c.to, c.dport) == (control.id, control.to, control.dport)
            };
            let latest = self.control.iter_mut().rev().take(GRANT_MERGE_DEPTH).find(ours);
            if let Some(queued) = latest
                && matches!(queued.body, ControlBody::Grant { priority: p, .. } if p == priority)
            {
                queued.body = ControlBody::Grant { offset, priority };
                return true;
            }
        }
        if self.control.len() >= limit as usize {
            return false;
        }
        self.control.push_back(control);
        true
    }

    pub(crate) fn push(&mut self, key: TxKey) {
        self.srpt.push(Reverse(key));
    }

    /// Gives the head a key that ranks at least as high (the same message with fewer
    /// bytes left): it stays the head, without a pop and a push.
    pub(crate) fn replace_top(&mut self, key: TxKey) {
        if let Some(mut top) = self.srpt.peek_mut() {
            debug_assert!(key.rpc == top.0.rpc && key <= top.0, "the head's own, ranking higher");
            *top = Reverse(key);
        }
    }

    pub(crate) fn peek(&self) -> Option<TxKey> {
        self.srpt.peek().map(|Reverse(k)| *k)
    }

    pub(crate) fn pop(&mut self) -> Option<TxKey> {
        self.srpt.pop().map(|Reverse(k)| k)
    }

    /// Whether this pick should go to the oldest message instead of the shortest.
    pub(crate) fn fifo_turn(&mut self) -> bool {
        if self.fifo_fraction == 0 {
            return false;
        }
        self.fifo_count -= self.fifo_fraction;
        if self.fifo_count <= 0 {
            self.fifo_count += 1000;
            return true;
        }
        false
    }

    /// Whether the next pick is the FIFO pick (without counting a pick).
    pub(crate) fn fifo_turn_due(&self) -> bool {
        self.fifo_fraction != 0 && self.fifo_count - self.fifo_fraction <= 0
    }

    /// The queued messages, in no particular order (for the FIFO pick).
    pub(crate) fn queued(&self) -> impl Iterator<Item = TxKey> + '_ {
        self.srpt.iter().map(|Reverse(k)| *k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn pacer_allows_a_bounded_backlog() {
        let mut p = Pacer::new(5_000, 0);
        assert!(p.may_send(0));
        for _ in 0..10 {
            p.record(0, 1_000);
        }
        assert!(!p.may_send(0));
        assert_eq!(p.next_slot(), 5_000);
        assert!(p.may_send(5_000));
        // An idle link does not bank credit.
        p.record(100_000, 1_000);
        assert_eq!(p.next_slot(), 96_000);
    }

    #[test]
    fn a_batching_pacer_wakes_once_a_batch_has_drained() {
        // Batches of 4 µs: the queue may reach 8 µs, more than the 5 µs asked for.
        let mut p = Pacer::new(5_000, 4_000);
        for _ in 0..8 {
            assert!(p.may_send(0));
            p.record(0, 1_000);
        }
        p.record(0, 1_000);
        assert!(!p.admit(0));
        // Due again when 4 µs of the 9 queued are left, so the next wake-up sends a batch.
        assert_eq!(p.next_slot(), 5_000);
        assert!(!p.may_send(4_999), "not before the batch has drained");
        let mut sent = 0;
        while p.admit(5_000) {
            p.record(5_000, 1_000);
            sent += 1;
        }
        assert_eq!(sent, 5);
    }

    #[test]
    fn a_grant_merges_into_its_rpcs_latest_queued_grant_at_the_same_level() {
        let a: SocketAddr = "198.18.0.2:4000".parse().unwrap();
        let grant = |id, offset, priority| Control {
            to: a,
            sport: 99,
            dport: 4000,
            id,
            body: ControlBody::Grant { offset, priority },
        };
        let mut q = TxQueues::new(Pacer::new(0, 0), 50);
        let pushes = [
            grant(1, 10, 3),
            grant(3, 10, 3), // another RPC
            grant(1, 20, 3), // merges into the first
            Control { body: ControlBody::Busy, ..grant(1, 0, 0) },
            grant(1, 30, 6), // another level: its own packet
            grant(1, 40, 3), // the latest is at level 6: no merge past it
            grant(1, 50, 3), // merges into the one before
        ];
        for c in pushes {
            assert!(q.push_control(c, 100));
        }
        let sent: Vec<ControlBody> = q.control.iter().map(|c| c.body).collect();
        let g = |offset, priority| ControlBody::Grant { offset, priority };
        assert_eq!(sent, [g(20, 3), g(10, 3), ControlBody::Busy, g(30, 6), g(50, 3)]);
        assert_eq!(q.control.iter().map(|c| c.id).collect::<Vec<_>>(), [1, 3, 1, 1, 1]);
    }

    #[test]
    fn fifo_turn_every_twentieth_pick() {
        let mut q = TxQueues::new(Pacer::new(0, 0), 50);
        let turns: usize = (0..100).filter(|_| q.fifo_turn()).count();
        assert_eq!(turns, 5);
        let mut never = TxQueues::new(Pacer::new(0, 0), 0);
        assert!((0..100).all(|_| !never.fifo_turn()));
    }
}
