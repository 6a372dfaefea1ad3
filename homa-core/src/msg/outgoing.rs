//! An outgoing message: its bytes, how far it has been sent and granted, and retransmissions
//! waiting to go.
//!
//! Packet boundaries follow the module (`homa_message_out_fill`): full packets of
//! `max_payload` bytes, except that the last unscheduled packet may be short so no
//! unscheduled packet spills past `unscheduled`. They are computed, not stored.

use alloc::boxed::Box;
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

    /// Bytes in the message.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether the message has no bytes.
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

    /// The bytes this slice covers.
    pub fn as_slice(&self) -> &[u8] {
        &(*self.bytes).as_ref()[self.start..self.end]
    }

    /// Bytes in the slice.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the slice covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

impl fmt::Debug for PayloadSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayloadSlice({}..{})", self.start, self.end)
    }
}

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
    /// The tick that last sent new bytes (not resent ones).
    pub(crate) sent_tick: u64,
    /// Level for scheduled bytes, from the latest GRANT.
    pub(crate) sched_priority: u8,
    /// Creation order, for SRPT ties and the pacer's FIFO picks.
    pub(crate) birth: u64,
    /// Packets asked for again and not yet resent, from the first RESEND on: most messages
    /// never see one, and kept out of line they leave the RPC's slot a cache line shorter.
    resend: Option<Box<Resends>>,
    /// Bits set in `resend`.
    resend_pending: u32,
}

#[derive(Debug)]
struct Resends {
    /// Bit i is packet i (`packet_index`). Exact, so a packet asked for by several RESENDs
    /// before it goes is sent once, and only what was asked for goes.
    bits: Vec<u64>,
    /// No bit is set in `bits` below this word.
    word: usize,
    /// End of the furthest range asked for since `bits` was last empty: the `incoming` of
    /// the retransmitted packets (the module's range end).
    end: u32,
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
            sent_tick: 0,
            sched_priority: 0,
            birth,
            resend: None,
            resend_pending: 0,
        }
    }

    /// End of the packet that starts at `offset`.
    pub(crate) fn packet_end(&self, offset: u32, max_payload: u32) -> u32 {
        let limit = if offset < self.unscheduled { self.unscheduled } else { self.length };
        offset.saturating_add(max_payload).min(limit)
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

    /// Index of the packet that holds byte `offset`: the unscheduled packets first, then
    /// the scheduled ones (see `packet_end`).
    fn packet_index(&self, offset: u32, max_payload: u32) -> usize {
        let unsched_packets = self.unscheduled.div_ceil(max_payload);
        let index = if offset < self.unscheduled {
            offset / max_payload
        } else {
            unsched_packets + (offset - self.unscheduled) / max_payload
        };
        index as usize
    }

    /// Start of packet `index` (the inverse of `packet_index`).
    fn packet_offset(&self, index: usize, max_payload: u32) -> u32 {
        let unsched_packets = self.unscheduled.div_ceil(max_payload) as usize;
        if index < unsched_packets {
            index as u32 * max_payload
        } else {
            self.unscheduled + (index - unsched_packets) as u32 * max_payload
        }
    }

    /// Queues the packets that hold bytes `[start, end)` (clipped to what was sent) for
    /// retransmission; one already queued stays queued once. Returns false if nothing in
    /// the range has been sent.
    pub(crate) fn queue_resend(&mut self, start: u32, end: u32, max_payload: u32) -> bool {
        let end = end.min(self.next_offset);
        if start >= end {
            return false;
        }
        let (first, last) =
            (self.packet_index(start, max_payload), self.packet_index(end - 1, max_payload));
        let packets = self.packet_index(self.length - 1, max_payload) + 1;
        let r = self.resend.get_or_insert_with(|| {
            Box::new(Resends { bits: alloc::vec![0; packets.div_ceil(64)], word: 0, end: 0 })
        });
        for i in first..=last {
            let (word, bit) = (&mut r.bits[i / 64], 1u64 << (i % 64));
            if *word & bit == 0 {
                *word |= bit;
                self.resend_pending += 1;
            }
        }
        r.word = r.word.min(first / 64);
        r.end = r.end.max(end);
        true
    }

    /// Takes the lowest packet queued for retransmission: its bytes [start, end) and the
    /// `incoming` to send with it.
    pub(crate) fn next_resend(&mut self, max_payload: u32) -> Option<(u32, u32, u32)> {
        if self.resend_pending == 0 {
            return None;
        }
        let r = self.resend.as_mut()?;
        let w = (r.word..r.bits.len()).find(|&w| r.bits[w] != 0)?;
        r.word = w;
        let bit = r.bits[w].trailing_zeros() as usize;
        r.bits[w] &= !(1 << bit);
        self.resend_pending -= 1;
        let incoming = r.end;
        if self.resend_pending == 0 {
            r.end = 0;
        }
        let start = self.packet_offset(w * 64 + bit, max_payload);
        Some((start, self.packet_end(start, max_payload), incoming))
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
            let index = m.packet_index(end - 1, 1424);
            assert_eq!((index, m.packet_offset(index, 1424)), (ends.len(), off));
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
        assert!(!m.queue_resend(5000, 6000, 1424), "nothing there was sent");
        assert!(m.queue_resend(1500, u32::MAX, 1424));
        assert_eq!(m.next_resend(1424), Some((1424, 2848, 4272)));
        assert_eq!(m.next_resend(1424), Some((2848, 4272, 4272)));
        assert_eq!(m.next_resend(1424), None);
    }

    #[test]
    fn a_packet_asked_for_twice_goes_once_and_only_asked_packets_go() {
        // 40,000 unscheduled bytes: 28 full packets and one of 128, then full ones.
        let mut m = OutMessage::new(vec![0; 200_000].into(), 40_000, 0);
        m.next_offset = 200_000;
        // Many separate holes, as a batch of RESENDs brings them, some twice.
        let holes = [(1424, 2848), (39_872, 40_000), (41_424, 42_848), (150_000, 150_001)];
        for &(a, b) in holes.iter().chain(&holes) {
            assert!(m.queue_resend(a, b, 1424));
        }
        let mut sent = vec![];
        while let Some((start, end, incoming)) = m.next_resend(1424) {
            assert_eq!(incoming, 150_001, "the furthest range's end");
            sent.push((start, end));
        }
        let last = 40_000 + 77 * 1424; // the scheduled packet holding byte 150,000
        assert_eq!(
            sent,
            [(1424, 2848), (39_872, 40_000), (41_424, 42_848), (last, last + 1424)],
            "each asked-for packet once, in order, nothing else"
        );
        // A later request starts afresh, below where the last one left off.
        assert!(m.queue_resend(0, 10, 1424));
        assert_eq!(m.next_resend(1424), Some((0, 1424, 10)));
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
