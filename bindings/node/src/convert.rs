//! `Config` by field name (the core's field table), from and to plain data.

use homa_core::config::FIELDS;
use homa_core::{Config, Map, Value};
use napi::Result;

use crate::failure;

/// Sets the fields `fields` (an object of Config fields by name) names on `config`, then
/// checks the rules between fields.
pub(crate) fn apply_config(config: &mut Config, fields: &Value) -> Result<()> {
    let map = match fields {
        Value::Map(m) => m,
        Value::Null => return Ok(()),
        _ => return Err(failure("TypeError", "the config must be an object of Config fields")),
    };
    homa_core::config::apply(config, map).map_err(|e| failure("config", e))
}

/// Whether the config object `fields` names the field `name`.
pub(crate) fn given(fields: &Value, name: &str) -> bool {
    matches!(fields, Value::Map(m) if m.contains_key(name))
}

/// Every field of `config` by name.
pub(crate) fn config_to_map(config: &Config) -> Map {
    FIELDS.iter().map(|f| (f.name, (f.get)(config))).collect()
}

/// The field table: `[{ name, kind, min, max, doc }]`.
pub(crate) fn config_fields() -> Value {
    let fields: Vec<Value> = FIELDS
        .iter()
        .map(|f| {
            let doc: Vec<&str> = f.doc.iter().map(|l| l.trim()).collect();
            let entry: Map = [
                ("name", Value::from(f.name)),
                ("kind", Value::from(format!("{:?}", f.kind).to_lowercase())),
                ("min", Value::from(f.min)),
                ("max", Value::from(f.max)),
                ("doc", Value::from(doc.join(" "))),
            ]
            .into_iter()
            .collect();
            Value::from(entry)
        })
        .collect();
    Value::from(fields)
}
