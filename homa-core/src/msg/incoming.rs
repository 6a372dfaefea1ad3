//! An incoming message: reassembly with gap tracking (`homa_add_packet`) and the receiver's
//! grant state.
//!
//! Packets are accepted in any order. A packet must either extend the received prefix, start
//! past it (opening a gap), or fall entirely inside one gap; anything else (a duplicate, or a
//! packet overlapping bytes already held) is dropped, as the module does.

use alloc::vec::Vec;

/// Why a DATA packet was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// Every byte was already received, or the packet overlaps received bytes.
    Duplicate,
    /// The range lies (partly) past the message's end.
    PastEnd,
    /// Accepting it would need more than `max_gaps` holes.
    TooManyGaps,
}

/// A hole in the received bytes, [start, end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gap {
    pub(crate) start: u32,
    pub(crate) end: u32,
}

#[derive(Debug)]
pub(crate) struct InMessage {
    pub(crate) length: u32,
    /// The message bytes up to `recv_end` (gaps hold zeros until their packets arrive).
    /// Its capacity is reserved when the message is accepted, but nothing is zeroed in
    /// advance: in-order packets are appended.
    pub(crate) buf: Vec<u8>,
    pub(crate) bytes_remaining: u32,
    /// End of the highest byte range received so far.
    pub(crate) recv_end: u32,
    /// Holes below `recv_end`, in order.
    pub(crate) gaps: Vec<Gap>,

    // Grant state (see `sched::grant`).
    /// Bytes the sender may send: [0, granted).
    pub(crate) granted: u32,
    /// Granted-but-unreceived bytes, as last counted.
    pub(crate) rec_incoming: u32,
    /// `rec_incoming` is part of the endpoint's total: the message is being granted to, and
    /// its sender is not `silent`.
    pub(crate) counted: bool,
    /// Its sender went silent: we asked it to resend, and no new bytes arrived since. The
    /// bytes it owes are presumed lost, not on their way.
    pub(crate) silent: bool,
    /// Arrival order, for SRPT ties and FIFO grants (lower = older).
    pub(crate) birth: u64,
    /// Needs grants beyond its unscheduled bytes.
    pub(crate) grantable: bool,
    /// End of the unscheduled bytes (sent before any grant), and their level.
    pub(crate) unsched_end: u32,
    pub(crate) unsched_priority: u8,
    /// Level of the last grant: the level of the scheduled bytes, and of their resends.
    pub(crate) sched_priority: u8,
}

impl InMessage {
    /// A message of `length` bytes whose sender announced `incoming` unscheduled bytes,
    /// sent at `unsched_priority`.
    pub(crate) fn new(length: u32, incoming: u32, unsched_priority: u8, birth: u64) -> InMessage {
        let granted = incoming.min(length);
        InMessage {
            length,
            buf: Vec::with_capacity(length as usize),
            bytes_remaining: length,
            recv_end: 0,
            gaps: Vec::new(),
            granted,
            rec_incoming: 0,
            counted: false,
            silent: false,
            birth,
            grantable: granted < length,
            unsched_end: granted,
            unsched_priority,
            sched_priority: 0,
        }
    }

    pub(crate) fn received(&self) -> u32 {
        self.length - self.bytes_remaining
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.bytes_remaining == 0
    }

    /// The level the sender sends (and resends) the byte at `offset` at.
    pub(crate) fn level_at(&self, offset: u32) -> u8 {
        if offset >= self.unsched_end { self.sched_priority } else { self.unsched_priority }
    }

    /// Adds `payload` at `offset`.
    pub(crate) fn add(
        &mut self,
        offset: u32,
        payload: &[u8],
        max_gaps: usize,
    ) -> Result<(), Rejected> {
        self.accept(offset, payload.len() as u32, max_gaps)?;
        let (start, end) = (offset as usize, offset as usize + payload.len());
        if start >= self.buf.len() {
            self.buf.resize(start, 0);
            self.buf.extend_from_slice(payload);
        } else {
            if end > self.buf.len() {
                self.buf.resize(end, 0);
            }
            self.buf[start..end].copy_from_slice(payload);
        }
        Ok(())
    }

    /// The buffer, ready for the caller to append `len` bytes at `offset`, if they extend
    /// the received bytes in order (see `Endpoint::place`).
    pub(crate) fn place(&mut self, offset: u32, len: u32) -> Option<&mut Vec<u8>> {
        if offset != self.recv_end || len == 0 || len > self.length - offset {
            return None;
        }
        self.buf.reserve_exact(len as usize);
        Some(&mut self.buf)
    }

    /// Accounts for `len` bytes at `offset` that the caller appended after
    /// [`place`](Self::place). Anything else it left is discarded and the packet rejected.
    pub(crate) fn add_placed(
        &mut self,
        offset: u32,
        len: u32,
        max_gaps: usize,
    ) -> Result<(), Rejected> {
        if self.buf.len() != offset as usize + len as usize {
            self.buf.truncate(offset.min(self.recv_end) as usize);
            return Err(Rejected::Duplicate);
        }
        self.accept(offset, len, max_gaps)
    }

    /// The bookkeeping of [`add`](Self::add): received ranges, gaps and bytes remaining.
    fn accept(&mut self, offset: u32, len: u32, max_gaps: usize) -> Result<(), Rejected> {
        if offset >= self.length || len > self.length - offset {
            return Err(Rejected::PastEnd);
        }
        if len == 0 {
            return Err(Rejected::Duplicate);
        }
        let end = offset + len;
        if offset == self.recv_end {
            self.recv_end = end;
        } else if offset > self.recv_end {
            if self.gaps.len() >= max_gaps {
                return Err(Rejected::TooManyGaps);
            }
            self.gaps.push(Gap { start: self.recv_end, end: offset });
            self.recv_end = end;
        } else {
            self.fill_gap(offset, end, max_gaps)?;
        }
        self.bytes_remaining -= len;
        self.silent = false;
        Ok(())
    }

    /// Accounts for [start, end) below `recv_end`: it must lie inside one gap.
    fn fill_gap(&mut self, start: u32, end: u32, max_gaps: usize) -> Result<(), Rejected> {
        // The first gap ending after `start` is the only one that can hold the packet.
        let i = self.gaps.partition_point(|g| g.end <= start);
        let Some(&gap) = self.gaps.get(i) else { return Err(Rejected::Duplicate) };
        if start < gap.start || end > gap.end {
            return Err(Rejected::Duplicate);
        }
        match (start == gap.start, end == gap.end) {
            (true, true) => {
                self.gaps.remove(i);
            }
            (true, false) => self.gaps[i].start = end,
            (false, true) => self.gaps[i].end = start,
            (false, false) => {
                if self.gaps.len() >= max_gaps {
                    return Err(Rejected::TooManyGaps);
                }
                self.gaps[i].start = end;
                self.gaps.insert(i, Gap { start: gap.start, end: start });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(len: u32) -> InMessage {
        InMessage::new(len, len, 7, 0)
    }

    #[test]
    fn in_order_and_out_of_order() {
        let mut m = msg(10);
        m.add(0, &[1, 2], 8).unwrap();
        m.add(6, &[7, 8], 8).unwrap();
        assert_eq!(m.gaps, [Gap { start: 2, end: 6 }]);
        m.add(3, &[4], 8).unwrap(); // splits the gap
        assert_eq!(m.gaps, [Gap { start: 2, end: 3 }, Gap { start: 4, end: 6 }]);
        m.add(2, &[3], 8).unwrap();
        m.add(4, &[5, 6], 8).unwrap();
        assert!(m.gaps.is_empty());
        m.add(8, &[9, 10], 8).unwrap();
        assert!(m.is_complete());
        assert_eq!(m.buf, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    }

    #[test]
    fn duplicates_overlaps_and_overruns_are_rejected() {
        let mut m = msg(10);
        m.add(0, &[0; 4], 8).unwrap();
        assert_eq!(m.add(0, &[0; 4], 8), Err(Rejected::Duplicate));
        assert_eq!(m.add(2, &[0; 4], 8), Err(Rejected::Duplicate));
        m.add(6, &[0; 2], 8).unwrap();
        assert_eq!(m.add(3, &[0; 2], 8), Err(Rejected::Duplicate), "overlaps received byte 3");
        assert_eq!(m.add(5, &[0; 2], 8), Err(Rejected::Duplicate), "overlaps received byte 6");
        assert_eq!(m.add(9, &[0; 2], 8), Err(Rejected::PastEnd));
        assert_eq!(m.add(10, &[0; 1], 8), Err(Rejected::PastEnd));
        assert_eq!(m.add(u32::MAX, &[0; 1], 8), Err(Rejected::PastEnd));
        assert_eq!(m.bytes_remaining, 4);
    }

    #[test]
    fn gap_limit() {
        let mut m = msg(100);
        m.add(10, &[0], 2).unwrap();
        m.add(20, &[0], 2).unwrap();
        assert_eq!(m.add(30, &[0], 2), Err(Rejected::TooManyGaps));
        assert_eq!(m.add(5, &[0], 2), Err(Rejected::TooManyGaps), "splitting needs a third gap");
        m.add(0, &[0; 10], 2).unwrap();
        assert_eq!(m.gaps.len(), 1);
    }

    #[test]
    fn grant_state_starts_from_incoming() {
        let m = InMessage::new(100_000, 40_000, 7, 3);
        assert!(m.grantable);
        assert_eq!(m.granted, 40_000);
        let m = InMessage::new(100, 40_000, 7, 3);
        assert!(!m.grantable);
        assert_eq!(m.granted, 100);
    }
}
