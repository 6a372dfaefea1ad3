//! The native half of the Python package `homa` (`homa._native`): the sans-IO
//! `endpoint::Endpoint`, the homa-io `socket::Socket` with the reactor behind the asyncio
//! layer, packet decoding and cutoffs. The Python half (`python/homa`) re-exports these and
//! adds the asyncio API; `_native.pyi` documents every name.

use homa_core::Config;
use homa_core::wire::fields;
use homa_core::workload::{self, Workload};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

mod buffer;
mod convert;
mod endpoint;
mod errors;
mod received;
mod socket;

/// Makes glibc's ``malloc`` keep the memory of freed large blocks for reuse, for the whole
/// process (``homa_io::retain_freed_buffers``): worth calling where messages of hundreds of
/// kilobytes are received, whose fresh buffers otherwise fault their pages in one by one.
/// Returns whether it did (``False``, nothing changed, unless the C library is 64-bit glibc
/// and its thresholds were not already tuned through the environment).
#[pyfunction]
fn retain_freed_buffers() -> bool {
    homa_io::retain_freed_buffers()
}

/// Decodes one Homa packet (from the common header on) into a dict of its fields, with the
/// conformance suite's keys (``type``, ``sport``, ``dport``, ``sender_id``, ...; a DATA
/// payload as hex). Raises ``WireError`` (``kind`` = the error class) for invalid bytes.
#[pyfunction]
fn wire_decode<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let fields = buffer::with_bytes(data, fields::decode)?;
    let fields = fields.map_err(|e| errors::wire(py, e))?;
    convert::map_to_py(py, &fields)
}

/// Encodes a dict of packet fields (``wire_decode``'s keys; only ``type``, ``sport``,
/// ``dport``, ``sender_id`` and the type's own fields are required, the rest take the Linux
/// module's defaults) into packet bytes. A missing or bad field raises ``ValueError``
/// naming it; fields the wire cannot carry raise ``WireError``.
#[pyfunction]
fn wire_encode<'py>(py: Python<'py>, fields: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyBytes>> {
    let m = convert::dict_to_map(fields)?;
    let bytes = fields::encode(&m).map_err(|e| match e {
        fields::FieldsError::Wire(w) => errors::wire(py, w),
        other => PyValueError::new_err(other.to_string()),
    })?;
    Ok(PyBytes::new(py, &bytes))
}

/// Unscheduled priority cutoffs for a workload (``homa_core::workload``): the
/// top ``unsched_levels`` of ``num_priorities`` levels carry unscheduled packets, split so
/// each level carries about the same bytes; shorter messages get higher levels. Returns the
/// 8 entries of ``unsched_cutoffs``, ready for ``Endpoint(unsched_cutoffs=...)``.
///
/// ``workload``: a built-in name (``"w1"`` .. ``"w5"``, the Homa paper's), the path of a CDF
/// file (``size cumulative_probability`` per line), or a sequence of ``(size,
/// cumulative_probability)`` pairs. ``unsched_levels`` defaults to the levels above
/// ``max_sched_prio`` of the configuration (4 with the defaults). Other keyword arguments
/// are ``Config`` fields (``unsched_bytes``, ``mtu``, ``num_priorities``...).
#[pyfunction]
#[pyo3(signature = (workload, unsched_levels = None, **config))]
fn cutoffs_for_workload(
    py: Python<'_>,
    workload: &Bound<'_, PyAny>,
    unsched_levels: Option<&Bound<'_, PyAny>>,
    config: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<u32>> {
    let mut c = Config::default();
    convert::apply_config(py, &mut c, config, &[])?;
    let parsed = if let Ok(name) = workload.cast::<PyString>() {
        Workload::load(&name.to_cow()?)
    } else {
        let pairs: Vec<(u64, f64)> = workload.extract().map_err(|_| {
            PyTypeError::new_err(
                "workload must be a name (\"w1\"..\"w5\"), a path, or a sequence of (size, cumulative_probability) pairs",
            )
        })?;
        let text: String = pairs.iter().map(|(s, p)| format!("{s} {p}\n")).collect();
        Workload::parse("custom", &text)
    };
    let w = parsed.map_err(|e| PyValueError::new_err(format!("workload: {e}")))?;
    let levels = match unsched_levels {
        Some(l) if !l.is_none() => {
            let l: u8 = convert::int(l, "unsched_levels")?;
            if l == 0 || l > c.num_priorities {
                return Err(PyValueError::new_err(format!(
                    "unsched_levels must be 1..={} (num_priorities), not {l}",
                    c.num_priorities
                )));
            }
            l
        }
        _ => c.num_priorities - c.max_sched_prio() - 1,
    };
    Ok(workload::cutoffs_for_workload(&w, &c, levels).to_vec())
}

/// The largest message the Linux module carries (1,000,000 bytes), and the default
/// `max_message_length`.
const MAX_MESSAGE_LENGTH: u32 = homa_core::wire::MAX_MESSAGE_LENGTH;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<endpoint::Endpoint>()?;
    m.add_class::<endpoint::ServerRpc>()?;
    m.add_class::<endpoint::Transmit>()?;
    m.add_class::<endpoint::RequestReceived>()?;
    m.add_class::<endpoint::ResponseReceived>()?;
    m.add_class::<endpoint::RpcFailed>()?;
    m.add_class::<socket::Socket>()?;
    m.add_class::<socket::Request>()?;
    m.add_class::<socket::Replied>()?;
    m.add_class::<socket::Reactor>()?;
    m.add_class::<socket::Poller>()?;
    m.add_function(wrap_pyfunction!(wire_decode, m)?)?;
    m.add_function(wrap_pyfunction!(wire_encode, m)?)?;
    m.add_function(wrap_pyfunction!(cutoffs_for_workload, m)?)?;
    m.add_function(wrap_pyfunction!(retain_freed_buffers, m)?)?;
    m.add("MAX_MESSAGE_LENGTH", MAX_MESSAGE_LENGTH)?;
    m.add("MIN_EPHEMERAL_PORT", homa_core::MIN_EPHEMERAL_PORT)?;
    m.add("CONFIG_FIELDS", convert::config_names())?;
    Ok(())
}
