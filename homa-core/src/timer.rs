//! Wake-ups for RPCs at future timer ticks, kept in one min-heap so the next deadline is
//! read in O(1). Entries are not removed when plans change: each RPC remembers the tick it
//! is armed for, and an entry that no longer matches (or whose RPC ended) is skipped.

use alloc::collections::BinaryHeap;
use core::cmp::Reverse;

use crate::rpc::RpcRef;

#[derive(Debug, Default)]
pub(crate) struct TimerQueue {
    heap: BinaryHeap<Reverse<(u64, RpcRef)>>,
}

impl TimerQueue {
    pub(crate) fn push(&mut self, tick: u64, rpc: RpcRef) {
        self.heap.push(Reverse((tick, rpc)));
    }

    /// The earliest tick with an entry (possibly a stale one).
    pub(crate) fn next_tick(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((tick, _))| *tick)
    }

    /// Removes and returns an entry due at or before `tick`.
    pub(crate) fn pop_due(&mut self, tick: u64) -> Option<(u64, RpcRef)> {
        if self.next_tick()? > tick {
            return None;
        }
        self.heap.pop().map(|Reverse(entry)| entry)
    }
}
