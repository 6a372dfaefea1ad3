//! Any Homa packet: the common header plus a typed body.

use super::{Error, PacketType, ack, cutoffs, data, grant, header, resend};

/// The part of a packet after the common header, by type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body<'a> {
    /// DATA: the header's fields and the message bytes after them.
    Data {
        /// The DATA header's fields.
        repr: data::Repr,
        /// The message bytes the packet carries.
        payload: &'a [u8],
    },
    /// GRANT: permission to send more.
    Grant(grant::Repr),
    /// RESEND: a request to send bytes again.
    Resend(resend::Repr),
    /// RPC_UNKNOWN: the sender does not have the RPC (common header only).
    RpcUnknown,
    /// BUSY: the sender is alive but not sending (common header only).
    Busy,
    /// CUTOFFS: the sender's unscheduled priority cutoffs.
    Cutoffs(cutoffs::Repr),
    /// FREEZE: a debugging request to freeze the timetrace (common header only).
    Freeze,
    /// NEED_ACK: a server asks the client to ack the RPC (common header only).
    NeedAck,
    /// ACK: a client releases finished RPCs.
    Ack(ack::Repr),
}

impl Body<'_> {
    /// The type code this body is sent with.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Body::Data { .. } => PacketType::Data,
            Body::Grant(_) => PacketType::Grant,
            Body::Resend(_) => PacketType::Resend,
            Body::RpcUnknown => PacketType::RpcUnknown,
            Body::Busy => PacketType::Busy,
            Body::Cutoffs(_) => PacketType::Cutoffs,
            Body::Freeze => PacketType::Freeze,
            Body::NeedAck => PacketType::NeedAck,
            Body::Ack(_) => PacketType::Ack,
        }
    }
}

/// A whole packet, decoded. DATA borrows its payload from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The common header.
    pub header: header::Repr,
    /// Everything after the common header, by type.
    pub body: Body<'a>,
}

impl<'a> Repr<'a> {
    /// Decodes one packet (the bytes after the IP header, or a UDP payload).
    ///
    /// Bytes past a control packet's fixed size are ignored, as the module ignores them;
    /// [`buffer_len`](Self::buffer_len) tells how many were used.
    pub fn parse(bytes: &'a [u8]) -> Result<Repr<'a>, Error> {
        Repr::parse_up_to(bytes, super::MAX_MESSAGE_LENGTH)
    }

    /// As [`parse`](Self::parse), accepting DATA of messages up to `max_message_length`
    /// bytes instead of the module's 1,000,000 (see `Config::max_message_length`).
    pub fn parse_up_to(bytes: &'a [u8], max_message_length: u32) -> Result<Repr<'a>, Error> {
        let common = header::Packet::new_checked(bytes)?;
        let packet_type = common.packet_type()?;
        let header = header::Repr::parse(&common);
        let body = match packet_type {
            PacketType::Data => {
                let p = data::Packet::new_checked(bytes)?;
                let repr = data::Repr::parse_up_to(&p, max_message_length)?;
                Body::Data { repr, payload: &bytes[data::HEADER_LEN..] }
            }
            PacketType::Grant => {
                Body::Grant(grant::Repr::parse(&grant::Packet::new_checked(bytes)?)?)
            }
            PacketType::Resend => {
                Body::Resend(resend::Repr::parse(&resend::Packet::new_checked(bytes)?)?)
            }
            PacketType::Cutoffs => {
                Body::Cutoffs(cutoffs::Repr::parse(&cutoffs::Packet::new_checked(bytes)?)?)
            }
            PacketType::Ack => Body::Ack(ack::Repr::parse(&ack::Packet::new_checked(bytes)?)?),
            PacketType::RpcUnknown => Body::RpcUnknown,
            PacketType::Busy => Body::Busy,
            PacketType::Freeze => Body::Freeze,
            PacketType::NeedAck => Body::NeedAck,
        };
        Ok(Repr { header, body })
    }

    /// The packet type.
    pub fn packet_type(&self) -> PacketType {
        self.body.packet_type()
    }

    /// For DATA, the offset of the first payload byte (`seg.offset`, or `sequence` when
    /// `seg.offset` is 0xFFFFFFFF).
    pub fn data_offset(&self) -> Option<u32> {
        match self.body {
            Body::Data { repr, .. } => {
                Some(data::effective_offset(repr.seg_offset, self.header.sequence))
            }
            _ => None,
        }
    }

    /// Bytes [`emit`](Self::emit) writes: the type's full size, plus the payload for DATA.
    pub fn buffer_len(&self) -> usize {
        match self.body {
            Body::Data { payload, .. } => data::HEADER_LEN + payload.len(),
            _ => self.packet_type().header_len(),
        }
    }

    /// Writes the packet to the front of `buf` and returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let len = self.buffer_len();
        let have = buf.len();
        let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall { len: have, needed: len })?;
        self.header.emit(self.packet_type(), &mut header::Packet::new_unchecked(&mut *out));
        match self.body {
            Body::Data { repr, payload } => {
                let mut p = data::Packet::new_unchecked(out);
                repr.emit(&mut p);
                p.payload_mut().copy_from_slice(payload);
            }
            Body::Grant(r) => r.emit(&mut grant::Packet::new_unchecked(out)),
            Body::Resend(r) => r.emit(&mut resend::Packet::new_unchecked(out)),
            Body::Cutoffs(r) => r.emit(&mut cutoffs::Packet::new_unchecked(out)),
            Body::Ack(r) => r.emit(&mut ack::Packet::new_unchecked(out)),
            Body::RpcUnknown | Body::Busy | Body::Freeze | Body::NeedAck => {}
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ack, MAX_MESSAGE_LENGTH, OFFSET_IN_SEQUENCE};
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn round_trip(repr: &Repr<'_>) -> Vec<u8> {
        let mut buf = vec![0xA5; repr.buffer_len()];
        assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
        assert_eq!(Repr::parse(&buf).as_ref(), Ok(repr));
        buf
    }

    #[test]
    fn every_control_type_emits_its_full_size() {
        let h = header::Repr::new(PacketType::Busy, 1, 2, 3);
        let bodies = [
            Body::Grant(grant::Repr { offset: 1, priority: 2 }),
            Body::Resend(resend::Repr { offset: 0, length: resend::ALL_SENT, priority: 7 }),
            Body::RpcUnknown,
            Body::Busy,
            Body::Cutoffs(cutoffs::Repr { unsched_cutoffs: [0; 8], cutoff_version: 1 }),
            Body::Freeze,
            Body::NeedAck,
            Body::Ack(ack::Repr::new(&[]).unwrap()),
        ];
        for body in bodies {
            let header = header::Repr { doff: body.packet_type().doff(), ..h };
            let buf = round_trip(&Repr { header, body });
            assert_eq!(buf.len(), body.packet_type().header_len());
            assert_eq!(buf[12], 0x50);
            assert_eq!(buf[11], body.packet_type().code());
        }
    }

    #[test]
    fn trailing_bytes_after_control_header_are_ignored() {
        let repr = Repr {
            header: header::Repr::new(PacketType::Grant, 1, 2, 3),
            body: Body::Grant(grant::Repr { offset: 10, priority: 1 }),
        };
        let mut buf = round_trip(&repr);
        buf.push(1); // the pre-2025 `resend_all` byte
        assert_eq!(Repr::parse(&buf), Ok(repr));
    }

    #[test]
    fn emit_into_short_buffer_is_an_error() {
        let repr = Repr { header: header::Repr::new(PacketType::Busy, 1, 2, 3), body: Body::Busy };
        assert_eq!(repr.emit(&mut [0; 27]), Err(Error::BufferTooSmall { len: 27, needed: 28 }));
    }

    fn arb_header() -> impl Strategy<Value = header::Repr> {
        (any::<(u16, u16, u32, [u8; 3], u8, u8)>(), any::<(u16, u16, u16, u64)>()).prop_map(
            |((sport, dport, sequence, reserved, doff, flags), (window, checksum, urgent, id))| {
                header::Repr {
                    sport,
                    dport,
                    sequence,
                    reserved,
                    doff,
                    flags,
                    window,
                    checksum,
                    urgent,
                    sender_id: id,
                }
            },
        )
    }

    fn arb_ack() -> impl Strategy<Value = Ack> {
        any::<(u64, u16)>().prop_map(|(client_id, server_port)| Ack { client_id, server_port })
    }

    /// A valid DATA packet: header, effective offset, DATA fields and payload. When
    /// `seg.offset` defers to `sequence`, `sequence` holds the offset.
    fn arb_data() -> impl Strategy<Value = (header::Repr, u32, data::Repr, Vec<u8>)> {
        (arb_header(), proptest::collection::vec(any::<u8>(), 0..1500)).prop_flat_map(
            |(header, payload)| {
                let len = payload.len() as u32;
                let fields = (any::<bool>(), any::<(u32, u16, u8, [u8; 3])>(), arb_ack());
                (len.max(1)..=MAX_MESSAGE_LENGTH, fields).prop_flat_map(
                    move |(message_length, (marker, (incoming, cv, rt, pad), ack))| {
                        let payload = payload.clone();
                        (0..=message_length - len).prop_map(move |offset| {
                            let (seg_offset, sequence) = if marker {
                                (OFFSET_IN_SEQUENCE, offset)
                            } else {
                                (offset, header.sequence)
                            };
                            let repr = data::Repr {
                                message_length,
                                incoming,
                                ack,
                                cutoff_version: cv,
                                retransmit: rt,
                                pad,
                                seg_offset,
                            };
                            (header::Repr { sequence, ..header }, offset, repr, payload.clone())
                        })
                    },
                )
            },
        )
    }

    fn arb_control_body() -> impl Strategy<Value = Body<'static>> {
        prop_oneof![
            (any::<u32>(), 0..8u8)
                .prop_map(|(offset, priority)| Body::Grant(grant::Repr { offset, priority })),
            (any::<u32>(), any::<u32>(), 0..8u8).prop_map(|(offset, length, priority)| {
                Body::Resend(resend::Repr { offset, length, priority })
            }),
            Just(Body::RpcUnknown),
            Just(Body::Busy),
            Just(Body::Freeze),
            Just(Body::NeedAck),
            (any::<[u32; 8]>(), any::<u16>()).prop_map(|(unsched_cutoffs, cutoff_version)| {
                Body::Cutoffs(cutoffs::Repr { unsched_cutoffs, cutoff_version })
            }),
            (0..=5u16, proptest::array::uniform5(arb_ack()))
                .prop_map(|(n, slots)| Body::Ack(ack::Repr::from_slots(n, slots).unwrap())),
        ]
    }

    proptest! {
        #[test]
        fn control_packets_round_trip(header in arb_header(), body in arb_control_body()) {
            round_trip(&Repr { header, body });
        }

        #[test]
        fn data_packets_round_trip((header, offset, repr, payload) in arb_data()) {
            let packet = Repr { header, body: Body::Data { repr, payload: &payload } };
            round_trip(&packet);
            prop_assert_eq!(packet.data_offset(), Some(offset));
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_reemit_identically(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(repr) = Repr::parse(&bytes) {
                let mut out = vec![0; repr.buffer_len()];
                repr.emit(&mut out).unwrap();
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
