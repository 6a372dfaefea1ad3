//! Runs a socket on Node's event loop, as the Python binding runs one on asyncio's, with
//! homa-io's [`homa_io::Reactor`] holding the pending calls and receives.
//!
//! libuv watches the descriptor of homa-io's [`Poller`](homa_io::Poller) (a `uv_poll_t`);
//! when it is readable, [`on_readable`] drives the socket on the JavaScript thread, which
//! receives and handles what arrived, then settles the promises of the calls and receives
//! that completed. One wake-up of the loop per batch of packets, no other thread involved,
//! as for a TCP socket.
//!
//! While the JavaScript thread is busy (a long synchronous function), homa-io's driver
//! thread receives and answers for it, and it runs Homa's timers: what it completes pokes a
//! `uv_async_t`, whose callback settles it on the loop.
//!
//! While the promise reactions of a turn run, the socket is corked (`Poller::cork`): the
//! replies and calls they send leave together when they are done, in one `sendmmsg`, the
//! equal-sized packets to one peer as one UDP GSO send. With many RPCs in flight this is
//! most of what a call costs the kernel; a call made outside a turn is sent at once.
//!
//! While any promise is pending the poll handle is referenced, so the process waits for
//! it; an idle socket does not keep the process alive.
//!
//! Busy polling (`busyPollMs`, 50 µs by default, adaptive: homa-io's reactor says when),
//! as the Linux module does in `recvmsg`: while a window after a call starts or a packet
//! arrives is open, a `uv_idle_t` keeps libuv from sleeping in `epoll_wait`, so a response
//! that comes back within it is handled without the wake-up of a sleeping thread. Other
//! callbacks run as usual meanwhile.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use homa_io::reactor::{Done, Op, Parked};
use napi::bindgen_prelude::{BigInt, ToNapiValue};
use napi::{Error, JsError, Result, sys};

use crate::{NativeRequest, failure, io_error, lock};

/// The few libuv functions we need; Node exports them to native modules.
mod uv {
    use std::ffi::{c_int, c_void};

    pub(super) type Handle = *mut c_void;
    pub(super) const ASYNC: c_int = 1;
    pub(super) const IDLE: c_int = 6;
    pub(super) const POLL: c_int = 8;
    pub(super) const READABLE: c_int = 1;

    unsafe extern "C" {
        pub(super) fn uv_handle_size(kind: c_int) -> usize;
        pub(super) fn uv_handle_set_data(handle: Handle, data: *mut c_void);
        pub(super) fn uv_handle_get_data(handle: Handle) -> *mut c_void;
        pub(super) fn uv_poll_init(lp: *mut napi::sys::uv_loop_s, h: Handle, fd: c_int) -> c_int;
        pub(super) fn uv_poll_start(
            h: Handle,
            events: c_int,
            cb: unsafe extern "C" fn(Handle, c_int, c_int),
        ) -> c_int;
        pub(super) fn uv_poll_stop(h: Handle) -> c_int;
        pub(super) fn uv_async_init(
            lp: *mut napi::sys::uv_loop_s,
            h: Handle,
            cb: unsafe extern "C" fn(Handle),
        ) -> c_int;
        pub(super) fn uv_async_send(h: Handle) -> c_int;
        pub(super) fn uv_idle_init(lp: *mut napi::sys::uv_loop_s, h: Handle) -> c_int;
        pub(super) fn uv_idle_start(h: Handle, cb: unsafe extern "C" fn(Handle)) -> c_int;
        pub(super) fn uv_idle_stop(h: Handle) -> c_int;
        pub(super) fn uv_close(h: Handle, cb: unsafe extern "C" fn(Handle));
        pub(super) fn uv_ref(h: Handle);
        pub(super) fn uv_unref(h: Handle);
    }
}

/// A napi call that must succeed (they fail only on misuse, e.g. the wrong thread).
fn check(status: sys::napi_status, what: &str) -> Result<()> {
    match status {
        sys::Status::napi_ok => Ok(()),
        s => Err(Error::from_reason(format!("{what} failed (napi status {s})"))),
    }
}

/// A libuv handle of `kind`, zeroed, from the C heap (libuv frees nothing itself).
fn new_handle(kind: c_int) -> uv::Handle {
    // SAFETY: uv_handle_size only reads its argument; calloc returns zeroed memory or null.
    let h = unsafe { libc::calloc(1, uv::uv_handle_size(kind)) };
    assert!(!h.is_null(), "out of memory for a libuv handle");
    h
}

/// The libuv loop of `env`'s thread.
fn event_loop(env: sys::napi_env) -> Result<*mut sys::uv_loop_s> {
    let mut lp = ptr::null_mut();
    // SAFETY: env is the current environment; lp receives the loop pointer.
    check(unsafe { sys::napi_get_uv_event_loop(env, &mut lp) }, "napi_get_uv_event_loop")?;
    Ok(lp)
}

/// The async handle that makes the loop look at completions made on other threads (`None`
/// once closed).
type WakeHandle = Arc<Mutex<Option<SendHandle>>>;

#[derive(Debug)]
struct SendHandle(uv::Handle);

// SAFETY: the handle is only passed to uv_async_send, which any thread may call, and only
// while it is open (the mutex in `WakeHandle` guards that).
unsafe impl Send for SendHandle {}

/// A promise to settle, once the reactor is no longer borrowed: creating and settling
/// promises can run JavaScript (async_hooks), which may call back into the socket.
type Settle = (sys::napi_deferred, Done);

/// A socket run by one JavaScript thread's event loop. Lives in an `Rc` shared by the
/// `NativeSocket`, each open libuv handle and the environment's cleanup hook.
pub(crate) struct Reactor {
    env: sys::napi_env,
    socket: Option<homa_io::Socket>,
    poller: Option<homa_io::Poller>,
    poll: uv::Handle,
    wake: uv::Handle,
    /// Keeps the loop from sleeping while it busy-polls: it runs exactly while the
    /// reactor's polling window is open.
    idle: uv::Handle,
    /// The async resource the loop's callbacks run in (for async_hooks and microtasks).
    context: sys::napi_async_context,
    resource: sys::napi_ref,
    /// The pending calls and receives, with their promises (homa-io's reactor).
    ops: homa_io::Reactor<sys::napi_deferred>,
    wake_handle: WakeHandle,
    /// Whether the poll handle keeps the loop alive (while anything is parked).
    referenced: bool,
    /// Whether the environment's cleanup hook is registered (and holds a count).
    hooked: bool,
}

pub(crate) type Shared = Rc<RefCell<Reactor>>;

/// A new promise and its deferred.
fn promise(env: sys::napi_env) -> Result<(sys::napi_deferred, sys::napi_value)> {
    let (mut deferred, mut promise) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: on the JavaScript thread, with out-pointers to locals.
    check(
        unsafe { sys::napi_create_promise(env, &mut deferred, &mut promise) },
        "napi_create_promise",
    )?;
    Ok((deferred, promise))
}

/// Resolves or rejects `deferred` with the outcome `done`.
fn settle(env: sys::napi_env, (deferred, done): Settle) {
    let value = match done {
        Done::Response(Ok(v)) => buffer(env, v),
        Done::Request(Ok(r)) => request(env, r),
        Done::Response(Err(e)) | Done::Request(Err(e)) => {
            return reject(env, deferred, io_error(e));
        }
    };
    match value {
        // SAFETY: the deferred is unsettled and ours; settling frees it.
        Ok(v) => unsafe {
            sys::napi_resolve_deferred(env, deferred, v);
        },
        Err(e) => reject(env, deferred, e),
    }
}

fn reject(env: sys::napi_env, deferred: sys::napi_deferred, e: Error) {
    // SAFETY: on the JavaScript thread; the deferred is unsettled and ours.
    unsafe {
        let error = JsError::from(e).into_value(env);
        sys::napi_reject_deferred(env, deferred, error);
    }
}

/// The async resource for a socket's callbacks: a reference to an object, and the context.
fn async_resource(env: sys::napi_env) -> Result<(sys::napi_ref, sys::napi_async_context)> {
    let (mut resource, mut name, mut object, mut context) =
        (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    let label = "homa.Socket";
    // SAFETY: plain napi calls on the current environment with out-pointers to locals.
    unsafe {
        check(sys::napi_create_object(env, &mut object), "napi_create_object")?;
        let (ptr, len) = (label.as_ptr().cast(), label.len() as isize);
        check(sys::napi_create_string_utf8(env, ptr, len, &mut name), "napi_create_string_utf8")?;
        check(sys::napi_async_init(env, object, name, &mut context), "napi_async_init")?;
        let made = sys::napi_create_reference(env, object, 1, &mut resource);
        if made != sys::Status::napi_ok {
            sys::napi_async_destroy(env, context);
        }
        check(made, "napi_create_reference")?;
    }
    Ok((resource, context))
}

impl Reactor {
    /// Runs `socket` on the loop of `env`'s thread.
    pub(crate) fn start(env: sys::napi_env, socket: homa_io::Socket) -> Result<Shared> {
        let poller = socket.poller().map_err(io_error)?;
        let lp = event_loop(env)?;
        let (poll, wake, idle) =
            (new_handle(uv::POLL), new_handle(uv::ASYNC), new_handle(uv::IDLE));
        // SAFETY: fresh zeroed handles of the right sizes, initialised on the loop's own
        // thread. One that fails to initialise is freed; those that did are closed.
        unsafe {
            let inits = [
                uv::uv_poll_init(lp, poll, poller.fd()),
                uv::uv_async_init(lp, wake, on_wake),
                uv::uv_idle_init(lp, idle),
            ];
            if let Some(&rc) = inits.iter().find(|&&rc| rc != 0) {
                for (h, rc) in [poll, wake, idle].into_iter().zip(inits) {
                    match rc {
                        0 => uv::uv_close(h, on_closed),
                        _ => libc::free(h),
                    }
                }
                return Err(Error::from_reason(format!("a libuv handle failed (error {rc})")));
            }
        }
        let wake_handle: WakeHandle = Arc::new(Mutex::new(Some(SendHandle(wake))));
        let signal = Arc::clone(&wake_handle);
        let wake_loop = move || {
            if let Some(h) = lock(&signal).as_ref() {
                // SAFETY: the async handle is open while it is in the mutex.
                unsafe { uv::uv_async_send(h.0) };
            }
        };
        let ops = homa_io::Reactor::new(wake_loop, socket.busy_poll());
        let (resource, context) = match async_resource(env) {
            Ok(r) => r,
            Err(e) => {
                *lock(&wake_handle) = None;
                // SAFETY: initialised above; their data is still null.
                unsafe { [poll, wake, idle].into_iter().for_each(|h| uv::uv_close(h, on_closed)) };
                return Err(e);
            }
        };
        let reactor = Rc::new(RefCell::new(Reactor {
            env,
            socket: Some(socket),
            poller: Some(poller),
            poll,
            wake,
            idle,
            context,
            resource,
            ops,
            wake_handle,
            referenced: false,
            hooked: false,
        }));
        // SAFETY: the handles are initialised; each now holds one strong count of the
        // reactor, released by `on_closed` (so closing the reactor frees everything).
        unsafe {
            for h in [poll, wake, idle] {
                uv::uv_handle_set_data(h, Rc::into_raw(Rc::clone(&reactor)) as *mut c_void);
                uv::uv_unref(h);
            }
            let started =
                check_uv(uv::uv_poll_start(poll, uv::READABLE, on_readable), "uv_poll_start");
            let hook = Rc::into_raw(Rc::clone(&reactor)) as *mut c_void;
            let hooked = started.and_then(|()| {
                check(sys::napi_add_env_cleanup_hook(env, Some(on_env_exit), hook), "cleanup hook")
            });
            match hooked {
                Ok(()) => reactor.borrow_mut().hooked = true,
                Err(e) => {
                    Rc::decrement_strong_count(hook as *const RefCell<Reactor>);
                    Reactor::close(&reactor, true);
                    return Err(e);
                }
            }
        }
        Ok(reactor)
    }

    pub(crate) fn socket(&self) -> Result<&homa_io::Socket> {
        self.socket.as_ref().ok_or_else(|| failure("shutdown", "the socket is closed"))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.socket.is_none()
    }

    /// A promise settled when the operation `start` begins on the socket completes;
    /// `token` (the caller's, unique among the pending) names it for [`Reactor::cancel`].
    fn park(
        this: &Shared,
        token: u32,
        start: impl FnOnce(&homa_io::Socket) -> Result<Op>,
    ) -> Result<sys::napi_value> {
        let (env, op) = {
            let r = this.borrow();
            (r.env, start(r.socket()?)?)
        };
        let (deferred, promise) = promise(env)?;
        let is_call = matches!(op, Op::Call(_));
        let now = {
            let mut r = this.borrow_mut();
            match r.ops.park(u64::from(token), op, deferred) {
                Parked::Done(deferred, done) => Some((deferred, done)),
                // Closed while the promise was made (by JavaScript it ran).
                Parked::Pending if r.is_closed() => r
                    .ops
                    .cancel(u64::from(token))
                    .map(|d| (d, Done::Response(Err(homa_io::Error::Shutdown)))),
                Parked::Pending => {
                    if is_call {
                        r.busy_poll(false);
                    }
                    r.keep_alive();
                    None
                }
            }
        };
        if let Some(s) = now {
            settle(env, s);
        }
        Ok(promise)
    }

    /// Starts a call (`start` sends it): its promise resolves to the response.
    pub(crate) fn call(
        this: &Shared,
        token: u32,
        start: impl FnOnce(&homa_io::Socket) -> homa_io::Result<homa_io::Call>,
    ) -> Result<sys::napi_value> {
        Reactor::park(this, token, |s| start(s).map(Op::Call).map_err(io_error))
    }

    /// Waits for a request: its promise resolves to `[handle, message, peer, id]`.
    pub(crate) fn recv(this: &Shared, token: u32) -> Result<sys::napi_value> {
        Reactor::park(this, token, |s| Ok(Op::Recv(s.recv_request_async())))
    }

    /// A call started or datagrams arrived: busy-polls if homa-io's reactor says so.
    fn busy_poll(&mut self, arrived: bool) {
        // (True only when a window opens: the idle handle is stopped then.)
        if self.socket.is_some() && self.ops.busy_poll(arrived) {
            // SAFETY: the idle handle is open while the socket is.
            unsafe { uv::uv_idle_start(self.idle, on_idle) };
        }
    }

    /// Stops busy-polling once the reactor's window is over (the idle handle runs this).
    fn maybe_sleep(&mut self) {
        if !self.ops.keep_polling() {
            // SAFETY: the idle handle is open while it is started.
            unsafe { uv::uv_idle_stop(self.idle) };
        }
    }

    /// Aborts parked operation `token` (a call's RPC is forgotten) and rejects its promise
    /// with `aborted`. Returns whether it was still pending.
    pub(crate) fn cancel(this: &Shared, token: u32) -> bool {
        let (env, parked) = {
            let mut r = this.borrow_mut();
            let parked = r.ops.cancel(u64::from(token));
            r.keep_alive();
            (r.env, parked)
        };
        let Some(deferred) = parked else { return false };
        reject(env, deferred, failure("aborted", "the call was aborted"));
        true
    }

    /// The parked operations whose futures were woken and are done.
    fn take_done(&mut self) -> Vec<Settle> {
        let done = self.ops.take_done();
        self.keep_alive();
        done
    }

    /// References the poll handle while promises are pending, so the process waits for
    /// them, and unreferences it when idle.
    fn keep_alive(&mut self) {
        let want = self.ops.pending() > 0 && self.socket.is_some();
        if want != self.referenced {
            // SAFETY: the poll handle is open while the socket is.
            unsafe { if want { uv::uv_ref(self.poll) } else { uv::uv_unref(self.poll) } };
            self.referenced = want;
        }
    }

    /// Closes the socket: stops watching it, shuts it down and, while the environment
    /// lives (`env_alive`), rejects the pending promises with `shutdown` and frees the
    /// async resource. Idempotent.
    pub(crate) fn close(this: &Shared, env_alive: bool) {
        let (env, parked) = {
            let Ok(mut r) = this.try_borrow_mut() else { return };
            let Some(socket) = r.socket.take() else { return };
            // SAFETY: the handles are open (the socket was); the close callbacks free them.
            unsafe {
                uv::uv_poll_stop(r.poll);
                *lock(&r.wake_handle) = None;
                uv::uv_close(r.poll, on_closed);
                uv::uv_close(r.wake, on_closed);
                uv::uv_close(r.idle, on_closed);
            }
            r.poller = None;
            socket.shutdown();
            if env_alive {
                // SAFETY: created in `start` on this environment; freed once (the socket
                // was open).
                unsafe {
                    sys::napi_async_destroy(r.env, r.context);
                    sys::napi_delete_reference(r.env, r.resource);
                }
            }
            (r.env, r.ops.cancel_all())
        };
        if env_alive {
            for deferred in parked {
                reject(env, deferred, failure("shutdown", "the socket is closed"));
            }
        }
    }

    /// Drives the socket (after reading its error queue, when libuv saw an error
    /// condition) and settles what completed, inside a callback scope so that promise
    /// reactions (microtasks) run when it ends, as after any libuv callback.
    fn turn(this: &Shared, drive: bool, errored: bool) {
        let (env, resource, context) = {
            let r = this.borrow();
            if r.is_closed() {
                return;
            }
            (r.env, r.resource, r.context)
        };
        let (mut handles, mut object, mut scope) =
            (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: called by libuv on the JavaScript thread, outside any JavaScript: the
        // scopes are opened and closed here, in order.
        unsafe {
            sys::napi_open_handle_scope(env, &mut handles);
            sys::napi_get_reference_value(env, resource, &mut object);
            sys::napi_open_callback_scope(env, object, context, &mut scope);
        }
        let done = {
            let mut r = this.borrow_mut();
            let got = match &r.poller {
                Some(p) if drive => r.ops.drive(p, errored),
                _ => 0,
            };
            if got > 0 {
                r.busy_poll(true);
            }
            // What the promise reactions send (replies, the next calls) leaves together
            // when they are done: one system call, equal-sized packets as one GSO send.
            if let Some(p) = &r.poller {
                p.cork();
            }
            r.take_done()
        };
        for s in done {
            settle(env, s);
        }
        // SAFETY: the scopes opened above; closing the callback scope runs microtasks,
        // which may call back into the reactor (it is no longer borrowed).
        unsafe {
            sys::napi_close_callback_scope(env, scope);
            sys::napi_close_handle_scope(env, handles);
        }
        if let Some(p) = &this.borrow().poller {
            p.uncork();
        }
    }

    /// homa-io's warnings (e.g. a peer sending too long messages), to print once.
    pub(crate) fn take_warnings(&self) -> Vec<String> {
        let from_poller = self.poller.as_ref().map(homa_io::Poller::take_warnings);
        from_poller.unwrap_or_default()
    }
}

/// A request as `[handle, message, peer, id]`: one value, not four calls to fetch them.
fn request(env: sys::napi_env, mut r: homa_io::Request) -> Result<sys::napi_value> {
    let message = buffer(env, r.take_message())?;
    let (peer, id) = (r.peer().to_string(), r.id());
    let handle = NativeRequest { inner: Mutex::new(Some(r)) };
    let mut array = ptr::null_mut();
    // SAFETY: on the JavaScript thread; every value is created in `env` here.
    unsafe {
        let items = [
            NativeRequest::to_napi_value(env, handle)?,
            message,
            String::to_napi_value(env, peer)?,
            BigInt::to_napi_value(env, BigInt::from(id))?,
        ];
        check(
            sys::napi_create_array_with_length(env, items.len(), &mut array),
            "napi_create_array",
        )?;
        for (i, item) in items.into_iter().enumerate() {
            check(sys::napi_set_element(env, array, i as u32, item), "napi_set_element")?;
        }
    }
    Ok(array)
}

/// Messages up to this size reach JavaScript as copies: a new Buffer of copied bytes
/// costs less than an external one (a backing store with a finaliser) until here.
const COPY_BELOW: usize = 16 * 1024;

/// A received message as a Buffer: over the message itself (an external buffer, which
/// keeps the message lent until the garbage collector frees the Buffer, see
/// `homa_io::Message`), or for short messages a copy (see [`COPY_BELOW`]).
pub(crate) fn buffer(env: sys::napi_env, m: homa_io::Message) -> Result<sys::napi_value> {
    if m.len() >= COPY_BELOW {
        let mut value = ptr::null_mut();
        let len = m.len();
        let owner = Box::into_raw(Box::new(m));
        // SAFETY: `owner` is a live, leaked box; the bytes it points to stay put until the
        // finaliser takes the box back, which napi calls once, after the Buffer is gone.
        let status = unsafe {
            let data = (*owner).as_ptr().cast_mut().cast();
            sys::napi_create_external_buffer(
                env,
                len,
                data,
                Some(free_message),
                owner.cast(),
                &mut value,
            )
        };
        if status == sys::Status::napi_ok {
            return Ok(value);
        }
        // SAFETY: napi took no ownership: the box is still ours alone.
        let m = *unsafe { Box::from_raw(owner) };
        // Runtimes that allow no external buffers (Electron) get a copy.
        if status != sys::Status::napi_no_external_buffers_allowed {
            check(status, "napi_create_external_buffer")?;
        }
        return copy(env, &m);
    }
    copy(env, &m)
}

/// `m` copied into a new Buffer.
fn copy(env: sys::napi_env, m: &[u8]) -> Result<sys::napi_value> {
    let (mut data, mut value) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: on the JavaScript thread; copies m.len() bytes from a live slice.
    let status = unsafe {
        sys::napi_create_buffer_copy(env, m.len(), m.as_ptr().cast(), &mut data, &mut value)
    };
    check(status, "napi_create_buffer_copy")?;
    Ok(value)
}

/// Finalises an external Buffer made by [`buffer`]: the message goes back (`hint` is its
/// box).
unsafe extern "C" fn free_message(_env: sys::napi_env, _data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` is the box `buffer` leaked for this Buffer; napi finalises it once.
    drop(unsafe { Box::from_raw(hint.cast::<homa_io::Message>()) });
}

fn check_uv(rc: c_int, what: &str) -> Result<()> {
    match rc {
        0 => Ok(()),
        rc => Err(Error::from_reason(format!("{what} failed (libuv error {rc})"))),
    }
}

/// The reactor a handle's data points to (without taking its strong count).
///
/// # Safety
/// `h` is one of a reactor's open handles, its data set.
unsafe fn reactor_of(h: uv::Handle) -> Shared {
    // SAFETY: the data is an `Rc::into_raw` of the reactor, alive until `on_closed`.
    unsafe {
        let raw = uv::uv_handle_get_data(h) as *const RefCell<Reactor>;
        Rc::increment_strong_count(raw);
        Rc::from_raw(raw)
    }
}

unsafe extern "C" fn on_readable(h: uv::Handle, status: c_int, _events: c_int) {
    // SAFETY: libuv calls this for our open poll handle.
    let reactor = unsafe { reactor_of(h) };
    // An error condition (a refused datagram, queued with the socket's errors): libuv has
    // stopped the handle. Read the errors, then watch again.
    let errored = status < 0;
    Reactor::turn(&reactor, true, errored);
    if errored && !reactor.borrow().is_closed() {
        // SAFETY: the handle is open while the socket is.
        unsafe { uv::uv_poll_start(h, uv::READABLE, on_readable) };
    }
}

unsafe extern "C" fn on_wake(h: uv::Handle) {
    // SAFETY: libuv calls this for our open async handle.
    Reactor::turn(&unsafe { reactor_of(h) }, false, false);
}

unsafe extern "C" fn on_idle(h: uv::Handle) {
    // SAFETY: libuv calls this for our open idle handle.
    let reactor = unsafe { reactor_of(h) };
    if let Ok(mut r) = reactor.try_borrow_mut() {
        r.maybe_sleep();
    }
}

unsafe extern "C" fn on_closed(h: uv::Handle) {
    // SAFETY: the handle is closed: release its count of the reactor (if it was given
    // one) and its memory.
    unsafe {
        let data = uv::uv_handle_get_data(h) as *const RefCell<Reactor>;
        if !data.is_null() {
            drop(Rc::from_raw(data));
        }
        libc::free(h);
    }
}

unsafe extern "C" fn on_env_exit(arg: *mut c_void) {
    // SAFETY: `arg` is the count `start` gave the hook; the environment is going away, so
    // promises are not settled.
    let reactor = unsafe { Rc::from_raw(arg as *const RefCell<Reactor>) };
    reactor.borrow_mut().hooked = false;
    Reactor::close(&reactor, false);
}

/// Removes the cleanup hook after an ordinary close (the hook holds a count).
pub(crate) fn forget_hook(this: &Shared) {
    let env = {
        let mut r = this.borrow_mut();
        if !std::mem::replace(&mut r.hooked, false) {
            return;
        }
        r.env
    };
    let raw = Rc::as_ptr(this) as *mut c_void;
    // SAFETY: the hook was added in `start` with exactly this function and argument.
    let status = unsafe { sys::napi_remove_env_cleanup_hook(env, Some(on_env_exit), raw) };
    if status == sys::Status::napi_ok {
        // SAFETY: the hook's count, which it will no longer release.
        unsafe { Rc::decrement_strong_count(raw as *const RefCell<Reactor>) };
    }
}
