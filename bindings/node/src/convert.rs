//! JSON to and from the core's plain data ([`homa_core::Value`]): packet fields, counters,
//! `Config` by field name. JavaScript hands objects over as JSON text, which keeps the
//! native boundary to strings and Buffers.

use homa_core::config::{FIELDS, Field};
use homa_core::{Map, Value};
use napi::Result;
use serde_json::Value as Json;

use crate::failure;

/// A core value as JSON (the core hands out integers within `u64`).
pub(crate) fn value_to_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => u64::try_from(*i).map_or_else(|_| Json::from(*i as f64), Json::from),
        Value::Float(f) => Json::from(*f),
        Value::Str(s) => Json::from(s.as_str()),
        Value::List(l) => Json::Array(l.iter().map(value_to_json).collect()),
        Value::Map(m) => map_to_json(m),
    }
}

/// A core map as a JSON object, keys in order.
pub(crate) fn map_to_json(m: &Map) -> Json {
    Json::Object(m.iter().map(|(k, v)| (k.to_string(), value_to_json(v))).collect())
}

fn json_to_value(j: &Json) -> Value {
    match j {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Value::Int(i128::from(u)),
            (None, Some(i)) => Value::Int(i128::from(i)),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Str(s.clone()),
        Json::Array(a) => Value::List(a.iter().map(json_to_value).collect()),
        Json::Object(o) => {
            Value::Map(o.iter().map(|(k, v)| (k.clone(), json_to_value(v))).collect())
        }
    }
}

/// A JSON object (text) as a core map.
pub(crate) fn json_to_map(text: &str) -> Result<Map> {
    match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(o)) => Ok(o.iter().map(|(k, v)| (k.clone(), json_to_value(v))).collect()),
        _ => Err(failure("invalid_fields", "expected an object of packet fields")),
    }
}

/// A `Config` from a JSON object of fields by name (checked by the core's field table).
pub(crate) fn config(text: &str) -> Result<homa_io::Config> {
    let mut config = homa_io::Config::default();
    for (name, value) in json_to_map(text)?.iter() {
        let field = Field::named(name).ok_or_else(|| {
            let names: Vec<_> = FIELDS.iter().map(|f| f.name).collect();
            failure(
                "config",
                format!("unknown option {name:?}; the options are {}", names.join(", ")),
            )
        })?;
        (field.set)(&mut config, value).map_err(|e| failure("config", e))?;
    }
    config.validate().map_err(|e| failure("config", e))?;
    Ok(config)
}

/// The field table as JSON: `[{name, kind, min, max, doc}]`.
pub(crate) fn config_fields() -> Json {
    FIELDS
        .iter()
        .map(|f| {
            serde_json::json!({
                "name": f.name,
                "kind": format!("{:?}", f.kind).to_lowercase(),
                "min": f.min,
                "max": f.max,
                "doc": f.doc.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" "),
            })
        })
        .collect()
}
