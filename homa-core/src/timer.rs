//! Wake-ups for RPCs at future timer ticks.
//!
//! Entries are never removed when plans change: each RPC remembers the tick it is armed for,
//! and an entry that no longer matches (or whose RPC ended) is skipped when it comes due.
//! Most RPCs finish long before their first timer would fire, so new entries go to a plain
//! list first and only those still armed when the list is next examined move to the heap:
//! short RPCs never pay for heap operations. The next deadline is always known in O(1).

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Reverse;

use crate::rpc::RpcRef;

#[derive(Debug, Default)]
pub(crate) struct TimerQueue {
    /// Entries not yet sorted, and the earliest tick among them.
    recent: Vec<(u64, RpcRef)>,
    recent_min: Option<u64>,
    heap: BinaryHeap<Reverse<(u64, RpcRef)>>,
}

impl TimerQueue {
    pub(crate) fn push(&mut self, tick: u64, rpc: RpcRef) {
        self.recent.push((tick, rpc));
        self.recent_min = Some(self.recent_min.map_or(tick, |m| m.min(tick)));
    }

    /// The earliest tick with an entry (possibly a stale one).
    pub(crate) fn next_tick(&self) -> Option<u64> {
        let heap = self.heap.peek().map(|Reverse((tick, _))| *tick);
        match (heap, self.recent_min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Once `tick` reaches the recent entries, sorts those that `live` keeps into the heap.
    pub(crate) fn sort_recent(&mut self, tick: u64, mut live: impl FnMut(u64, RpcRef) -> bool) {
        if self.recent_min.is_none_or(|m| m > tick) {
            return;
        }
        for (t, r) in self.recent.drain(..) {
            if live(t, r) {
                self.heap.push(Reverse((t, r)));
            }
        }
        self.recent_min = None;
    }

    /// Drops the entries due at or before `tick` that `live` rejects (sorting the recent ones
    /// if any of them is due by then), so `next_tick` is exact up to `tick`.
    pub(crate) fn drop_stale(&mut self, tick: u64, mut live: impl FnMut(u64, RpcRef) -> bool) {
        self.sort_recent(tick, &mut live);
        while let Some(&Reverse((due, r))) = self.heap.peek() {
            if due > tick || live(due, r) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Removes and returns a sorted entry due at or before `tick`.
    pub(crate) fn pop_due(&mut self, tick: u64) -> Option<(u64, RpcRef)> {
        let Reverse((due, _)) = self.heap.peek()?;
        if *due > tick {
            return None;
        }
        self.heap.pop().map(|Reverse(entry)| entry)
    }
}
