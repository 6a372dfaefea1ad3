//! Plain data: the form in which a packet's fields ([`wire::fields`](crate::wire::fields)),
//! the counters ([`Metrics::to_value`](crate::Metrics::to_value)) and the settings
//! ([`config::FIELDS`](crate::config::FIELDS)) leave the core for bindings and tools. It maps
//! one to one onto JSON, a Python dict or a JavaScript object, so every language shows them
//! alike and only converts.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// A JSON-like value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// JSON's `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// Any integer a binding may hand in (JSON's, Python's `int` within 128 bits); what the
    /// core hands out is always 0..=u64::MAX.
    Int(i128),
    /// A floating-point number.
    Float(f64),
    /// A UTF-8 string.
    Str(String),
    /// An ordered sequence of values (a JSON array).
    List(Vec<Value>),
    /// String keys to values, in insertion order (a JSON object).
    Map(Map),
}

/// Keys and values in the order they were inserted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Map {
    entries: Vec<(String, Value)>,
}

impl Map {
    /// An empty map.
    pub fn new() -> Map {
        Map::default()
    }

    /// Sets `key` (replacing its value where it is, or appending it).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let (key, value) = (key.into(), value.into());
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.entries.push((key, value)),
        }
    }

    /// The value at `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The entries, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Map {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Map {
        let mut m = Map::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

impl Value {
    /// The value as an unsigned integer, if it is one that fits.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Int(i) => u64::try_from(i).ok(),
            _ => None,
        }
    }

    /// The string, if the value is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items, if the value is a list.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// The entries, if the value is a map.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
}

macro_rules! from_int {
    ($($t:ty)*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::Int(v as i128)
            }
        }
    )*};
}
from_int!(u8 u16 u32 u64 usize i32 i64);

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Str(v)
    }
}

impl From<Map> for Value {
    fn from(v: Map) -> Value {
        Value::Map(v)
    }
}

impl<T: Into<Value>, const N: usize> From<[T; N]> for Value {
    fn from(v: [T; N]) -> Value {
        Value::List(v.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::List(v.into_iter().map(Into::into).collect())
    }
}

/// Shows the value as JSON (for messages; strings escaped, maps in order).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(l) => {
                f.write_str("[")?;
                for (i, v) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Map(m) => {
                f.write_str("{")?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k:?}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The bytes of hex text (either case, no separators); `None` if it is not hex.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let t = text.as_bytes();
    if !t.len().is_multiple_of(2) {
        return None;
    }
    t.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

#[cfg(feature = "json")]
mod json {
    use super::{Map, Value};
    use alloc::string::ToString;

    impl From<&Value> for serde_json::Value {
        fn from(v: &Value) -> serde_json::Value {
            use serde_json::Value as J;
            match v {
                Value::Null => J::Null,
                Value::Bool(b) => J::Bool(*b),
                Value::Int(i) => match (u64::try_from(*i), i64::try_from(*i)) {
                    (Ok(u), _) => J::from(u),
                    (_, Ok(s)) => J::from(s),
                    _ => J::String(i.to_string()),
                },
                Value::Float(x) => serde_json::Number::from_f64(*x).map_or(J::Null, J::Number),
                Value::Str(s) => J::String(s.clone()),
                Value::List(l) => J::Array(l.iter().map(Into::into).collect()),
                Value::Map(m) => {
                    J::Object(m.iter().map(|(k, v)| (k.to_string(), v.into())).collect())
                }
            }
        }
    }

    impl From<Map> for serde_json::Value {
        fn from(m: Map) -> serde_json::Value {
            (&Value::Map(m)).into()
        }
    }

    impl From<&serde_json::Value> for Value {
        fn from(j: &serde_json::Value) -> Value {
            use serde_json::Value as J;
            match j {
                J::Null => Value::Null,
                J::Bool(b) => Value::Bool(*b),
                J::Number(n) => match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => Value::Int(i128::from(u)),
                    (None, Some(i)) => Value::Int(i128::from(i)),
                    _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                J::String(s) => Value::Str(s.clone()),
                J::Array(a) => Value::List(a.iter().map(Into::into).collect()),
                J::Object(o) => {
                    Value::Map(o.iter().map(|(k, v)| (k.clone(), Value::from(v))).collect())
                }
            }
        }
    }

    impl From<&serde_json::Map<alloc::string::String, serde_json::Value>> for Map {
        fn from(o: &serde_json::Map<alloc::string::String, serde_json::Value>) -> Map {
            o.iter().map(|(k, v)| (k.clone(), Value::from(v))).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn maps_keep_order_and_replace_in_place() {
        let mut m = Map::new();
        m.insert("b", 1u8);
        m.insert("a", "x");
        m.insert("b", 2u8);
        let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["b", "a"]);
        assert_eq!(m.get("b"), Some(&Value::Int(2)));
        let v = Value::from(m);
        assert_eq!(v.to_string(), r#"{"b": 2, "a": "x"}"#);
        assert_eq!(Value::from(vec![1u32, 2]).to_string(), "[1, 2]");
    }

    #[test]
    fn hex_round_trips_and_rejects_non_hex() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f]), "00ab7f");
        assert_eq!(unhex("00AB7f"), Some(vec![0x00, 0xab, 0x7f]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(""), Some(vec![]));
    }
}
