//! CUTOFFS (0x15): a receiver tells a sender which priority to use for unscheduled bytes of
//! each message size (`struct homa_cutoffs_hdr`, 62 bytes).
//!
//! ```text
//!  28                         60               62
//!  +--------------------------+----------------+
//!  | unsched_cutoffs[8] (be32)| cutoff_version |
//!  +--------------------------+----------------+
//! ```
//!
//! Entry i is the largest message length that should use level i; entry 0 is treated as
//! infinity by the receiver of the packet.

use super::field::{set_u16, set_u32, u16_at, u32_at};
use super::{Error, MAX_PRIORITIES, PacketType};

/// Bytes in a CUTOFFS packet.
pub const HEADER_LEN: usize = 62;

mod field {
    pub(super) const CUTOFFS: usize = 28;
    pub(super) const VERSION: usize = 60;
}

super::packet_view!(Some(PacketType::Cutoffs), HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The eight cutoffs, index = priority level.
    pub fn unsched_cutoffs(&self) -> [u32; MAX_PRIORITIES as usize] {
        core::array::from_fn(|i| u32_at(self.buffer.as_ref(), field::CUTOFFS + 4 * i))
    }
    /// Version to echo in later DATA packets to the sender of this packet.
    pub fn cutoff_version(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::VERSION)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the eight cutoffs, index = priority level.
    pub fn set_unsched_cutoffs(&mut self, v: [u32; MAX_PRIORITIES as usize]) {
        for (i, c) in v.into_iter().enumerate() {
            set_u32(self.buffer.as_mut(), field::CUTOFFS + 4 * i, c);
        }
    }
    /// Sets the version the peer should echo in its DATA.
    pub fn set_cutoff_version(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::VERSION, v)
    }
}

/// A CUTOFFS packet's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Entry i: the largest message length that uses level i (entry 0 means infinity).
    pub unsched_cutoffs: [u32; MAX_PRIORITIES as usize],
    /// Version to echo in later DATA packets to the sender of this packet.
    pub cutoff_version: u16,
}

impl Repr {
    /// Parses; every bit pattern is a valid table (the engine decides what to trust).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            unsched_cutoffs: packet.unsched_cutoffs(),
            cutoff_version: packet.cutoff_version(),
        })
    }
    /// Bytes in the packet: always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the CUTOFFS fields (not the common header).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_unsched_cutoffs(self.unsched_cutoffs);
        packet.set_cutoff_version(self.cutoff_version);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_defaults() {
        let tail: [u8; 34] = [
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x0f, 0x42, 0x40, 0x00, 0x00,
            0x3a, 0x98, 0x00, 0x00, 0x0a, 0xf0, 0x00, 0x00, 0x00, 0xc8, 0x00, 0x01,
        ];
        let mut b = [0u8; 62];
        b[28..].copy_from_slice(&tail);
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.unsched_cutoffs, [0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200]);
        assert_eq!(r.cutoff_version, 1);
        let mut out = [0u8; 62];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert!(Packet::new_checked(&b[..61]).is_err());
    }
}
