//! Messages to send, taken from any object with the buffer protocol.
//!
//! A read-only C-contiguous buffer (bytes, a read-only memoryview, a numpy array with
//! `writeable=False`) is exported once with `PyObject_GetBuffer` and the export is kept
//! alive inside a [`Payload::shared`] until homa is done with the bytes (the response
//! arrived, or the server's response was acknowledged): no copy. The driver thread reads
//! those bytes without the GIL while Python runs, so a buffer Python may write meanwhile
//! (bytearray, array.array, a writable numpy array or memoryview) is copied once instead:
//! reading bytes another thread writes is a data race. A read-only export of memory that
//! something else still writes (a read-only view of a bytearray that is then changed)
//! breaks the promise the read-only flag makes; `bytes` always keep it. A non-contiguous
//! buffer is copied once too.
//!
//! Releasing an export needs the GIL, but the last owner of a payload is often a homa-io
//! driver thread, which must never wait for the GIL (a Python thread holding the GIL may be
//! waiting for the endpoint lock that thread holds). So a view dropped without the GIL goes
//! to a queue, released by the next call into this module that holds the GIL.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use homa_core::Payload;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// CPython's `Py_buffer`. The buffer protocol is declared here rather than taken from
/// pyo3: the wheel is built for the stable ABI of Python 3.9 and later, which gained the
/// protocol only in 3.11, with this very layout (unchanged since 3.3), and whose earlier
/// versions export the same functions.
#[repr(C)]
pub(crate) struct PyBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

const PYBUF_SIMPLE: c_int = 0;

// SAFETY: the signatures are CPython's (Include/pybuffer.h, Include/pystate.h).
unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut PyBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBuffer);
    fn PyGILState_Check() -> c_int;
}

/// A buffer export: the bytes at `buf..buf+len`, valid until released.
struct View(Box<PyBuffer>);

// SAFETY: the exported memory stays valid and unmoved until `PyBuffer_Release`; we only read
// it. The view is released with the GIL held (`release` or `release_pending`).
unsafe impl Send for View {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for View {}

/// Views dropped by threads without the GIL, waiting for someone who has it.
static PENDING: Mutex<Vec<View>> = Mutex::new(Vec::new());
static ANY_PENDING: AtomicBool = AtomicBool::new(false);

impl View {
    fn bytes(&self) -> &[u8] {
        if self.0.len <= 0 || self.0.buf.is_null() {
            return &[];
        }
        // SAFETY: the export guarantees `len` readable bytes at `buf` while it is held.
        unsafe { std::slice::from_raw_parts(self.0.buf as *const u8, self.0.len as usize) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: PyGILState_Check may be called without the GIL.
        if unsafe { PyGILState_Check() } == 1 {
            // SAFETY: we hold the GIL; the view is a live export.
            unsafe { PyBuffer_Release(&mut *self.0) };
            return;
        }
        let view = View(std::mem::replace(&mut self.0, Box::new(empty_view())));
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        pending.push(view);
        ANY_PENDING.store(true, Ordering::Release);
        // The empty view left behind has obj == NULL: releasing it is a no-op.
    }
}

fn empty_view() -> PyBuffer {
    // SAFETY: Py_buffer is a plain C struct; all-zero is its "no export" state.
    unsafe { std::mem::zeroed() }
}

/// Releases the views other threads dropped. Cheap when there are none.
pub(crate) fn release_pending(_py: Python<'_>) {
    if !ANY_PENDING.load(Ordering::Acquire) {
        return;
    }
    let views = {
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        ANY_PENDING.store(false, Ordering::Release);
        std::mem::take(&mut *pending)
    };
    // Dropped with the GIL held (the `Python` token proves it): each is released now.
    drop(views);
}

/// `obj`'s bytes in one piece: an export of a C-contiguous buffer, or for a strided one
/// (e.g. a numpy slice) a contiguous copy. Anything without the buffer protocol (str, int,
/// list, ...) is a `TypeError`. The export may be writable (see [`payload`]).
enum Contiguous<'py> {
    Export(View),
    Copy(Bound<'py, PyBytes>),
}

fn contiguous<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Contiguous<'py>> {
    let mut raw = Box::new(empty_view());
    // SAFETY: obj is a live object; raw is writable storage for one Py_buffer.
    let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *raw, PYBUF_SIMPLE) };
    if rc == 0 {
        return Ok(Contiguous::Export(View(raw)));
    }
    // The failed export left an exception set: clear it (a copy or a TypeError follows).
    drop(PyErr::fetch(obj.py()));
    // A strided buffer still makes a memoryview; anything else is not bytes-like.
    match obj.py().import("builtins")?.getattr("memoryview")?.call1((obj,)) {
        Ok(view) => Ok(Contiguous::Copy(view.call_method0("tobytes")?.cast_into::<PyBytes>()?)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "a message must be a bytes-like object (bytes, bytearray, memoryview, numpy array...), not {}",
            crate::convert::type_name(obj)
        ))),
    }
}

/// The payload for a message in `obj`: zero-copy for read-only contiguous buffers, one copy
/// otherwise (see the module docs).
pub(crate) fn payload(obj: &Bound<'_, PyAny>) -> PyResult<Payload> {
    release_pending(obj.py());
    match contiguous(obj)? {
        Contiguous::Export(view) if view.0.readonly != 0 => {
            Ok(Payload::shared(Arc::new(Shared(view))))
        }
        // Writable: copied while the GIL keeps Python from changing it, then released.
        Contiguous::Export(view) => Ok(Payload::from(view.bytes().to_vec())),
        // The copy is a `bytes`: kept alive by its own export, not copied again.
        Contiguous::Copy(bytes) => payload(bytes.as_any()),
    }
}

/// Runs `f` on `obj`'s bytes, for callers that only read them during the call, with the GIL
/// held (a received packet): no payload is built around them, and no copy is needed even
/// of a writable buffer.
pub(crate) fn with_bytes<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    Ok(match contiguous(obj)? {
        Contiguous::Export(view) => f(view.bytes()),
        Contiguous::Copy(bytes) => f(bytes.as_bytes()),
    })
}

/// The export as the core's shared payload.
struct Shared(View);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}
