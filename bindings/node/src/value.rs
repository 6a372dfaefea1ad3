//! The core's plain data ([`Value`]: packet fields, counters, settings) as JavaScript values
//! and back. Integers are Numbers, except those beyond `Number.MAX_SAFE_INTEGER`, which are
//! BigInts (a 64-bit id can be any u64); on the way in, both are accepted.

use std::ptr;

use homa_core::{Map, Value};
use napi::bindgen_prelude::{BigInt, FromNapiValue, Null, ToNapiValue};
use napi::{Result, sys};

use crate::failure;

/// Deeper JavaScript objects are refused (a cycle would recurse forever).
const MAX_DEPTH: usize = 32;

/// The largest integer a Number holds exactly.
const MAX_SAFE: u128 = (1 << 53) - 1;

fn ok(status: sys::napi_status) -> Result<()> {
    match status {
        sys::Status::napi_ok => Ok(()),
        s => Err(napi::Error::from_reason(format!("napi call failed (status {s})"))),
    }
}

/// An integer as a Number, or a BigInt where a Number would round it.
///
/// # Safety
/// On the JavaScript thread of `env`.
pub(crate) unsafe fn int(env: sys::napi_env, i: i128) -> Result<sys::napi_value> {
    // SAFETY: the caller is on the JavaScript thread.
    unsafe {
        match i.unsigned_abs() <= MAX_SAFE {
            true => f64::to_napi_value(env, i as f64),
            false => BigInt::to_napi_value(env, BigInt::from(i)),
        }
    }
}

/// `v` as a JavaScript value.
///
/// # Safety
/// On the JavaScript thread of `env`.
pub(crate) unsafe fn to_js(env: sys::napi_env, v: &Value) -> Result<sys::napi_value> {
    // SAFETY: the caller is on the JavaScript thread; out-pointers are locals.
    unsafe {
        match v {
            Value::Null => Null::to_napi_value(env, Null),
            Value::Bool(b) => bool::to_napi_value(env, *b),
            Value::Int(i) => int(env, *i),
            Value::Float(x) => f64::to_napi_value(env, *x),
            Value::Str(s) => <&str>::to_napi_value(env, s),
            Value::List(items) => {
                let mut array = ptr::null_mut();
                ok(sys::napi_create_array_with_length(env, items.len(), &mut array))?;
                for (i, item) in items.iter().enumerate() {
                    ok(sys::napi_set_element(env, array, i as u32, to_js(env, item)?))?;
                }
                Ok(array)
            }
            Value::Map(m) => map_to_js(env, m),
        }
    }
}

/// `m` as a plain object, keys in order.
///
/// # Safety
/// On the JavaScript thread of `env`.
pub(crate) unsafe fn map_to_js(env: sys::napi_env, m: &Map) -> Result<sys::napi_value> {
    let mut object = ptr::null_mut();
    // SAFETY: the caller is on the JavaScript thread.
    unsafe {
        ok(sys::napi_create_object(env, &mut object))?;
        for (k, v) in m.iter() {
            let key = <&str>::to_napi_value(env, k)?;
            ok(sys::napi_set_property(env, object, key, to_js(env, v)?))?;
        }
    }
    Ok(object)
}

/// A JavaScript value as plain data: null/undefined, booleans, numbers, BigInts, strings,
/// arrays and plain objects (`what` names it in errors).
///
/// # Safety
/// On the JavaScript thread of `env`; `value` belongs to it.
pub(crate) unsafe fn from_js(
    env: sys::napi_env,
    value: sys::napi_value,
    what: &str,
) -> Result<Value> {
    // SAFETY: forwarded.
    unsafe { from_js_at(env, value, what, 0) }
}

unsafe fn from_js_at(
    env: sys::napi_env,
    value: sys::napi_value,
    what: &str,
    depth: usize,
) -> Result<Value> {
    if depth > MAX_DEPTH {
        return Err(failure("invalid_argument", format!("{what} is nested too deeply")));
    }
    let mut kind = 0;
    // SAFETY: the caller is on the JavaScript thread; out-pointers are locals.
    unsafe {
        ok(sys::napi_typeof(env, value, &mut kind))?;
        Ok(match kind {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => Value::Null,
            sys::ValueType::napi_boolean => Value::Bool(bool::from_napi_value(env, value)?),
            sys::ValueType::napi_number => {
                let x = f64::from_napi_value(env, value)?;
                match x.fract() == 0.0 && x.abs() <= MAX_SAFE as f64 {
                    true => Value::Int(x as i128),
                    false => Value::Float(x),
                }
            }
            sys::ValueType::napi_bigint => {
                let (i, lossless) = BigInt::from_napi_value(env, value)?.get_i128();
                if !lossless {
                    return Err(failure(
                        "invalid_argument",
                        format!("{what}: {i}... is too large"),
                    ));
                }
                Value::Int(i)
            }
            sys::ValueType::napi_string => Value::Str(String::from_napi_value(env, value)?),
            sys::ValueType::napi_object => {
                let mut is_array = false;
                ok(sys::napi_is_array(env, value, &mut is_array))?;
                let (mut keys, mut len) = (ptr::null_mut(), 0);
                match is_array {
                    true => keys = value,
                    false => ok(sys::napi_get_property_names(env, value, &mut keys))?,
                }
                ok(sys::napi_get_array_length(env, keys, &mut len))?;
                let mut items = Vec::with_capacity(len as usize);
                let mut map = Map::new();
                for i in 0..len {
                    let mut item = ptr::null_mut();
                    ok(sys::napi_get_element(env, keys, i, &mut item))?;
                    if is_array {
                        items.push(from_js_at(env, item, what, depth + 1)?);
                        continue;
                    }
                    let key = String::from_napi_value(env, item)?;
                    let mut field = ptr::null_mut();
                    ok(sys::napi_get_property(env, value, item, &mut field))?;
                    let v = from_js_at(env, field, &format!("{what}.{key}"), depth + 1)?;
                    map.insert(key, v);
                }
                match is_array {
                    true => Value::List(items),
                    false => Value::Map(map),
                }
            }
            _ => {
                return Err(failure(
                    "invalid_argument",
                    format!("{what} must be plain data (numbers, strings, arrays, objects)"),
                ));
            }
        })
    }
}
