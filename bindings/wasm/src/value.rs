//! Plain data between JavaScript and the core ([`Value`]: packet fields, counters,
//! settings). Integers are Numbers, except those beyond
//! `Number.MAX_SAFE_INTEGER`, which are BigInts; on the way in both are accepted.

use homa_core::{Config, Map, Value};
use js_sys::{Array, BigInt, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use crate::{failure, range_error, type_error};

/// Deeper objects are refused (a cycle would recurse forever).
const MAX_DEPTH: usize = 32;

/// The largest integer a Number holds exactly.
const MAX_SAFE: i128 = (1 << 53) - 1;

/// `v` as a JavaScript value.
pub(crate) fn to_js(v: &Value) -> JsValue {
    match v {
        Value::Null => JsValue::NULL,
        Value::Bool(b) => JsValue::from_bool(*b),
        Value::Int(i) if i.unsigned_abs() <= MAX_SAFE as u128 => JsValue::from_f64(*i as f64),
        Value::Int(i) => BigInt::from(*i).into(),
        Value::Float(x) => JsValue::from_f64(*x),
        Value::Str(s) => JsValue::from_str(s),
        Value::List(items) => items.iter().map(to_js).collect::<Array>().into(),
        Value::Map(m) => {
            let o = Object::new();
            for (k, v) in m.iter() {
                let _ = Reflect::set(&o, &k.into(), &to_js(v));
            }
            o.into()
        }
    }
}

/// A JavaScript value as plain data: null/undefined, booleans, numbers, BigInts, strings,
/// arrays and plain objects (`what` names it in errors).
pub(crate) fn from_js(v: &JsValue, what: &str) -> Result<Value, JsValue> {
    from_js_at(v, what, 0)
}

fn from_js_at(v: &JsValue, what: &str, depth: usize) -> Result<Value, JsValue> {
    if depth > MAX_DEPTH {
        return Err(type_error(format!("{what} is nested too deeply")));
    }
    if v.is_null() || v.is_undefined() {
        return Ok(Value::Null);
    }
    if let Some(b) = v.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Some(x) = v.as_f64() {
        let whole = x.fract() == 0.0 && x.abs() <= MAX_SAFE as f64;
        return Ok(if whole { Value::Int(x as i128) } else { Value::Float(x) });
    }
    if let Some(s) = v.as_string() {
        return Ok(Value::Str(s));
    }
    if let Some(b) = v.dyn_ref::<BigInt>() {
        let i =
            i128::try_from(b.clone()).map_err(|_| range_error(format!("{what} is too large")))?;
        return Ok(Value::Int(i));
    }
    if Array::is_array(v) {
        let array = Array::from(v);
        let items = array.iter().map(|item| from_js_at(&item, what, depth + 1));
        return items.collect::<Result<Vec<_>, _>>().map(Value::List);
    }
    if let Some(o) = v.dyn_ref::<Object>() {
        let mut map = Map::new();
        for key in Object::keys(o).iter() {
            let name = key.as_string().unwrap_or_default();
            let field = Reflect::get(o, &key)?;
            map.insert(name.clone(), from_js_at(&field, &format!("{what}.{name}"), depth + 1)?);
        }
        return Ok(Value::Map(map));
    }
    Err(type_error(format!("{what} must be plain data (numbers, strings, arrays, objects)")))
}

/// Sets the Config fields `config` names, then checks the rules between fields.
pub(crate) fn apply_config(c: &mut Config, config: &Object) -> Result<(), JsValue> {
    let Value::Map(fields) = from_js(config, "config")? else {
        return Err(type_error("the config must be an object of Config fields"));
    };
    homa_core::config::apply(c, &fields).map_err(|e| failure("config", e))
}
