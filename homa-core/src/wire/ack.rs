//! ACK (0x18): a client releases finished RPCs on a server (`struct homa_ack_hdr`, 80 bytes),
//! and the 10-byte [`Ack`] record that ACK and DATA packets carry.
//!
//! ```text
//!  28         30          40          50          60          70          80
//!  +----------+-----------+-----------+-----------+-----------+-----------+
//!  | num_acks |  acks[0]  |  acks[1]  |  acks[2]  |  acks[3]  |  acks[4]  |
//!  +----------+-----------+-----------+-----------+-----------+-----------+
//!  each ack:  client_id (8) | server_port (2)
//! ```
//!
//! The packet is always 80 bytes, whatever `num_acks` says. The RPC named by the common
//! header is acknowledged too.

use super::field::{set_u16, set_u64, u16_at, u64_at};
use super::{Error, MAX_ACKS, PacketType};

/// Bytes in an ACK packet.
pub const HEADER_LEN: usize = 80;
/// Bytes in one embedded ack record.
pub const ACK_LEN: usize = 10;

mod field {
    pub(super) const NUM_ACKS: usize = 28;
    pub(super) const ACKS: usize = 30;
}

/// One acknowledged RPC: the client's (even) id and the server's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ack {
    /// The RPC's id as the client knows it (even); 0 means no ack.
    pub client_id: u64,
    /// Port of the server socket that holds the RPC.
    pub server_port: u16,
}

impl Ack {
    /// The "no ack" record (client_id 0) that DATA carries when it has nothing to ack.
    pub const NONE: Ack = Ack { client_id: 0, server_port: 0 };

    /// Whether this record acknowledges something.
    pub fn is_some(&self) -> bool {
        self.client_id != 0
    }

    /// Reads a record from the first 10 bytes of `b` (callers pass a checked range).
    pub(super) fn read(b: &[u8]) -> Ack {
        Ack { client_id: u64_at(b, 0), server_port: u16_at(b, 8) }
    }

    pub(super) fn write(self, b: &mut [u8]) {
        set_u64(b, 0, self.client_id);
        set_u16(b, 8, self.server_port);
    }
}

super::packet_view!(Some(PacketType::Ack), HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The count field as sent; [`Repr::parse`] rejects values above 5.
    pub fn num_acks(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::NUM_ACKS)
    }
    /// Slot `i` (0..5) whether or not `num_acks` covers it.
    pub fn slot(&self, i: usize) -> Ack {
        let at = field::ACKS + ACK_LEN * (i % MAX_ACKS);
        Ack::read(&self.buffer.as_ref()[at..at + ACK_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the count of valid leading slots (0..=5).
    pub fn set_num_acks(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::NUM_ACKS, v)
    }
    /// Writes slot `i` (0..5).
    pub fn set_slot(&mut self, i: usize, ack: Ack) {
        let at = field::ACKS + ACK_LEN * (i % MAX_ACKS);
        ack.write(&mut self.buffer.as_mut()[at..at + ACK_LEN])
    }
}

/// An ACK packet's fields: up to five acks, plus whatever the unused slots hold (the module
/// zeroes them; they are kept so decoding loses nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    num_acks: u8,
    slots: [Ack; MAX_ACKS],
}

impl Repr {
    /// An ACK carrying `acks`; more than five is [`Error::TooManyAcks`].
    pub fn new(acks: &[Ack]) -> Result<Repr, Error> {
        let mut slots = [Ack::NONE; MAX_ACKS];
        slots
            .get_mut(..acks.len())
            .ok_or(Error::TooManyAcks(acks.len() as u16))?
            .copy_from_slice(acks);
        Ok(Repr { num_acks: acks.len() as u8, slots })
    }

    /// An ACK from a count and all five slots, as read off the wire.
    pub fn from_slots(num_acks: u16, slots: [Ack; MAX_ACKS]) -> Result<Repr, Error> {
        if usize::from(num_acks) > MAX_ACKS {
            return Err(Error::TooManyAcks(num_acks));
        }
        Ok(Repr { num_acks: num_acks as u8, slots })
    }

    /// The valid acks (`num_acks` of them).
    pub fn acks(&self) -> &[Ack] {
        &self.slots[..usize::from(self.num_acks)]
    }

    /// All five slots, including those past `num_acks`.
    pub fn slots(&self) -> &[Ack; MAX_ACKS] {
        &self.slots
    }

    /// Parses; `num_acks` above five is an error rather than a silent clamp.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        Repr::from_slots(packet.num_acks(), core::array::from_fn(|i| packet.slot(i)))
    }

    /// Bytes in the packet: always [`HEADER_LEN`], whatever `num_acks` says.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the ACK fields (not the common header).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_num_acks(u16::from(self.num_acks));
        for (i, ack) in self.slots.iter().enumerate() {
            packet.set_slot(i, *ack);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn five() -> [Ack; 5] {
        core::array::from_fn(|i| Ack { client_id: 2 * (i as u64 + 1), server_port: 100 + i as u16 })
    }

    #[test]
    fn five_acks_round_trip() {
        let r = Repr::new(&five()).unwrap();
        let mut b = [0u8; 80];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(&b[28..30], &[0, 5]);
        assert_eq!(&b[30..40], &[0, 0, 0, 0, 0, 0, 0, 2, 0, 100]);
        assert_eq!(&b[70..80], &[0, 0, 0, 0, 0, 0, 0, 10, 0, 104]);
        let back = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.acks(), &five());
    }

    #[test]
    fn too_many_acks_is_an_error() {
        let mut b = [0u8; 80];
        b[29] = 6;
        assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()), Err(Error::TooManyAcks(6)));
        assert_eq!(Repr::new(&[Ack::NONE; 6]), Err(Error::TooManyAcks(6)));
    }

    #[test]
    fn unused_slots_survive() {
        let mut b = [0u8; 80];
        b[29] = 1;
        b[79] = 0x42; // junk in slot 4, past num_acks
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.acks().len(), 1);
        let mut out = [0u8; 80];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }
}
