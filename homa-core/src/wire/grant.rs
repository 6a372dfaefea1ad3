//! GRANT (0x11): the receiver lets the sender transmit more (`struct homa_grant_hdr`, 33 bytes).
//!
//! ```text
//!  28       32         33
//!  +--------+----------+
//!  | offset | priority |
//!  +--------+----------+
//! ```

use super::field::{set_u32, u32_at};
use super::{Error, PacketType, check_priority};

/// Bytes in a GRANT; the module drops shorter ones and sends exactly this many.
pub const HEADER_LEN: usize = 33;

mod field {
    pub(super) const OFFSET: usize = 28;
    pub(super) const PRIORITY: usize = 32;
}

super::packet_view!(Some(PacketType::Grant), HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The sender may now transmit every byte before this offset (cumulative).
    pub fn offset(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::OFFSET)
    }
    /// Level for this message's scheduled DATA from now on.
    pub fn priority(&self) -> u8 {
        self.buffer.as_ref()[field::PRIORITY]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the offset before which the sender may transmit every byte.
    pub fn set_offset(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::OFFSET, v)
    }
    /// Sets the level for this message's scheduled DATA.
    pub fn set_priority(&mut self, v: u8) {
        self.buffer.as_mut()[field::PRIORITY] = v
    }
}

/// A GRANT's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The sender may transmit every byte before this offset (cumulative).
    pub offset: u32,
    /// Level 0..=7 for this message's scheduled DATA from now on.
    pub priority: u8,
}

impl Repr {
    /// Parses and checks the priority is a level (0..=7).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr { offset: packet.offset(), priority: check_priority(packet.priority())? })
    }
    /// Bytes in the packet: always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the GRANT fields (not the common header).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_offset(self.offset);
        packet.set_priority(self.priority);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_emit() {
        let mut b = [0u8; 33];
        b[11] = 0x11;
        b[28..33].copy_from_slice(&[0x00, 0x03, 0x0d, 0x40, 0x03]);
        let p = Packet::new_checked(&b[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r, Repr { offset: 200_000, priority: 3 });
        let mut out = [0u8; 33];
        out[11] = 0x11;
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn rejects_bad_input() {
        let mut b = [0u8; 33];
        b[32] = 8;
        assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()), Err(Error::BadPriority(8)));
        assert_eq!(
            Packet::new_checked(&b[..32]),
            Err(Error::Truncated { packet_type: Some(PacketType::Grant), len: 32, min: 33 })
        );
    }
}
