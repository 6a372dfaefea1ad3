//! JSON to and from the core's plain data (homa-core's `json` conversions): packet fields,
//! counters, `Config` by field name. JavaScript hands objects over as JSON text, which keeps the
//! native boundary to strings and Buffers.

use homa_core::Map;
use homa_core::config::{FIELDS, Field};
use napi::Result;
use serde_json::Value as Json;

use crate::failure;

/// A JSON object (text) as a core map.
pub(crate) fn json_to_map(text: &str) -> Result<Map> {
    match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(o)) => Ok(Map::from(&o)),
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
