//! Conversions between Python values and the core's: addresses, integers with clear errors,
//! JSON-like values (the conformance suite's canonical packet fields), `Config`.

use std::net::{IpAddr, SocketAddr};

use homa_core::Config;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

use crate::errors;

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string())
}

/// An integer argument in `T`'s range: `TypeError` for a non-int (bools included),
/// `ValueError` naming the argument when out of range.
pub(crate) fn int<T>(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<T>
where
    T: TryFrom<i128> + num_bounds::Bounds,
{
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!("{name} must be an int, not {}", type_name(obj))));
    }
    let out_of_range = || {
        PyValueError::new_err(format!(
            "{name} = {obj} is out of range {}..={}",
            T::MIN_I128,
            T::MAX_I128
        ))
    };
    let v: i128 = obj.extract().map_err(|_| out_of_range())?;
    T::try_from(v).map_err(|_| out_of_range())
}

/// Integer bounds for messages.
pub(crate) mod num_bounds {
    pub(crate) trait Bounds {
        const MIN_I128: i128;
        const MAX_I128: i128;
    }
    macro_rules! bounds {
        ($($t:ty)*) => {$(
            impl Bounds for $t {
                const MIN_I128: i128 = <$t>::MIN as i128;
                const MAX_I128: i128 = <$t>::MAX as i128;
            }
        )*};
    }
    bounds!(u8 u16 u32 u64);
}

/// A transport address: a `(host, port)` tuple (4-tuples of IPv6 sockets are accepted, the
/// flow info and scope ignored) or a `"host:port"` / `"[v6]:port"` string. The host must be
/// an IP address literal: homa does not resolve names.
pub(crate) fn addr(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<SocketAddr> {
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_str()?;
        return s.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "{name} {s:?} is not an address: expected \"a.b.c.d:port\" or \"[v6]:port\""
            ))
        });
    }
    if let Ok(t) = obj.cast::<PyTuple>()
        && (t.len() == 2 || t.len() == 4)
    {
        let host = t.get_item(0)?;
        let Ok(host) = host.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "{name}: the host must be a str, not {}",
                type_name(&host)
            )));
        };
        let host = host.to_str()?;
        let ip: IpAddr = host.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "{name}: host {host:?} is not an IP address literal (homa does not resolve names)"
            ))
        })?;
        let port: u16 = int(&t.get_item(1)?, &format!("{name} port"))?;
        return Ok(SocketAddr::new(ip, port));
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be a (host, port) tuple or a \"host:port\" string, not {}",
        type_name(obj)
    )))
}

/// A socket address as Python's socket module gives it: `(host, port)`.
pub(crate) fn addr_to_py<'py>(py: Python<'py>, a: SocketAddr) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [a.ip().to_string().into_pyobject(py)?.into_any(), a.port().into_pyobject(py)?.into_any()],
    )
}

/// A socket address as Python shows the tuple `addr_to_py` makes: `('198.18.0.1', 4000)`.
pub(crate) fn addr_repr(a: SocketAddr) -> String {
    format!("('{}', {})", a.ip(), a.port())
}

/// A JSON value as plain Python data (int, float, str, bool, None, list, dict).
pub(crate) fn json_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let items = a.iter().map(|x| json_to_py(py, x)).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Object(m) => map_to_py(py, m)?.into_any(),
    })
}

/// A JSON object as a dict (keys in the object's order).
pub(crate) fn map_to_py<'py>(
    py: Python<'py>,
    m: &Map<String, Value>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in m {
        d.set_item(k, json_to_py(py, v)?)?;
    }
    Ok(d)
}

/// Plain Python data as JSON (for `homa.wire.encode`).
pub(crate) fn py_to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        let i: i64 = obj
            .extract()
            .map_err(|_| PyValueError::new_err(format!("integer {obj} does not fit in 64 bits")))?;
        return Ok(Value::from(i));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(serde_json::Number::from_f64(f.value()).map_or(Value::Null, Value::Number));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        return Ok(Value::Object(dict_to_json(d)?));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items = obj.try_iter()?.map(|x| py_to_json(&x?)).collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::Array(items));
    }
    Err(PyTypeError::new_err(format!(
        "expected JSON-like data (dict, list, str, int, bool, None), not {}",
        type_name(obj)
    )))
}

pub(crate) fn dict_to_json(d: &Bound<'_, PyDict>) -> PyResult<Map<String, Value>> {
    let mut m = Map::new();
    for (k, v) in d.iter() {
        let Ok(k) = k.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "dict keys must be str, not {}",
                type_name(&k)
            )));
        };
        m.insert(k.to_str()?.to_owned(), py_to_json(&v)?);
    }
    Ok(m)
}

/// Applies `f!(name, kind)` to every `Config` field, in declaration order.
macro_rules! config_fields {
    ($f:ident) => {
        $f!(unsched_bytes u32; mtu u32; outer_header_bytes u32; link_mbps u32;
            max_nic_est_backlog_usecs u32; pacer_fifo_fraction u32; defer_min_bytes u32;
            wmem_max u64; window u32; max_incoming u32; max_overcommit u8;
            fifo_grant_increment u32; grant_fifo_fraction u32; num_priorities u8;
            cutoff_version u16; tick_usecs u32; resend_ticks u32; resend_interval u32;
            timeout_ticks u32; request_ack_ticks u32; ack_timeout_ticks u32;
            max_message_length u32; max_peers u32;
            max_rpcs_per_peer u32; max_rx_bytes u64; max_gaps u32; max_pending_control u32;
            first_client_id u64; seed u64)
    };
}

/// Every `Config` field name (for messages and `Endpoint.config`).
pub(crate) fn config_names() -> Vec<&'static str> {
    let mut names = Vec::new();
    macro_rules! collect {
        ($($name:ident $t:ty);*) => { $(names.push(stringify!($name));)* };
    }
    config_fields!(collect);
    names.push("unsched_cutoffs");
    names
}

/// Sets the fields named in `kwargs` on `config` (unknown names are a `TypeError`, values out
/// of range a `ConfigError` naming the field), skipping the names in `skip`, then validates.
pub(crate) fn apply_config(
    py: Python<'_>,
    config: &mut Config,
    kwargs: Option<&Bound<'_, PyDict>>,
    skip: &[&str],
) -> PyResult<()> {
    let Some(kwargs) = kwargs else {
        return config.validate().map_err(|e| errors::config(py, &e));
    };
    for (k, v) in kwargs.iter() {
        let key: String = k.extract()?;
        if skip.contains(&key.as_str()) {
            continue;
        }
        let field_error = |e: PyErr| -> PyErr {
            if e.is_instance_of::<PyValueError>(py) {
                errors::config_field(py, &key, format!("invalid config `{key}`: {}", e.value(py)))
            } else {
                e
            }
        };
        macro_rules! set {
            ($($name:ident $t:ty);*) => {
                match key.as_str() {
                    $(stringify!($name) => {
                        config.$name = int::<$t>(&v, stringify!($name)).map_err(field_error)?;
                    })*
                    "unsched_cutoffs" => {
                        config.unsched_cutoffs = cutoffs(&v).map_err(field_error)?;
                    }
                    other => {
                        return Err(PyTypeError::new_err(format!(
                            "unknown config field `{other}`; the fields are: {}",
                            config_names().join(", ")
                        )));
                    }
                }
            };
        }
        config_fields!(set);
    }
    config.validate().map_err(|e| errors::config(py, &e))
}

fn cutoffs(v: &Bound<'_, PyAny>) -> PyResult<[u32; 8]> {
    if v.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err("unsched_cutoffs must be a sequence of 8 ints, not str"));
    }
    let items: Vec<Bound<'_, PyAny>> = v
        .try_iter()
        .map_err(|_| PyTypeError::new_err("unsched_cutoffs must be a sequence of 8 ints"))?
        .collect::<PyResult<_>>()?;
    if items.len() != 8 {
        return Err(PyValueError::new_err(format!(
            "unsched_cutoffs needs 8 entries, got {}",
            items.len()
        )));
    }
    let mut out = [0u32; 8];
    for (slot, x) in out.iter_mut().zip(&items) {
        *slot = int(x, "unsched_cutoffs entry")?;
    }
    Ok(out)
}

/// A `Config` as a dict of its fields.
pub(crate) fn config_to_py<'py>(py: Python<'py>, c: &Config) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    macro_rules! put {
        ($($name:ident $t:ty);*) => {
            $(d.set_item(stringify!($name), c.$name)?;)*
        };
    }
    config_fields!(put);
    d.set_item("unsched_cutoffs", c.unsched_cutoffs.to_vec())?;
    Ok(d)
}
