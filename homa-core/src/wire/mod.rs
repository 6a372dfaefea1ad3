//! Homa packets, byte for byte as the Linux module (HomaModule, format of December 2024 on)
//! sends and accepts them.
//!
//! Every packet starts with the 28-byte common header ([`header`]); the type code at byte 11
//! says which of the nine layouts follows. Each layout has its own file with two types:
//!
//! - `Packet<T: AsRef<[u8]>>`, a zero-copy view over the whole packet (common header
//!   included). `new_checked` verifies the length once; **after it succeeds no accessor
//!   panics**, whatever the bytes are. Setters need `T: AsMut<[u8]>`.
//! - `Repr`, the owned, validated form, with `parse`, `buffer_len` and `emit`. `emit` never
//!   panics on a view of at least `buffer_len` bytes.
//!
//! [`Repr`] ties them together: [`Repr::parse`] decodes any packet and [`Repr::emit`]
//! writes it back. Decoding is faithful: every byte of the parsed length is kept, including
//! the fields receivers ignore (`flags`, `urgent`, `checksum`, a `seg.offset` of
//! 0xFFFFFFFF), so `emit(parse(x)) == x` for every `x` that parses.
//!
//! All integers are big-endian. Offsets and sizes follow `homa_wire.h`.

use core::fmt;

pub mod ack;
pub mod bare;
pub mod cutoffs;
pub mod data;
pub mod fields;
pub mod grant;
pub mod header;
mod repr;
pub mod resend;

pub use ack::Ack;
pub use repr::{Body, Repr};

/// Largest message Homa carries (`HOMA_MAX_MESSAGE_LENGTH`).
pub const MAX_MESSAGE_LENGTH: u32 = 1_000_000;
/// Number of priority levels the wire can express (`HOMA_MAX_PRIORITIES`).
pub const MAX_PRIORITIES: u8 = 8;
/// Acks carried by one ACK packet (`HOMA_MAX_ACKS_PER_PKT`).
pub const MAX_ACKS: usize = 5;
/// `seg.offset` value meaning "the offset is in `sequence`".
pub const OFFSET_IN_SEQUENCE: u32 = 0xFFFF_FFFF;

/// The nine packet types and their codes (`enum homa_packet_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PacketType {
    /// A piece of a message, from its sender.
    Data = 0x10,
    /// The receiver lets the sender transmit more of a message.
    Grant = 0x11,
    /// A receiver (or a client awaiting a response) asks for bytes again.
    Resend = 0x12,
    /// Reply to a RESEND for an RPC the receiver does not have.
    RpcUnknown = 0x13,
    /// The sender is alive but not sending for now.
    Busy = 0x14,
    /// A receiver tells a sender its unscheduled priority cutoffs.
    Cutoffs = 0x15,
    /// Debugging only: the receiver freezes its timetrace.
    Freeze = 0x16,
    /// A server asks the client to ack a finished RPC.
    NeedAck = 0x17,
    /// A client releases finished RPCs on a server.
    Ack = 0x18,
}

impl PacketType {
    /// Every type, in code order.
    pub const ALL: [PacketType; 9] = [
        PacketType::Data,
        PacketType::Grant,
        PacketType::Resend,
        PacketType::RpcUnknown,
        PacketType::Busy,
        PacketType::Cutoffs,
        PacketType::Freeze,
        PacketType::NeedAck,
        PacketType::Ack,
    ];

    /// The type with this code, if any.
    pub fn from_code(code: u8) -> Option<PacketType> {
        PacketType::ALL.into_iter().find(|t| *t as u8 == code)
    }

    /// The type with this name as the spec spells it (`"DATA"`, `"RPC_UNKNOWN"`, ...).
    pub fn from_name(name: &str) -> Option<PacketType> {
        PacketType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The code carried at byte 11.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The name used by the spec and by `homa decode`.
    pub fn name(self) -> &'static str {
        match self {
            PacketType::Data => "DATA",
            PacketType::Grant => "GRANT",
            PacketType::Resend => "RESEND",
            PacketType::RpcUnknown => "RPC_UNKNOWN",
            PacketType::Busy => "BUSY",
            PacketType::Cutoffs => "CUTOFFS",
            PacketType::Freeze => "FREEZE",
            PacketType::NeedAck => "NEED_ACK",
            PacketType::Ack => "ACK",
        }
    }

    /// Length of this type's header: the module's minimum on receive and the exact size it
    /// sends (DATA adds its payload).
    pub fn header_len(self) -> usize {
        match self {
            PacketType::Data => data::HEADER_LEN,
            PacketType::Grant => grant::HEADER_LEN,
            PacketType::Resend => resend::HEADER_LEN,
            PacketType::Cutoffs => cutoffs::HEADER_LEN,
            PacketType::Ack => ack::HEADER_LEN,
            PacketType::RpcUnknown
            | PacketType::Busy
            | PacketType::Freeze
            | PacketType::NeedAck => header::HEADER_LEN,
        }
    }

    /// The `doff` byte the module writes: 14 words for DATA, 5 for control packets.
    pub fn doff(self) -> u8 {
        match self {
            PacketType::Data => 0xE0,
            _ => 0x50,
        }
    }
}

impl fmt::Display for PacketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes are not a valid Homa packet (or a buffer is too small to emit into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Shorter than the common header, or than its type's header.
    Truncated {
        /// The type, when the common header was complete enough to tell it.
        packet_type: Option<PacketType>,
        /// Bytes the packet has.
        len: usize,
        /// Bytes the header needs.
        min: usize,
    },
    /// The type byte is not one of the nine codes 0x10..=0x18.
    UnknownType(u8),
    /// An ACK claims more than [`MAX_ACKS`] entries.
    TooManyAcks(u16),
    /// DATA with `message_length` 0 or above `max` ([`MAX_MESSAGE_LENGTH`] unless a larger
    /// limit was given to `parse_up_to`).
    BadMessageLength {
        /// The length the packet claims.
        len: u32,
        /// The largest length accepted.
        max: u32,
    },
    /// DATA whose payload extends past `message_length`.
    PastMessageEnd {
        /// Offset of the first payload byte.
        offset: u32,
        /// Bytes of payload in the packet.
        payload_len: usize,
        /// Bytes in the whole message.
        message_length: u32,
    },
    /// A GRANT or RESEND naming a priority level above 7.
    BadPriority(u8),
    /// `emit` was given a buffer shorter than `buffer_len`.
    BufferTooSmall {
        /// Bytes in the buffer.
        len: usize,
        /// Bytes `emit` writes.
        needed: usize,
    },
}

impl Error {
    /// A stable, language-neutral name for the kind of error (used by the conformance
    /// vectors): `truncated`, `unknown_type`, `too_many_acks`, `bad_message_length`,
    /// `past_message_end`, `bad_priority`, `buffer_too_small`.
    pub fn class(&self) -> &'static str {
        match self {
            Error::Truncated { .. } => "truncated",
            Error::UnknownType(_) => "unknown_type",
            Error::TooManyAcks(_) => "too_many_acks",
            Error::BadMessageLength { .. } => "bad_message_length",
            Error::PastMessageEnd { .. } => "past_message_end",
            Error::BadPriority(_) => "bad_priority",
            Error::BufferTooSmall { .. } => "buffer_too_small",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { packet_type: Some(t), len, min } => {
                write!(f, "truncated {t} packet: {len} {}, a {t} header needs {min}", bytes(len))
            }
            Error::Truncated { packet_type: None, len, min } => {
                write!(f, "truncated packet: {len} {}, the common header needs {min}", bytes(len))
            }
            Error::UnknownType(code) => {
                write!(f, "unknown packet type 0x{code:02x} (valid types are 0x10..=0x18)")
            }
            Error::TooManyAcks(n) => {
                write!(f, "ACK claims {n} acks, at most {MAX_ACKS} fit in a packet")
            }
            Error::BadMessageLength { len, max } => {
                write!(f, "message_length {len} is not between 1 and {max}")
            }
            Error::PastMessageEnd { offset, payload_len, message_length } => write!(
                f,
                "DATA payload of {payload_len} bytes at offset {offset} extends past \
                 message_length {message_length}"
            ),
            Error::BadPriority(p) => {
                write!(f, "priority {p} is out of range (0..={})", MAX_PRIORITIES - 1)
            }
            Error::BufferTooSmall { len, needed } => {
                write!(f, "buffer of {len} bytes is too small, {needed} needed")
            }
        }
    }
}

impl core::error::Error for Error {}

fn bytes(n: usize) -> &'static str {
    if n == 1 { "byte" } else { "bytes" }
}

/// The local id of an RPC whose packets carry `wire_id` in `sender_id`: the sender's id with
/// bit 0 flipped (`homa_local_id`). Clients own even ids, servers the odd twin.
pub fn local_id(wire_id: u64) -> u64 {
    wire_id ^ 1
}

/// Whether `id`, as its owner knows it, belongs to the client side of an RPC.
pub fn is_client_id(id: u64) -> bool {
    id & 1 == 0
}

/// The IPv4 TOS byte (or IPv6 traffic class) for a priority level: `priority << 5`, the top
/// three DSCP bits, as the module writes with its default identity `priority_map`.
pub fn tos_for_priority(priority: u8) -> u8 {
    (priority & 7) << 5
}

/// The priority level a TOS / traffic-class byte carries (its top three bits).
pub fn priority_from_tos(tos: u8) -> u8 {
    tos >> 5
}

fn check_priority(priority: u8) -> Result<u8, Error> {
    if priority < MAX_PRIORITIES { Ok(priority) } else { Err(Error::BadPriority(priority)) }
}

/// Big-endian field access at fixed offsets. Callers only use ranges inside a length that
/// `check_len` verified, which is what makes the views' accessors panic-free.
mod field {
    pub(super) type Field = core::ops::Range<usize>;

    // One range check per field (indexing byte by byte would check each byte).
    pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
        let mut x = [0; 2];
        x.copy_from_slice(&b[at..at + 2]);
        u16::from_be_bytes(x)
    }
    pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
        let mut x = [0; 4];
        x.copy_from_slice(&b[at..at + 4]);
        u32::from_be_bytes(x)
    }
    pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut x = [0; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(x)
    }
    pub(super) fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    pub(super) fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    pub(super) fn set_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}

/// The constructors every view shares: `new_unchecked`, `new_checked`, `check_len`,
/// `into_inner`, and the common header seen through [`header::Packet`].
macro_rules! packet_view {
    ($packet_type:expr, $min:expr) => {
        /// A zero-copy view of the whole packet, common header included.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps `buffer` without checking it; accessors may panic until
            /// [`check_len`](Self::check_len) succeeds.
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps `buffer` after checking it holds this type's whole header.
            pub fn new_checked(buffer: T) -> Result<Packet<T>, $crate::wire::Error> {
                let packet = Packet::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            /// Ensures no accessor can panic: the buffer holds at least this type's header.
            pub fn check_len(&self) -> Result<(), $crate::wire::Error> {
                let len = self.buffer.as_ref().len();
                let min: usize = $min;
                if len < min {
                    let packet_type: Option<$crate::wire::PacketType> = $packet_type;
                    return Err($crate::wire::Error::Truncated { packet_type, len, min });
                }
                Ok(())
            }

            /// The underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The common header of this packet.
            pub fn header(&self) -> $crate::wire::header::Packet<&[u8]> {
                $crate::wire::header::Packet::new_unchecked(self.buffer.as_ref())
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// The common header of this packet, writable.
            pub fn header_mut(&mut self) -> $crate::wire::header::Packet<&mut [u8]> {
                $crate::wire::header::Packet::new_unchecked(self.buffer.as_mut())
            }
        }
    };
}
use packet_view;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_codes_and_names() {
        for (i, t) in PacketType::ALL.into_iter().enumerate() {
            assert_eq!(t.code(), 0x10 + i as u8);
            assert_eq!(PacketType::from_code(t.code()), Some(t));
            assert_eq!(PacketType::from_name(t.name()), Some(t));
        }
        assert_eq!(PacketType::from_code(0x0f), None);
        assert_eq!(PacketType::from_code(0x19), None);
        assert_eq!(PacketType::RpcUnknown.name(), "RPC_UNKNOWN");
    }

    #[test]
    fn header_lengths_match_the_module() {
        let lens: [usize; 9] = PacketType::ALL.map(PacketType::header_len);
        assert_eq!(lens, [56, 33, 37, 28, 28, 62, 28, 28, 80]);
    }

    #[test]
    fn ids_and_priorities() {
        assert_eq!(local_id(1000), 1001);
        assert_eq!(local_id(1001), 1000);
        assert!(is_client_id(1000));
        assert!(!is_client_id(1001));
        assert_eq!(tos_for_priority(7), 0xE0);
        assert_eq!(tos_for_priority(5), 0xA0);
        assert_eq!(tos_for_priority(0), 0);
        for p in 0..8 {
            assert_eq!(priority_from_tos(tos_for_priority(p)), p);
            // The ECN bits and low DSCP bits do not change the level.
            assert_eq!(priority_from_tos(tos_for_priority(p) | 0x1f), p);
        }
    }
}
