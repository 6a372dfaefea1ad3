//! Rust errors as the Python exceptions of `homa.errors`: `HomaError` and its subclasses,
//! each carrying a stable `kind` (the core's snake-case error names, e.g. `port_in_use`).

use homa_core::{ApiError, ConfigError};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// An instance of exception class `class` (a name in `homa.errors`) with `message`, and
/// `kind` set when given.
pub(crate) fn new(py: Python<'_>, class: &str, kind: Option<&str>, message: String) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let module = ERRORS.get_or_try_init(py, || py.import("homa.errors").map(Bound::unbind))?;
        let exc = module.bind(py).getattr(class)?.call1((message.clone(),))?;
        if let Some(kind) = kind {
            exc.setattr("kind", kind)?;
        }
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|e| {
        PyRuntimeError::new_err(format!("{message} (and homa.errors failed to load: {e})"))
    })
}

/// A misuse of the endpoint API.
pub(crate) fn api(py: Python<'_>, e: ApiError) -> PyErr {
    let kind = e.name();
    let class = match e {
        ApiError::MessageLength { len, max } if len > max as usize => "MessageTooLargeError",
        ApiError::PortInUse(_) => "PortInUseError",
        ApiError::UnknownRpc(_) => "PeerUnknownError",
        ApiError::NoEphemeralPort | ApiError::TooManyPeers | ApiError::TxBufferFull => {
            "ResourceLimitError"
        }
        _ => "InvalidArgumentError",
    };
    new(py, class, Some(kind), e.to_string())
}

/// A configuration value out of range: `ConfigError` (a `ValueError`) naming the field.
pub(crate) fn config(py: Python<'_>, e: &ConfigError) -> PyErr {
    config_field(py, e.field, e.to_string())
}

/// `ConfigError` with `message`, its `field` attribute set to `field`.
pub(crate) fn config_field(py: Python<'_>, field: &str, message: String) -> PyErr {
    let err = new(py, "ConfigError", None, message);
    let _ = err.value(py).setattr("field", field);
    err
}

/// A socket error.
pub(crate) fn io(py: Python<'_>, e: homa_io::Error) -> PyErr {
    use homa_io::Error as E;
    let message = e.to_string();
    match e {
        E::AddressFamily(_) => new(py, "InvalidArgumentError", Some("address_family"), message),
        E::SharedPort(_) => new(py, "InvalidArgumentError", Some("shared_port"), message),
        E::Unreachable(_) => new(py, "UnreachableError", None, message),
        E::TimedOut => new(py, "TimeoutError", None, message),
        E::PeerSilent(_) => new(py, "TimeoutError", Some("peer_silent"), message),
        E::Aborted => new(py, "AbortedError", None, message),
        E::Shutdown => new(py, "ShutdownError", None, message),
        E::MissingCapability { .. } => new(py, "MissingCapabilityError", None, message),
        E::Config(c) => config(py, &c),
        E::Api(api_error) => api(py, api_error),
        E::Io(io) if io.kind() == std::io::ErrorKind::AddrInUse => {
            new(py, "PortInUseError", Some("port_in_use"), message)
        }
        E::Io(io) => PyErr::from(io),
        other => new(py, "HomaError", None, other.to_string()),
    }
}

/// Bytes that are not a valid Homa packet: `WireError` (a `ValueError`) whose `kind` is the
/// conformance error class (`truncated`, `unknown_type`, ...).
pub(crate) fn wire(py: Python<'_>, e: homa_core::wire::Error) -> PyErr {
    new(py, "WireError", Some(e.class()), e.to_string())
}

/// The socket is closed.
pub(crate) fn closed(py: Python<'_>) -> PyErr {
    new(py, "ShutdownError", None, "the socket is closed".into())
}
