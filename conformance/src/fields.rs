//! The packet-fields codec (`homa_core::wire::fields`) in JSON terms, for the vector files:
//! the same canonical object, as `serde_json` values.

use homa_core::wire::{self, fields};
use serde_json::{Map, Value};

pub use fields::FieldsError;

/// Decodes a packet into its JSON fields.
pub fn decode(bytes: &[u8]) -> Result<Map<String, Value>, wire::Error> {
    fields::decode(bytes).map(object)
}

/// The JSON fields of a decoded packet.
pub fn to_fields(repr: &wire::Repr<'_>) -> Map<String, Value> {
    object(fields::to_fields(repr))
}

/// Encodes JSON fields into packet bytes.
pub fn encode(m: &Map<String, Value>) -> Result<Vec<u8>, FieldsError> {
    fields::encode(&m.into())
}

fn object(m: homa_core::Map) -> Map<String, Value> {
    match m.into() {
        Value::Object(o) => o,
        _ => unreachable!("a map converts to an object"),
    }
}
