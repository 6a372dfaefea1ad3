//! DATA (0x10): a piece of a message (`struct homa_data_hdr`, 56 bytes, then payload).
//!
//! ```text
//!  28               32         36              44            46               48          49    52           56
//!  +----------------+----------+---------------+-------------+----------------+-----------+-----+------------+---------
//!  | message_length | incoming | ack.client_id |ack.srv_port | cutoff_version | retransmit| pad | seg.offset | payload
//!  +----------------+----------+---------------+-------------+----------------+-----------+-----+------------+---------
//! ```
//!
//! There is no payload length field: the payload is everything after the header. The
//! offset of the first payload byte lives in `seg.offset`, except that the module writes
//! 0xFFFFFFFF there when the common header's `sequence` holds it (fresh single-segment
//! packets, the common case). [`Packet::offset`] applies that rule; our own packets carry the
//! true offset in both places.

use super::field::{Field, set_u32, u32_at};
use super::{Ack, Error, MAX_MESSAGE_LENGTH, OFFSET_IN_SEQUENCE, PacketType};

/// Bytes before the payload.
pub const HEADER_LEN: usize = 56;

mod field {
    use super::Field;
    pub(super) const MESSAGE_LENGTH: usize = 28;
    pub(super) const INCOMING: usize = 32;
    pub(super) const ACK: usize = 36;
    pub(super) const CUTOFF_VERSION: usize = 46;
    pub(super) const RETRANSMIT: usize = 48;
    pub(super) const PAD: Field = 49..52;
    pub(super) const SEG_OFFSET: usize = 52;
    pub(super) const PAYLOAD: usize = 56;
}

super::packet_view!(Some(PacketType::Data), HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Bytes in the whole message.
    pub fn message_length(&self) -> u32 {
        u32_at(self.bytes(), field::MESSAGE_LENGTH)
    }
    /// Bytes [0, incoming) the sender will send without waiting for grants (fresh packets),
    /// or the end of the retransmitted range (retransmissions).
    pub fn incoming(&self) -> u32 {
        u32_at(self.bytes(), field::INCOMING)
    }
    /// The piggy-backed ack; `client_id` 0 means none.
    pub fn ack(&self) -> Ack {
        Ack::read(&self.bytes()[field::ACK..])
    }
    /// Version of the receiver's CUTOFFS this sender last heard; 0 if none.
    pub fn cutoff_version(&self) -> u16 {
        super::field::u16_at(self.bytes(), field::CUTOFF_VERSION)
    }
    /// 1 if sent in answer to a RESEND (statistics only).
    pub fn retransmit(&self) -> u8 {
        self.bytes()[field::RETRANSMIT]
    }
    /// Three unused bytes.
    pub fn pad(&self) -> [u8; 3] {
        let mut p = [0; 3];
        p.copy_from_slice(&self.bytes()[field::PAD]);
        p
    }
    /// The raw `seg.offset` field, possibly [`OFFSET_IN_SEQUENCE`].
    pub fn seg_offset(&self) -> u32 {
        u32_at(self.bytes(), field::SEG_OFFSET)
    }
    /// Offset in the message of the first payload byte: `seg.offset`, or `sequence` when
    /// `seg.offset` is 0xFFFFFFFF.
    pub fn offset(&self) -> u32 {
        effective_offset(self.seg_offset(), self.header().sequence())
    }
    /// The message bytes this packet carries.
    pub fn payload(&self) -> &[u8] {
        &self.bytes()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the total bytes in the message.
    pub fn set_message_length(&mut self, v: u32) {
        set_u32(self.bytes_mut(), field::MESSAGE_LENGTH, v)
    }
    /// Sets the end of the bytes sent without grants (or of a retransmitted range).
    pub fn set_incoming(&mut self, v: u32) {
        set_u32(self.bytes_mut(), field::INCOMING, v)
    }
    /// Sets the piggy-backed ack ([`Ack::NONE`] for none).
    pub fn set_ack(&mut self, v: Ack) {
        v.write(&mut self.bytes_mut()[field::ACK..])
    }
    /// Sets the version of the receiver's CUTOFFS last heard.
    pub fn set_cutoff_version(&mut self, v: u16) {
        super::field::set_u16(self.bytes_mut(), field::CUTOFF_VERSION, v)
    }
    /// Sets the retransmission marker (1 in answer to a RESEND).
    pub fn set_retransmit(&mut self, v: u8) {
        self.bytes_mut()[field::RETRANSMIT] = v
    }
    /// Sets the three unused bytes.
    pub fn set_pad(&mut self, v: [u8; 3]) {
        self.bytes_mut()[field::PAD].copy_from_slice(&v)
    }
    /// Sets the raw `seg.offset`: the payload's offset, or [`OFFSET_IN_SEQUENCE`].
    pub fn set_seg_offset(&mut self, v: u32) {
        set_u32(self.bytes_mut(), field::SEG_OFFSET, v)
    }
    /// The writable payload area.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.bytes_mut()[field::PAYLOAD..]
    }
}

/// The offset rule shared by the module and the upstream variant (`homa_get_offset`).
pub fn effective_offset(seg_offset: u32, sequence: u32) -> u32 {
    if seg_offset == OFFSET_IN_SEQUENCE { sequence } else { seg_offset }
}

/// Whether the DATA header `next` continues a run begun by the DATA header `first` (as a
/// GSO sender sends one message's packets and GRO delivers them together): the same in
/// every byte but its offset, which is `offset`, and with no ack of its own (`first`'s
/// is the run's). Both are at least [`HEADER_LEN`] bytes; only the headers are compared.
pub fn continues(first: &[u8], next: &[u8], offset: u32) -> bool {
    use super::header::field::SEQUENCE;
    const ACK: core::ops::Range<usize> = field::ACK..field::CUTOFF_VERSION;
    let (Some(a), Some(b)) = (first.get(..HEADER_LEN), next.get(..HEADER_LEN)) else {
        return false;
    };
    let same = |r: core::ops::Range<usize>| a[r.clone()] == b[r];
    same(0..SEQUENCE)
        && same(SEQUENCE + 4..ACK.start)
        && b[ACK].iter().all(|&x| x == 0)
        && same(ACK.end..field::SEG_OFFSET)
        && effective_offset(u32_at(b, field::SEG_OFFSET), u32_at(b, SEQUENCE)) == offset
}

/// The DATA header's own fields (the payload travels beside it in [`super::Body::Data`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Bytes in the whole message.
    pub message_length: u32,
    /// Bytes [0, incoming) the sender sends without waiting for grants; on a
    /// retransmission, the end of the resent range.
    pub incoming: u32,
    /// Piggy-backed ack; [`Ack::NONE`] if none.
    pub ack: Ack,
    /// Version of the destination's CUTOFFS last received; 0 if none.
    pub cutoff_version: u16,
    /// 1 if sent in answer to a RESEND (statistics only).
    pub retransmit: u8,
    /// Three unused bytes, 0 from the module.
    pub pad: [u8; 3],
    /// Raw `seg.offset`; see [`effective_offset`].
    pub seg_offset: u32,
}

impl Repr {
    /// Parses and validates: `message_length` in 1..=1,000,000 and the payload inside it.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        Repr::parse_up_to(packet, MAX_MESSAGE_LENGTH)
    }

    /// As [`parse`](Self::parse), with `message_length` in 1..=`max_message_length`.
    pub fn parse_up_to<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        max_message_length: u32,
    ) -> Result<Repr, Error> {
        let message_length = packet.message_length();
        if message_length == 0 || message_length > max_message_length {
            return Err(Error::BadMessageLength { len: message_length, max: max_message_length });
        }
        let offset = packet.offset();
        let payload_len = packet.payload().len();
        if u64::from(offset) + payload_len as u64 > u64::from(message_length) {
            return Err(Error::PastMessageEnd { offset, payload_len, message_length });
        }
        Ok(Repr {
            message_length,
            incoming: packet.incoming(),
            ack: packet.ack(),
            cutoff_version: packet.cutoff_version(),
            retransmit: packet.retransmit(),
            pad: packet.pad(),
            seg_offset: packet.seg_offset(),
        })
    }

    /// Header bytes (add the payload length for the whole packet).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the DATA fields (not the common header, not the payload).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_message_length(self.message_length);
        packet.set_incoming(self.incoming);
        packet.set_ack(self.ack);
        packet.set_cutoff_version(self.cutoff_version);
        packet.set_retransmit(self.retransmit);
        packet.set_pad(self.pad);
        packet.set_seg_offset(self.seg_offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn golden_response() -> Vec<u8> {
        // The kernel server's 100-byte response (shared/golden/kernel-packets.json).
        let mut b = Vec::from(
            &[
                0x13, 0x88, 0x9c, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x10, 0xe0, 0x06, 0, 0, 0x8c, 0xca,
                0xb9, 0x7d, 0, 0, 0, 0, 0, 0, 0x03, 0xe9, 0, 0, 0, 0x64, 0, 0, 0, 0x64, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
            ][..],
        );
        b.extend((0..100u32).map(|i| (i * 7 + 1) as u8));
        b
    }

    #[test]
    fn parses_kernel_response() {
        let bytes = golden_response();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.message_length, 100);
        assert_eq!(r.incoming, 100);
        assert_eq!(r.seg_offset, OFFSET_IN_SEQUENCE);
        assert_eq!(p.offset(), 0);
        assert_eq!(p.payload().len(), 100);
        assert_eq!(r.ack, Ack::NONE);
    }

    #[test]
    fn a_run_continues_at_the_next_offset_with_no_ack_of_its_own() {
        let first = golden_response();
        let mut next = first.clone();
        let mut p = Packet::new_unchecked(&mut next[..]);
        p.set_seg_offset(100);
        assert!(continues(&first, &next, 100));
        assert!(!continues(&first, &next, 99), "another offset");
        assert!(!continues(&first, &next[..HEADER_LEN - 1], 100), "short");
        let mut p = Packet::new_unchecked(&mut next[..]);
        p.set_ack(Ack { client_id: 2, server_port: 9 });
        assert!(!continues(&first, &next, 100), "an ack of its own");
        let mut p = Packet::new_unchecked(&mut next[..]);
        p.set_ack(Ack::NONE);
        p.set_incoming(200);
        assert!(!continues(&first, &next, 100), "other fields differ");
    }

    #[test]
    fn offset_rule() {
        assert_eq!(effective_offset(OFFSET_IN_SEQUENCE, 2848), 2848);
        assert_eq!(effective_offset(1424, 2848), 1424);
        assert_eq!(effective_offset(0, 7), 0);
    }

    #[test]
    fn validation() {
        let mut b = golden_response();
        b[28..32].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::BadMessageLength { len: 0, max: 1_000_000 })
        );
        b[28..32].copy_from_slice(&1_000_001u32.to_be_bytes());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::BadMessageLength { len: 1_000_001, max: 1_000_000 })
        );
        b[28..32].copy_from_slice(&99u32.to_be_bytes());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::PastMessageEnd { offset: 0, payload_len: 100, message_length: 99 })
        );
        // An offset near u32::MAX must not overflow the check.
        b[28..32].copy_from_slice(&100u32.to_be_bytes());
        b[52..56].copy_from_slice(&0xFFFF_FFFEu32.to_be_bytes());
        assert!(matches!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::PastMessageEnd { .. })
        ));
        assert_eq!(
            Packet::new_checked(&b[..55]),
            Err(Error::Truncated { packet_type: Some(PacketType::Data), len: 55, min: 56 })
        );
    }

    #[test]
    fn a_raised_limit_admits_longer_messages() {
        let mut b = golden_response();
        let max = i32::MAX as u32;
        b[28..32].copy_from_slice(&max.to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadMessageLength { len: max, max: 1_000_000 }));
        assert_eq!(Repr::parse_up_to(&p, max).unwrap().message_length, max);
        // The last 100 bytes of the longest message fit; one byte further does not.
        b[52..56].copy_from_slice(&(max - 100).to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.offset(), max - 100);
        assert!(Repr::parse_up_to(&p, max).is_ok());
        b[52..56].copy_from_slice(&(max - 99).to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(matches!(Repr::parse_up_to(&p, max), Err(Error::PastMessageEnd { .. })));
    }

    #[test]
    fn emit_round_trips() {
        let bytes = golden_response();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        let mut out = bytes.clone();
        out[28..56].fill(0x55);
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }
}
