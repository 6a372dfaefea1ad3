//! The language-neutral JSON form of one packet: a flat object whose keys are the field names
//! of spec/homa-protocol.md §1. `homa decode` prints it, `homa encode` reads it, the bindings'
//! `wire.decode` / `wire.encode` return and take it, and the conformance suite's wire vectors
//! store it, so every implementation agrees on one spelling. Values are [`Value`]s.
//!
//! Common keys: `type` (the name, e.g. `"DATA"`), `sport`, `dport`, `sequence`, `doff`,
//! `flags`, `window`, `checksum`, `urgent`, `sender_id`, and `reserved` (bytes 8..11 as one
//! integer, printed only when not 0). Per type:
//! - DATA: `message_length`, `incoming`, `ack_client_id`, `ack_server_port`,
//!   `cutoff_version`, `retransmit`, `pad` (only when not 0), `seg_offset`,
//!   `effective_offset` (derived), `payload_len`, `payload` (hex);
//! - GRANT: `offset`, `priority`; RESEND: `offset`, `length`, `priority`;
//! - CUTOFFS: `unsched_cutoffs` (8 integers), `cutoff_version`;
//! - ACK: `num_acks`, `acks` (objects with `client_id`, `server_port`), and `unused_acks`
//!   (the slots past `num_acks`, only when any is not 0).
//!
//! [`encode`] needs `type`, `sport`, `dport`, `sender_id` and each type's own fields; the rest
//! default to what the Linux module sends (doff for the type, flags 0x06, urgent 0xB97D,
//! zeros elsewhere; a DATA `sequence` and `seg_offset` default to `effective_offset`).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::{self as wire, Ack, Body, PacketType, ack, cutoffs, data, grant, header, resend};
use crate::value::{Map, Value, hex, unhex};

/// Why a JSON object cannot be encoded as a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldsError {
    /// A required key is absent.
    Missing(&'static str),
    /// A key holds the wrong kind of value or one out of its field's range.
    Invalid {
        /// The key at fault.
        field: &'static str,
        /// What is wrong, in words.
        reason: String,
    },
    /// The fields describe a packet the wire codec rejects (e.g. 6 acks).
    Wire(wire::Error),
}

impl fmt::Display for FieldsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldsError::Missing(k) => write!(f, "missing field `{k}`"),
            FieldsError::Invalid { field, reason } => write!(f, "field `{field}`: {reason}"),
            FieldsError::Wire(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for FieldsError {}

impl From<wire::Error> for FieldsError {
    fn from(e: wire::Error) -> Self {
        FieldsError::Wire(e)
    }
}

/// Decodes a packet into its fields.
pub fn decode(bytes: &[u8]) -> Result<Map, wire::Error> {
    let repr = wire::Repr::parse(bytes)?;
    Ok(to_fields(&repr))
}

/// The fields of a decoded packet.
pub fn to_fields(repr: &wire::Repr<'_>) -> Map {
    let h = &repr.header;
    let mut m = Map::new();
    m.insert("type", repr.packet_type().name());
    m.insert("sport", h.sport);
    m.insert("dport", h.dport);
    m.insert("sequence", h.sequence);
    if h.reserved != [0; 3] {
        m.insert("reserved", u24(h.reserved));
    }
    m.insert("doff", h.doff);
    m.insert("flags", h.flags);
    m.insert("window", h.window);
    m.insert("checksum", h.checksum);
    m.insert("urgent", h.urgent);
    m.insert("sender_id", h.sender_id);
    match repr.body {
        Body::Data { repr: d, payload } => {
            m.insert("message_length", d.message_length);
            m.insert("incoming", d.incoming);
            m.insert("ack_client_id", d.ack.client_id);
            m.insert("ack_server_port", d.ack.server_port);
            m.insert("cutoff_version", d.cutoff_version);
            m.insert("retransmit", d.retransmit);
            if d.pad != [0; 3] {
                m.insert("pad", u24(d.pad));
            }
            m.insert("seg_offset", d.seg_offset);
            m.insert("effective_offset", data::effective_offset(d.seg_offset, h.sequence));
            m.insert("payload_len", payload.len());
            m.insert("payload", hex(payload));
        }
        Body::Grant(g) => {
            m.insert("offset", g.offset);
            m.insert("priority", g.priority);
        }
        Body::Resend(r) => {
            m.insert("offset", r.offset);
            m.insert("length", r.length);
            m.insert("priority", r.priority);
        }
        Body::Cutoffs(c) => {
            m.insert("unsched_cutoffs", c.unsched_cutoffs);
            m.insert("cutoff_version", c.cutoff_version);
        }
        Body::Ack(a) => {
            let n = a.acks().len();
            m.insert("num_acks", n);
            m.insert("acks", Value::List(a.acks().iter().map(ack_value).collect()));
            let unused = &a.slots()[n..];
            if unused.iter().any(|s| *s != Ack::NONE) {
                m.insert("unused_acks", Value::List(unused.iter().map(ack_value).collect()));
            }
        }
        Body::RpcUnknown | Body::Busy | Body::Freeze | Body::NeedAck => {}
    }
    m
}

/// Encodes fields into packet bytes.
pub fn encode(m: &Map) -> Result<Vec<u8>, FieldsError> {
    let name = m.get("type").ok_or(FieldsError::Missing("type"))?;
    let packet_type = name.as_str().and_then(PacketType::from_name).ok_or_else(|| {
        FieldsError::Invalid { field: "type", reason: format!("{name} is not a packet type name") }
    })?;
    let f = Fields(m);
    let payload = match packet_type {
        PacketType::Data => f.payload()?,
        _ => Vec::new(),
    };
    let body = match packet_type {
        PacketType::Data => {
            let offset = f.opt_u32("effective_offset")?;
            let seg_offset = match (f.opt_u32("seg_offset")?, offset) {
                (Some(s), _) | (None, Some(s)) => s,
                (None, None) => return Err(FieldsError::Missing("seg_offset")),
            };
            Body::Data {
                repr: data::Repr {
                    message_length: f.u32("message_length")?,
                    incoming: f.u32_or("incoming", 0)?,
                    ack: Ack {
                        client_id: f.u64_or("ack_client_id", 0)?,
                        server_port: f.u16_or("ack_server_port", 0)?,
                    },
                    cutoff_version: f.u16_or("cutoff_version", 0)?,
                    retransmit: f.u8_or("retransmit", 0)?,
                    pad: f.u24_or("pad")?,
                    seg_offset,
                },
                payload: &payload,
            }
        }
        PacketType::Grant => {
            Body::Grant(grant::Repr { offset: f.u32("offset")?, priority: f.u8("priority")? })
        }
        PacketType::Resend => Body::Resend(resend::Repr {
            offset: f.u32("offset")?,
            length: f.u32("length")?,
            priority: f.u8("priority")?,
        }),
        PacketType::Cutoffs => {
            let v = f.get("unsched_cutoffs")?;
            let list = v
                .as_list()
                .filter(|a| a.len() == 8)
                .ok_or_else(|| invalid("unsched_cutoffs", "expected an array of 8 integers"))?;
            let mut unsched_cutoffs = [0u32; 8];
            for (slot, x) in unsched_cutoffs.iter_mut().zip(list) {
                *slot = int(x, "unsched_cutoffs")?;
            }
            Body::Cutoffs(cutoffs::Repr {
                unsched_cutoffs,
                cutoff_version: f.u16("cutoff_version")?,
            })
        }
        PacketType::Ack => {
            let acks = f.ack_list("acks")?.unwrap_or_default();
            let unused = f.ack_list("unused_acks")?.unwrap_or_default();
            if let Some(n) = f.opt_u32("num_acks")?
                && n as usize != acks.len()
            {
                return Err(invalid(
                    "num_acks",
                    &format!("says {n} but `acks` lists {}", acks.len()),
                ));
            }
            if acks.len() > wire::MAX_ACKS {
                return Err(wire::Error::TooManyAcks(acks.len() as u16).into());
            }
            let mut slots = acks.clone();
            slots.extend(unused);
            if slots.len() > wire::MAX_ACKS {
                return Err(invalid(
                    "unused_acks",
                    &format!("`acks` and `unused_acks` fill {} slots; an ACK has 5", slots.len()),
                ));
            }
            slots.resize(wire::MAX_ACKS, Ack::NONE);
            let slots: [Ack; wire::MAX_ACKS] = slots.try_into().expect("resized to MAX_ACKS");
            Body::Ack(ack::Repr::from_slots(acks.len() as u16, slots)?)
        }
        PacketType::RpcUnknown => Body::RpcUnknown,
        PacketType::Busy => Body::Busy,
        PacketType::Freeze => Body::Freeze,
        PacketType::NeedAck => Body::NeedAck,
    };
    let fresh = header::Repr::new(packet_type, 0, 0, 0);
    let default_sequence = match body {
        Body::Data { .. } => f.opt_u32("effective_offset")?.unwrap_or(0),
        _ => 0,
    };
    let header = header::Repr {
        sport: f.u16("sport")?,
        dport: f.u16("dport")?,
        sequence: f.u32_or("sequence", default_sequence)?,
        reserved: f.u24_or("reserved")?,
        doff: f.u8_or("doff", fresh.doff)?,
        flags: f.u8_or("flags", fresh.flags)?,
        window: f.u16_or("window", fresh.window)?,
        checksum: f.u16_or("checksum", fresh.checksum)?,
        urgent: f.u16_or("urgent", fresh.urgent)?,
        sender_id: f.u64("sender_id")?,
    };
    let repr = wire::Repr { header, body };
    let mut out = vec![0; repr.buffer_len()];
    repr.emit(&mut out)?;
    // What we emit must decode, and to the offset the caller meant: this catches a
    // `sequence` / `seg_offset` / `effective_offset` combination that disagrees.
    let back = wire::Repr::parse(&out)?;
    if let (Some(want), Some(got)) = (f.opt_u32("effective_offset")?, back.data_offset())
        && want != got
    {
        return Err(invalid(
            "effective_offset",
            &format!("is {want}, but seg_offset and sequence give {got}"),
        ));
    }
    Ok(out)
}

fn u24(b: [u8; 3]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

fn ack_value(a: &Ack) -> Value {
    Value::Map(
        [("client_id", Value::from(a.client_id)), ("server_port", a.server_port.into())]
            .into_iter()
            .collect(),
    )
}

fn invalid(field: &'static str, reason: &str) -> FieldsError {
    FieldsError::Invalid { field, reason: reason.to_string() }
}

fn int<T: TryFrom<u64>>(v: &Value, field: &'static str) -> Result<T, FieldsError> {
    v.as_u64().and_then(|x| T::try_from(x).ok()).ok_or_else(|| FieldsError::Invalid {
        field,
        reason: format!(
            "{v} is not an integer in range for a {}-byte field",
            core::mem::size_of::<T>()
        ),
    })
}

/// Typed access to one object's keys.
struct Fields<'a>(&'a Map);

impl Fields<'_> {
    fn get(&self, k: &'static str) -> Result<&Value, FieldsError> {
        self.0.get(k).ok_or(FieldsError::Missing(k))
    }
    fn opt<T: TryFrom<u64>>(&self, k: &'static str) -> Result<Option<T>, FieldsError> {
        self.0.get(k).map(|v| int(v, k)).transpose()
    }
    fn u8(&self, k: &'static str) -> Result<u8, FieldsError> {
        int(self.get(k)?, k)
    }
    fn u16(&self, k: &'static str) -> Result<u16, FieldsError> {
        int(self.get(k)?, k)
    }
    fn u32(&self, k: &'static str) -> Result<u32, FieldsError> {
        int(self.get(k)?, k)
    }
    fn u64(&self, k: &'static str) -> Result<u64, FieldsError> {
        int(self.get(k)?, k)
    }
    fn opt_u32(&self, k: &'static str) -> Result<Option<u32>, FieldsError> {
        self.opt(k)
    }
    fn u8_or(&self, k: &'static str, d: u8) -> Result<u8, FieldsError> {
        Ok(self.opt(k)?.unwrap_or(d))
    }
    fn u16_or(&self, k: &'static str, d: u16) -> Result<u16, FieldsError> {
        Ok(self.opt(k)?.unwrap_or(d))
    }
    fn u32_or(&self, k: &'static str, d: u32) -> Result<u32, FieldsError> {
        Ok(self.opt(k)?.unwrap_or(d))
    }
    fn u64_or(&self, k: &'static str, d: u64) -> Result<u64, FieldsError> {
        Ok(self.opt(k)?.unwrap_or(d))
    }
    fn u24_or(&self, k: &'static str) -> Result<[u8; 3], FieldsError> {
        let v: u32 = self.opt(k)?.unwrap_or(0);
        let [top, a, b, c] = v.to_be_bytes();
        if top != 0 {
            return Err(invalid(k, "does not fit in 3 bytes"));
        }
        Ok([a, b, c])
    }
    fn payload(&self) -> Result<Vec<u8>, FieldsError> {
        let len: Option<u32> = self.opt("payload_len")?;
        let bytes = match self.0.get("payload") {
            Some(v) => {
                let s = v.as_str().ok_or_else(|| invalid("payload", "expected a hex string"))?;
                unhex(s).ok_or_else(|| invalid("payload", "not hex"))?
            }
            None => vec![0; len.ok_or(FieldsError::Missing("payload"))? as usize],
        };
        if let Some(len) = len
            && len as usize != bytes.len()
        {
            return Err(invalid(
                "payload_len",
                &format!("says {len} but the payload holds {} bytes", bytes.len()),
            ));
        }
        Ok(bytes)
    }
    fn ack_list(&self, k: &'static str) -> Result<Option<Vec<Ack>>, FieldsError> {
        let Some(v) = self.0.get(k) else { return Ok(None) };
        let items = v.as_list().ok_or_else(|| invalid(k, "expected an array of acks"))?;
        items
            .iter()
            .map(|a| {
                let obj = a.as_map().ok_or_else(|| invalid(k, "each ack must be an object"))?;
                let client_id = obj.get("client_id").ok_or(FieldsError::Missing("client_id"))?;
                let server_port =
                    obj.get("server_port").ok_or(FieldsError::Missing("server_port"))?;
                Ok(Ack { client_id: int(client_id, k)?, server_port: int(server_port, k)? })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL_CUTOFFS: &str = "13889c400000000000000015500600008c6cb97d00000000000003e900000000000000000000000000000000000f424000003a9800000af0000000c80001";

    fn map(pairs: &[(&str, Value)]) -> Map {
        pairs.iter().cloned().collect()
    }

    #[test]
    fn decode_then_encode_is_identity() {
        let bytes = unhex(KERNEL_CUTOFFS).unwrap();
        let m = decode(&bytes).unwrap();
        assert_eq!(m.get("type"), Some(&Value::from("CUTOFFS")));
        let cutoffs: Vec<u32> = vec![0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200];
        assert_eq!(m.get("unsched_cutoffs"), Some(&Value::from(cutoffs)));
        assert_eq!(encode(&m).unwrap(), bytes);
    }

    #[test]
    fn minimal_fields_take_module_defaults() {
        let m = map(&[
            ("type", "BUSY".into()),
            ("sport", 1u8.into()),
            ("dport", 2u8.into()),
            ("sender_id", 3u8.into()),
        ]);
        let bytes = encode(&m).unwrap();
        assert_eq!(bytes.len(), 28);
        assert_eq!((bytes[12], bytes[13], &bytes[18..20]), (0x50, 0x06, &[0xB9, 0x7D][..]));
    }

    #[test]
    fn data_offset_goes_to_both_places() {
        let m = map(&[
            ("type", "DATA".into()),
            ("sport", 1u8.into()),
            ("dport", 2u8.into()),
            ("sender_id", 4u8.into()),
            ("message_length", 3000u32.into()),
            ("effective_offset", 1424u32.into()),
            ("payload", "abcd".into()),
        ]);
        let bytes = encode(&m).unwrap();
        assert_eq!(&bytes[4..8], &1424u32.to_be_bytes());
        assert_eq!(&bytes[52..56], &1424u32.to_be_bytes());
        assert_eq!(bytes[12], 0xE0);
    }

    #[test]
    fn errors_name_the_field() {
        let grant = |offset: Value| {
            map(&[
                ("type", "GRANT".into()),
                ("sport", 1u8.into()),
                ("dport", 2u8.into()),
                ("sender_id", 3u8.into()),
                ("offset", offset),
                ("priority", 1u8.into()),
            ])
        };
        assert!(matches!(
            encode(&grant(Value::Int(-1))),
            Err(FieldsError::Invalid { field: "offset", .. })
        ));
        assert!(matches!(
            encode(&grant(Value::Float(1.5))),
            Err(FieldsError::Invalid { field: "offset", .. })
        ));
        assert!(matches!(
            encode(&map(&[("type", "NOPE".into())])),
            Err(FieldsError::Invalid { field: "type", .. })
        ));
        let one = || Value::from(map(&[("client_id", 2u8.into()), ("server_port", 1u8.into())]));
        let six = Value::List((0..6).map(|_| one()).collect());
        let m = map(&[
            ("type", "ACK".into()),
            ("sport", 1u8.into()),
            ("dport", 2u8.into()),
            ("sender_id", 3u8.into()),
            ("acks", six),
        ]);
        assert_eq!(encode(&m), Err(FieldsError::Wire(wire::Error::TooManyAcks(6))));
    }
}
