//! The 28-byte common header every Homa packet starts with (`struct homa_common_hdr`).
//!
//! Its first 20 bytes overlay a TCP header so NICs can segment Homa like TCP:
//!
//! ```text
//!  0      2      4          8           11    12    13     14      16        18      20          28
//!  +------+------+----------+-----------+-----+-----+------+-------+---------+-------+-----------+
//!  |sport |dport | sequence | reserved  |type |doff |flags |window |checksum |urgent | sender_id |
//!  +------+------+----------+-----------+-----+-----+------+-------+---------+-------+-----------+
//! ```

use super::field::{Field, set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};
use super::{Error, PacketType};

/// Bytes in the common header.
pub const HEADER_LEN: usize = 28;
/// `flags` as the module writes it on every packet: SYN+RST, impossible in real TCP, which is
/// how a receiver recognises a Homa packet sent as TCP ("hijacking").
pub const MODULE_FLAGS: u8 = 0x06;
/// `urgent` as the module writes it on every packet (the other hijacking marker).
pub const MODULE_URGENT: u16 = 0xB97D;

pub(super) mod field {
    use super::Field;
    pub(super) const SPORT: usize = 0;
    pub(super) const DPORT: usize = 2;
    pub(in crate::wire) const SEQUENCE: usize = 4;
    pub(super) const RESERVED: Field = 8..11;
    pub(super) const TYPE: usize = 11;
    pub(super) const DOFF: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: usize = 14;
    pub(super) const CHECKSUM: usize = 16;
    pub(super) const URGENT: usize = 18;
    pub(super) const SENDER_ID: usize = 20;
}

super::packet_view!(None, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Homa port of the sending socket.
    pub fn sport(&self) -> u16 {
        u16_at(self.bytes(), field::SPORT)
    }
    /// Homa port of the destination socket.
    pub fn dport(&self) -> u16 {
        u16_at(self.bytes(), field::DPORT)
    }
    /// DATA: the offset of the first payload byte (see [`super::data`]); 0 otherwise.
    pub fn sequence(&self) -> u32 {
        u32_at(self.bytes(), field::SEQUENCE)
    }
    /// Bytes 8..11, the high bytes of TCP's ack number; unused by Homa.
    pub fn reserved(&self) -> [u8; 3] {
        let mut r = [0; 3];
        r.copy_from_slice(&self.bytes()[field::RESERVED]);
        r
    }
    /// The raw type code.
    pub fn type_code(&self) -> u8 {
        self.bytes()[field::TYPE]
    }
    /// The packet type, or [`Error::UnknownType`].
    pub fn packet_type(&self) -> Result<PacketType, Error> {
        PacketType::from_code(self.type_code()).ok_or(Error::UnknownType(self.type_code()))
    }
    /// Header length in 32-bit words in the high nibble (needed by TSO).
    pub fn doff(&self) -> u8 {
        self.bytes()[field::DOFF]
    }
    /// TCP flags position; the module writes [`MODULE_FLAGS`], receivers ignore it.
    pub fn flags(&self) -> u8 {
        self.bytes()[field::FLAGS]
    }
    /// TCP window position; unused.
    pub fn window(&self) -> u16 {
        u16_at(self.bytes(), field::WINDOW)
    }
    /// TCP checksum position; filled by NICs for hijacked packets, never verified.
    pub fn checksum(&self) -> u16 {
        u16_at(self.bytes(), field::CHECKSUM)
    }
    /// TCP urgent pointer position; the module writes [`MODULE_URGENT`], receivers ignore it.
    pub fn urgent(&self) -> u16 {
        u16_at(self.bytes(), field::URGENT)
    }
    /// The RPC id as the sender of this packet knows it.
    pub fn sender_id(&self) -> u64 {
        u64_at(self.bytes(), field::SENDER_ID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the Homa port of the sending socket.
    pub fn set_sport(&mut self, v: u16) {
        set_u16(self.bytes_mut(), field::SPORT, v)
    }
    /// Sets the Homa port of the destination socket.
    pub fn set_dport(&mut self, v: u16) {
        set_u16(self.bytes_mut(), field::DPORT, v)
    }
    /// Sets the DATA offset of the first payload byte (0 for other types).
    pub fn set_sequence(&mut self, v: u32) {
        set_u32(self.bytes_mut(), field::SEQUENCE, v)
    }
    /// Sets bytes 8..11, unused by Homa.
    pub fn set_reserved(&mut self, v: [u8; 3]) {
        self.bytes_mut()[field::RESERVED].copy_from_slice(&v)
    }
    /// Sets the raw type code at byte 11.
    pub fn set_type_code(&mut self, v: u8) {
        self.bytes_mut()[field::TYPE] = v
    }
    /// Sets the header length byte (see [`PacketType::doff`]).
    pub fn set_doff(&mut self, v: u8) {
        self.bytes_mut()[field::DOFF] = v
    }
    /// Sets the TCP flags byte; the module writes [`MODULE_FLAGS`].
    pub fn set_flags(&mut self, v: u8) {
        self.bytes_mut()[field::FLAGS] = v
    }
    /// Sets the unused TCP window field.
    pub fn set_window(&mut self, v: u16) {
        set_u16(self.bytes_mut(), field::WINDOW, v)
    }
    /// Sets the TCP checksum field (never verified).
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.bytes_mut(), field::CHECKSUM, v)
    }
    /// Sets the TCP urgent field; the module writes [`MODULE_URGENT`].
    pub fn set_urgent(&mut self, v: u16) {
        set_u16(self.bytes_mut(), field::URGENT, v)
    }
    /// Sets the RPC id as the sender of this packet knows it.
    pub fn set_sender_id(&mut self, v: u64) {
        set_u64(self.bytes_mut(), field::SENDER_ID, v)
    }
}

/// The common header's fields, all of them except the type (which [`super::Body`] carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Homa port of the sending socket.
    pub sport: u16,
    /// Homa port of the destination socket.
    pub dport: u16,
    /// Meaningful for DATA only (see [`super::data`]); 0 on control packets the module sends.
    pub sequence: u32,
    /// Bytes 8..11; unused, 0 from the module.
    pub reserved: [u8; 3],
    /// Header length in 32-bit words, in the high nibble.
    pub doff: u8,
    /// TCP flags position; [`MODULE_FLAGS`] from the module.
    pub flags: u8,
    /// TCP window position; unused, 0.
    pub window: u16,
    /// TCP checksum position; never verified.
    pub checksum: u16,
    /// TCP urgent pointer position; [`MODULE_URGENT`] from the module.
    pub urgent: u16,
    /// The RPC id as the sender of this packet knows it.
    pub sender_id: u64,
}

impl Repr {
    /// A fresh header as the module writes it: `doff` for the type, the hijacking markers in
    /// `flags` and `urgent`, zero checksum (receivers never verify it).
    pub fn new(packet_type: PacketType, sport: u16, dport: u16, sender_id: u64) -> Repr {
        Repr {
            sport,
            dport,
            sequence: 0,
            reserved: [0; 3],
            doff: packet_type.doff(),
            flags: MODULE_FLAGS,
            window: 0,
            checksum: 0,
            urgent: MODULE_URGENT,
            sender_id,
        }
    }

    /// Reads every field; cannot fail once the view is checked.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Repr {
        Repr {
            sport: packet.sport(),
            dport: packet.dport(),
            sequence: packet.sequence(),
            reserved: packet.reserved(),
            doff: packet.doff(),
            flags: packet.flags(),
            window: packet.window(),
            checksum: packet.checksum(),
            urgent: packet.urgent(),
            sender_id: packet.sender_id(),
        }
    }

    /// Writes every field and the type code.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet_type: PacketType,
        packet: &mut Packet<T>,
    ) {
        packet.set_sport(self.sport);
        packet.set_dport(self.dport);
        packet.set_sequence(self.sequence);
        packet.set_reserved(self.reserved);
        packet.set_type_code(packet_type.code());
        packet.set_doff(self.doff);
        packet.set_flags(self.flags);
        packet.set_window(self.window);
        packet.set_checksum(self.checksum);
        packet.set_urgent(self.urgent);
        packet.set_sender_id(self.sender_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // First 28 bytes of the kernel's NEED_ACK in shared/golden/kernel-packets.json.
    const NEED_ACK: [u8; 28] = [
        0x13, 0x88, 0x9c, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x17, 0x50, 0x06, 0, 0, 0x8c, 0x4a, 0xb9,
        0x7d, 0, 0, 0, 0, 0, 0, 0x03, 0xe9,
    ];

    #[test]
    fn parse_fields() {
        let p = Packet::new_checked(&NEED_ACK[..]).unwrap();
        assert_eq!(p.sport(), 5000);
        assert_eq!(p.dport(), 40000);
        assert_eq!(p.packet_type(), Ok(PacketType::NeedAck));
        assert_eq!(p.doff(), 0x50);
        assert_eq!(p.flags(), MODULE_FLAGS);
        assert_eq!(p.checksum(), 35914);
        assert_eq!(p.urgent(), MODULE_URGENT);
        assert_eq!(p.sender_id(), 1001);
    }

    #[test]
    fn emit_matches_bytes() {
        let p = Packet::new_checked(&NEED_ACK[..]).unwrap();
        let repr = Repr::parse(&p);
        let mut out = [0xAAu8; 28];
        repr.emit(PacketType::NeedAck, &mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, NEED_ACK);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Packet::new_checked(&NEED_ACK[..27]),
            Err(Error::Truncated { packet_type: None, len: 27, min: 28 })
        );
    }

    #[test]
    fn unknown_type() {
        let mut b = NEED_ACK;
        b[11] = 0x20;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap().packet_type(),
            Err(Error::UnknownType(0x20))
        );
    }
}
