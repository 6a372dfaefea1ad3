//! Conversions between Python values and the core's: addresses, integers with clear errors,
//! plain data (`homa_core::Value`: packet fields, counters), `Config` (by the core's field
//! table).

use std::net::{IpAddr, SocketAddr};

use homa_core::config::{FIELDS, Field, Kind};
use homa_core::{Config, Map, Value};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

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
            "{name} = {obj} is out of range: expected a number between {} and {}",
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

/// A destination as given: an IP address and port, or a host name and port.
pub(crate) enum Dest {
    /// An IP address literal and a port.
    Addr(SocketAddr),
    /// A name to resolve (`"localhost"`, a DNS name) and a port.
    Name(String, u16),
}

/// A transport address: a `(host, port)` tuple (4-tuples of IPv6 sockets are accepted, the
/// flow info and scope ignored) or a `"host:port"` / `"[v6]:port"` string; the host an IP
/// address or a name.
pub(crate) fn dest(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Dest> {
    const EXPECTED: &str =
        "expected \"host:port\" (\"a.b.c.d:port\", \"[v6]:port\", \"name:port\")";
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_cow()?;
        let s: &str = &s;
        if let Ok(a) = s.parse() {
            return Ok(Dest::Addr(a));
        }
        let named = s.rsplit_once(':').filter(|(h, _)| is_host_name(h));
        let Some((host, port)) = named else {
            return Err(PyValueError::new_err(format!(
                "{name} {s:?} is not an address: {EXPECTED}"
            )));
        };
        let port = port.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "{name} {s:?}: the port must be a number between 0 and 65535"
            ))
        })?;
        return Ok(Dest::Name(host.into(), port));
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
        let host = host.to_cow()?;
        let host: &str = &host;
        let port: u16 = int(&t.get_item(1)?, &format!("{name} port"))?;
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Dest::Addr(SocketAddr::new(ip, port)));
        }
        if !is_host_name(host) {
            return Err(PyValueError::new_err(format!(
                "{name}: host {host:?} is neither an IP address nor a host name"
            )));
        }
        return Ok(Dest::Name(host.into(), port));
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be a (host, port) tuple or a \"host:port\" string, not {}",
        type_name(obj)
    )))
}

/// Whether `host` can be a host name (letters, digits, `-`, `.`, `_`).
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// [`dest`] for the sans-IO `Endpoint`, which takes IP addresses only.
pub(crate) fn addr(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<SocketAddr> {
    match dest(obj, name)? {
        Dest::Addr(a) => Ok(a),
        Dest::Name(host, _) => Err(PyValueError::new_err(format!(
            "{name}: the sans-IO Endpoint takes IP addresses; resolve {host:?} first \
             (socket.getaddrinfo)"
        ))),
    }
}

/// The addresses `host` resolves to, by the system resolver (blocking, without the GIL).
fn lookup(py: Python<'_>, host: &str, port: u16) -> PyResult<Vec<SocketAddr>> {
    let found = py.detach(|| std::net::ToSocketAddrs::to_socket_addrs(&(host, port)));
    let found = found.map_err(|e| {
        errors::new(py, "InvalidArgumentError", None, format!("cannot resolve {host:?}: {e}"))
    })?;
    Ok(found.collect())
}

/// `dest` as an address of the socket's family (`v6`), a name resolved to the first such
/// address `socket.getaddrinfo` would give.
pub(crate) fn resolve(py: Python<'_>, dest: Dest, v6: bool) -> PyResult<SocketAddr> {
    let (host, port) = match dest {
        Dest::Addr(a) => return Ok(a),
        Dest::Name(host, port) => (host, port),
    };
    let found = lookup(py, &host, port)?;
    found.iter().copied().find(|a| a.is_ipv6() == v6).ok_or_else(|| {
        let family = if v6 { "IPv6" } else { "IPv4" };
        let got = found.first().map_or("nothing".into(), |a| a.ip().to_string());
        errors::new(
            py,
            "InvalidArgumentError",
            Some("address_family"),
            format!("{host:?} has no {family} address (it resolves to {got}), the socket's family"),
        )
    })
}

/// The address to bind for `host`: an IP address, or a name's first IPv4 address, else its
/// first address (`"localhost"` is 127.0.0.1).
pub(crate) fn bind_ip(py: Python<'_>, host: &str) -> PyResult<IpAddr> {
    if let Ok(ip) = host.parse() {
        return Ok(ip);
    }
    let found = lookup(py, host, 0)?;
    let first = found.iter().find(|a| a.is_ipv4()).or(found.first());
    first.map(|a| a.ip()).ok_or_else(|| {
        errors::new(py, "InvalidArgumentError", None, format!("host {host:?} has no address"))
    })
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

/// A core value as plain Python data (int, float, str, bool, None, list, dict).
pub(crate) fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Float(x) => PyFloat::new(py, *x).into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::List(a) => {
            let items = a.iter().map(|x| value_to_py(py, x)).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Map(m) => map_to_py(py, m)?.into_any(),
    })
}

/// A core map as a dict (keys in the map's order).
pub(crate) fn map_to_py<'py>(py: Python<'py>, m: &Map) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in m.iter() {
        d.set_item(k, value_to_py(py, v)?)?;
    }
    Ok(d)
}

/// Plain Python data as a core value (for `homa.wire.encode` and config fields).
pub(crate) fn py_to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        let i: i128 = obj.extract().map_err(|_| {
            PyValueError::new_err(format!("integer {obj} does not fit in 128 bits"))
        })?;
        return Ok(Value::Int(i));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::Str(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        return Ok(Value::Map(dict_to_map(d)?));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items = obj.try_iter()?.map(|x| py_to_value(&x?)).collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::List(items));
    }
    Err(PyTypeError::new_err(format!(
        "expected plain data (dict, list, str, int, bool, None), not {}",
        type_name(obj)
    )))
}

pub(crate) fn dict_to_map(d: &Bound<'_, PyDict>) -> PyResult<Map> {
    let mut m = Map::new();
    for (k, v) in d.iter() {
        let Ok(k) = k.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "dict keys must be str, not {}",
                type_name(&k)
            )));
        };
        m.insert(k.to_cow()?.into_owned(), py_to_value(&v)?);
    }
    Ok(m)
}

/// Every `Config` field name (for messages and `Endpoint.config`), from the core's table.
pub(crate) fn config_names() -> Vec<&'static str> {
    FIELDS.iter().map(|f| f.name).collect()
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
        let Some(field) = Field::named(&key) else {
            return Err(PyTypeError::new_err(format!(
                "unknown config field `{key}`; the fields are: {}",
                config_names().join(", ")
            )));
        };
        let value = config_value(field, &v)?;
        (field.set)(config, &value).map_err(|e| errors::config(py, &e))?;
    }
    config.validate().map_err(|e| errors::config(py, &e))
}

/// `v` as the value for `field`: an int, or for `unsched_cutoffs` a sequence of 8 ints
/// (anything else is a `TypeError`; the range is the field's to check).
fn config_value(field: &Field, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let name = field.name;
    let int = |x: &Bound<'_, PyAny>, what: &str| -> PyResult<Value> {
        if x.is_instance_of::<PyBool>() || !x.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "{what} must be an int, not {}",
                type_name(x)
            )));
        }
        Ok(Value::Int(
            x.extract()
                .map_err(|_| PyValueError::new_err(format!("{what} = {x} is out of range")))?,
        ))
    };
    if field.kind != Kind::Cutoffs {
        return int(v, name);
    }
    if v.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!("{name} must be a sequence of 8 ints, not str")));
    }
    let items: Vec<Bound<'_, PyAny>> = v
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{name} must be a sequence of 8 ints")))?
        .collect::<PyResult<_>>()?;
    if items.len() != 8 {
        return Err(PyValueError::new_err(format!("{name} needs 8 entries, got {}", items.len())));
    }
    Ok(Value::List(
        items.iter().map(|x| int(x, &format!("{name} entry"))).collect::<PyResult<_>>()?,
    ))
}

/// A `Config` as a dict of its fields.
pub(crate) fn config_to_py<'py>(py: Python<'py>, c: &Config) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for f in FIELDS {
        d.set_item(f.name, value_to_py(py, &(f.get)(c))?)?;
    }
    Ok(d)
}
