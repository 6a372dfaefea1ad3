//! An outgoing message: its bytes, how far it has been sent and granted, and retransmissions
//! waiting to go.
//!
//! Packet boundaries follow the module (`homa_message_out_fill`): full packets of
//! `max_payload` bytes, except that the last unscheduled packet may be short so no
//! unscheduled packet spills past `unscheduled`. They are computed, not stored.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::{fmt, mem};

/// The bytes of a message to send. Built from a `Vec<u8>` (moved, not copied) or from any
/// shared buffer, so bindings can send their language's buffers without copying them.
pub struct Payload(PayloadBytes);

type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

enum PayloadBytes {
    Owned(Vec<u8>),
    Shared(SharedBytes),
}

impl Payload {
    /// Wraps a shared buffer (e.g. one a Python or JS object keeps alive).
    pub fn shared(bytes: SharedBytes) -> Payload {
        Payload(PayloadBytes::Shared(bytes))
    }

    /// The message bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            PayloadBytes::Owned(v) => v,
            PayloadBytes::Shared(s) => (**s).as_ref(),
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// The bytes as a shared buffer (an owned vector moves into one, without a copy, for
    /// good: later reads go through the shared buffer's `AsRef`).
    fn share(&mut self) -> SharedBytes {
        let shared: SharedBytes = match &mut self.0 {
            PayloadBytes::Shared(s) => return Arc::clone(s),
            PayloadBytes::Owned(v) => Arc::new(mem::take(v)),
        };
        self.0 = PayloadBytes::Shared(Arc::clone(&shared));
        shared
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload(PayloadBytes::Owned(v))
    }
}

impl From<&[u8]> for Payload {
    fn from(v: &[u8]) -> Payload {
        Payload(PayloadBytes::Owned(v.to_vec()))
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

/// Bytes of a message that a DATA packet carries, left out of the buffer by
/// [`Endpoint::poll_transmit_gather`](crate::Endpoint::poll_transmit_gather): the packet
/// is the buffer's bytes followed by these. Keeps the message's bytes alive.
#[derive(Clone)]
pub struct PayloadSlice {
    bytes: SharedBytes,
    start: usize,
    end: usize,
}

impl PayloadSlice {
    /// Bytes [start, end) of `payload`.
    pub(crate) fn new(payload: &mut Payload, start: u32, end: u32) -> PayloadSlice {
        debug_assert!(start < end && end as usize <= payload.len(), "{start}..{end}");
        PayloadSlice { bytes: payload.share(), start: start as usize, end: end as usize }
    }

    pub fn as_slice(&self) -> &[u8] {
        &(*self.bytes).as_ref()[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

impl fmt::Debug for PayloadSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayloadSlice({}..{})", self.start, self.end)
    }
}

/// A byte range to send again, and the level to send it at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resend {
    pub(crate) start: u32,
    pub(crate) end: u32,
    pub(crate) priority: u8,
}

/// Retransmissions waiting for `poll_transmit`; a few ranges, merged when more arrive.
const MAX_RESEND_RANGES: usize = 4;

#[derive(Debug)]
pub(crate) struct OutMessage {
    pub(crate) payload: Payload,
    pub(crate) length: u32,
    /// Bytes sent without grants: min(unsched_bytes, length).
    pub(crate) unscheduled: u32,
    /// Bytes the receiver allows us to send: [0, granted).
    pub(crate) granted: u32,
    /// First byte never sent (`next_xmit_offset`).
    pub(crate) next_offset: u32,
    /// Level for scheduled bytes, from the latest GRANT.
    pub(crate) sched_priority: u8,
    /// Creation order, for SRPT ties and the pacer's FIFO picks.
    pub(crate) birth: u64,
    resends: [Resend; MAX_RESEND_RANGES],
    num_resends: usize,
}

impl OutMessage {
    pub(crate) fn new(payload: Payload, unsched_bytes: u32, birth: u64) -> OutMessage {
        let length = payload.len() as u32;
        let unscheduled = unsched_bytes.min(length);
        OutMessage {
            payload,
            length,
            unscheduled,
            granted: unscheduled,
            next_offset: 0,
            sched_priority: 0,
            birth,
            resends: [Resend { start: 0, end: 0, priority: 0 }; MAX_RESEND_RANGES],
            num_resends: 0,
        }
    }

    /// End of the packet that starts at `offset`.
    pub(crate) fn packet_end(&self, offset: u32, max_payload: u32) -> u32 {
        let limit = if offset < self.unscheduled { self.unscheduled } else { self.length };
        offset.saturating_add(max_payload).min(limit)
    }

    /// Start of the packet that holds byte `offset`.
    pub(crate) fn packet_start(&self, offset: u32, max_payload: u32) -> u32 {
        if offset < self.unscheduled {
            offset - offset % max_payload
        } else {
            let past = offset - self.unscheduled;
            self.unscheduled + past - past % max_payload
        }
    }

    /// Bytes not yet sent once (the SRPT key of the sender).
    pub(crate) fn bytes_left(&self) -> u32 {
        self.length - self.next_offset
    }

    /// Whether new (not retransmitted) data may go now.
    pub(crate) fn can_send_new(&self) -> bool {
        self.next_offset < self.granted && self.next_offset < self.length
    }

    /// Raises the grant (GRANTs are cumulative; smaller offsets are ignored).
    pub(crate) fn grant(&mut self, offset: u32) {
        self.granted = self.granted.max(offset.min(self.length));
    }

    /// Queues `[start, end)` (clipped to what was sent) for retransmission, whole packets.
    /// Returns false if nothing in the range has been sent.
    pub(crate) fn queue_resend(&mut self, start: u32, end: u32, priority: u8) -> bool {
        let end = end.min(self.next_offset);
        if start >= end {
            return false;
        }
        let range = Resend { start, end, priority };
        if self.num_resends < MAX_RESEND_RANGES {
            self.resends[self.num_resends] = range;
            self.num_resends += 1;
        } else {
            let last = &mut self.resends[MAX_RESEND_RANGES - 1];
            *last = Resend { start: last.start.min(start), end: last.end.max(end), priority };
        }
        true
    }

    /// Takes the next packet to retransmit: its bytes [start, end), and the range it
    /// belongs to (whose end goes in `incoming`, as the module does).
    pub(crate) fn next_resend(&mut self, max_payload: u32) -> Option<(u32, u32, Resend)> {
        if self.num_resends == 0 {
            return None;
        }
        let range = self.resends[0];
        let start = self.packet_start(range.start, max_payload);
        let end = self.packet_end(start, max_payload);
        if end >= range.end {
            self.resends.copy_within(1..self.num_resends, 0);
            self.num_resends -= 1;
        } else {
            self.resends[0].start = end;
        }
        Some((start, end, range))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn packets_split_at_the_unscheduled_boundary() {
        let m = OutMessage::new(vec![0; 100_000].into(), 40_000, 0);
        let mut ends = Vec::new();
        let mut off = 0;
        while off < m.length {
            let end = m.packet_end(off, 1424);
            assert_eq!(m.packet_start(end - 1, 1424), off);
            ends.push(end);
            off = end;
        }
        assert!(ends.contains(&40_000), "an unscheduled packet ends exactly at 40000");
        assert_eq!(ends[0], 1424);
        assert_eq!(ends[28], 40_000); // 28 full packets = 39872, then a 128-byte one
        assert_eq!(ends[29], 41_424);
        assert_eq!(*ends.last().unwrap(), 100_000);
    }

    #[test]
    fn resends_are_whole_packets_clipped_to_what_was_sent() {
        let mut m = OutMessage::new(vec![0; 10_000].into(), 40_000, 0);
        m.next_offset = 4272; // three packets sent
        assert!(!m.queue_resend(5000, 6000, 7), "nothing there was sent");
        assert!(m.queue_resend(1500, u32::MAX, 7));
        let range = Resend { start: 1500, end: 4272, priority: 7 };
        assert_eq!(m.next_resend(1424), Some((1424, 2848, range)));
        let rest = Resend { start: 2848, ..range };
        assert_eq!(m.next_resend(1424), Some((2848, 4272, rest)));
        assert_eq!(m.next_resend(1424), None);
    }

    #[test]
    fn grants_only_grow_and_stop_at_the_end() {
        let mut m = OutMessage::new(vec![0; 100_000].into(), 40_000, 0);
        m.grant(30_000);
        assert_eq!(m.granted, 40_000);
        m.grant(1_000_000);
        assert_eq!(m.granted, 100_000);
    }
}
