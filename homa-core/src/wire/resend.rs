//! RESEND (0x12): the receiver asks for bytes again (`struct homa_resend_hdr`, 37 bytes).
//!
//! ```text
//!  28       32       36         37
//!  +--------+--------+----------+
//!  | offset | length | priority |
//!  +--------+--------+----------+
//! ```
//!
//! `length` 0xFFFFFFFF ([`ALL_SENT`]) means "I have received nothing: resend everything you
//! have sent". The upstream variant omits `priority` (36 bytes); the module drops such
//! packets as too short, and so do we.

use super::field::{set_u32, u32_at};
use super::{Error, PacketType, check_priority};

/// Bytes in a RESEND.
pub const HEADER_LEN: usize = 37;
/// `length` meaning "everything already sent".
pub const ALL_SENT: u32 = 0xFFFF_FFFF;

mod field {
    pub(super) const OFFSET: usize = 28;
    pub(super) const LENGTH: usize = 32;
    pub(super) const PRIORITY: usize = 36;
}

super::packet_view!(Some(PacketType::Resend), HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// First byte to retransmit.
    pub fn offset(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::OFFSET)
    }
    /// Bytes to retransmit, or [`ALL_SENT`].
    pub fn length(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::LENGTH)
    }
    /// Level for the retransmitted DATA.
    pub fn priority(&self) -> u8 {
        self.buffer.as_ref()[field::PRIORITY]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the first byte to retransmit.
    pub fn set_offset(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::OFFSET, v)
    }
    /// Sets the byte count, or [`ALL_SENT`].
    pub fn set_length(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::LENGTH, v)
    }
    /// Sets the level for the retransmitted DATA.
    pub fn set_priority(&mut self, v: u8) {
        self.buffer.as_mut()[field::PRIORITY] = v
    }
}

/// A RESEND's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// First byte to retransmit.
    pub offset: u32,
    /// Bytes to retransmit, or [`ALL_SENT`] for everything sent so far.
    pub length: u32,
    /// Level 0..=7 for the retransmitted DATA.
    pub priority: u8,
}

impl Repr {
    /// Parses and checks the priority is a level (0..=7).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            offset: packet.offset(),
            length: packet.length(),
            priority: check_priority(packet.priority())?,
        })
    }
    /// Bytes in the packet: always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the RESEND fields (not the common header).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_offset(self.offset);
        packet.set_length(self.length);
        packet.set_priority(self.priority);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_resend() {
        // Tail of the kernel's RESEND in shared/golden/kernel-packets.json.
        let mut b = [0u8; 37];
        b[11] = 0x12;
        b[28..37].copy_from_slice(&[0, 0, 0, 0, 0x00, 0x03, 0xd0, 0x90, 0x07]);
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r, Repr { offset: 0, length: 250_000, priority: 7 });
        let mut out = [0u8; 37];
        out[11] = 0x12;
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn upstream_36_byte_resend_is_truncated() {
        let b = [0u8; 36];
        assert_eq!(
            Packet::new_checked(&b[..]),
            Err(Error::Truncated { packet_type: Some(PacketType::Resend), len: 36, min: 37 })
        );
    }
}
