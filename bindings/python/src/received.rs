//! Received messages reach Python without a copy: as a read-only `memoryview` over the very
//! buffer homa-io received the message into.
//!
//! The view's exporter is a small object of the hidden type `homa._native.ReceivedBuffer`
//! that owns the message (a `homa_io::Message`, lent: counted against the socket's
//! `max_rx_bytes`) and gives it back when the last view over it is gone, even after the
//! socket closed. Its type is made
//! here with `PyType_FromSpec` and a `bf_getbuffer` slot rather than as a pyo3 class: pyo3
//! offers the buffer protocol to the stable ABI only from Python 3.11, while the wheel is
//! for 3.9 and later, whose `PyType_FromSpec` takes the same slot.

use std::ffi::{c_int, c_uint, c_void};
use std::mem::ManuallyDrop;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::buffer::PyBuffer;

// SAFETY: CPython's signature (Include/pybuffer.h), exported by every CPython 3.
unsafe extern "C" {
    fn PyBuffer_FillInfo(
        view: *mut PyBuffer,
        obj: *mut ffi::PyObject,
        buf: *mut c_void,
        len: isize,
        readonly: c_int,
        flags: c_int,
    ) -> c_int;
}

/// An instance of `ReceivedBuffer`: the object header, then the message it owns.
#[repr(C)]
struct ReceivedBuffer {
    ob_base: ffi::PyObject,
    message: ManuallyDrop<homa_io::Message>,
}

static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `message` as a read-only memoryview over its own buffer: no copy.
pub(crate) fn message(py: Python<'_>, message: homa_io::Message) -> PyResult<Bound<'_, PyAny>> {
    let tp = TYPE.get_or_try_init(py, || new_type(py))?;
    // SAFETY: `tp` is our heap type, whose instances are `ReceivedBuffer`s; the allocation
    // is zeroed, and the message is written before anything else can see the object.
    let owner = unsafe {
        let obj = ffi::PyType_GenericAlloc(tp.as_ptr().cast(), 0);
        let owner = Bound::from_owned_ptr_or_err(py, obj)?;
        ptr::write(&raw mut (*obj.cast::<ReceivedBuffer>()).message, ManuallyDrop::new(message));
        owner
    };
    // SAFETY: `owner` is a live object; the call returns a new reference or NULL with an
    // exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyMemoryView_FromObject(owner.as_ptr())) }
}

fn new_type(py: Python<'_>) -> PyResult<Py<PyType>> {
    let mut slots = [
        ffi::PyType_Slot { slot: ffi::Py_bf_getbuffer, pfunc: get_buffer as *mut c_void },
        ffi::PyType_Slot { slot: ffi::Py_tp_dealloc, pfunc: dealloc as *mut c_void },
        // Only `message` makes them: one made from Python would own no message.
        ffi::PyType_Slot { slot: ffi::Py_tp_new, pfunc: refuse_new as *mut c_void },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc: c"The buffer a message was received into, under a memoryview.".as_ptr()
                as *mut c_void,
        },
        ffi::PyType_Slot { slot: 0, pfunc: ptr::null_mut() },
    ];
    let mut spec = ffi::PyType_Spec {
        name: c"homa._native.ReceivedBuffer".as_ptr(),
        basicsize: c_int::try_from(size_of::<ReceivedBuffer>()).expect("a small struct"),
        itemsize: 0,
        flags: ffi::Py_TPFLAGS_DEFAULT as c_uint,
        slots: slots.as_mut_ptr(),
    };
    // SAFETY: the spec and its slots are valid for the call (CPython copies what it keeps;
    // the name and doc are static).
    let tp = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(&mut spec))? };
    Ok(tp.cast_into::<PyType>()?.unbind())
}

/// `tp_new`: the type cannot be instantiated from Python.
unsafe extern "C" fn refuse_new(
    _tp: *mut ffi::PyTypeObject,
    _args: *mut ffi::PyObject,
    _kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the GIL held; sets an exception and signals it.
    unsafe {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"ReceivedBuffer objects come only from received messages".as_ptr(),
        );
    }
    ptr::null_mut()
}

/// `bf_getbuffer`: a read-only, one-dimensional export of the whole message.
unsafe extern "C" fn get_buffer(
    obj: *mut ffi::PyObject,
    view: *mut PyBuffer,
    flags: c_int,
) -> c_int {
    // SAFETY: CPython calls this with an instance of our type and a view to fill, holding
    // the GIL. The bytes stay put while the export holds `obj` (FillInfo takes a reference),
    // since only `dealloc` frees them.
    unsafe {
        let message = &(*obj.cast::<ReceivedBuffer>()).message;
        let len = isize::try_from(message.len()).expect("a slice's length fits isize");
        PyBuffer_FillInfo(view, obj, message.as_ptr().cast_mut().cast(), len, 1, flags)
    }
}

/// `tp_dealloc`: gives the message back, then the object, then our reference to its heap type.
unsafe extern "C" fn dealloc(obj: *mut ffi::PyObject) {
    // SAFETY: called once, with the GIL, when the last reference (views included) is gone;
    // `obj` is a `ReceivedBuffer` whose message `message` wrote.
    unsafe {
        ManuallyDrop::drop(&mut (*obj.cast::<ReceivedBuffer>()).message);
        let tp = ffi::Py_TYPE(obj);
        let free = ffi::PyType_GetSlot(tp, ffi::Py_tp_free);
        let free = std::mem::transmute::<*mut c_void, ffi::freefunc>(free);
        free(obj.cast());
        ffi::Py_DECREF(tp.cast());
    }
}
