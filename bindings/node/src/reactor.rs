//! Runs a socket on Node's event loop, as the Python binding runs one on asyncio's.
//!
//! libuv watches the descriptor of homa-io's [`Poller`] (a `uv_poll_t`); when it is
//! readable, [`on_readable`] calls [`Poller::drive`] on the JavaScript thread, which
//! receives and handles what arrived and wakes the futures of the calls and receives it
//! completed. Their wakers put their tokens on the ready list, and the same callback then
//! polls those futures and settles their promises. One wake-up of the loop per batch of
//! packets, no other thread involved, as for a TCP socket.
//!
//! homa-io's driver thread still runs Homa's timers when the loop does not drive, so some
//! completions (a call's timeout, a response completed by the driver) happen on that
//! thread: the waker then pokes a `uv_async_t`, whose callback settles them on the loop.
//!
//! While any promise is pending the poll handle is referenced, so the process waits for
//! it; an idle socket does not keep the process alive.
//!
//! Busy polling (`busyPollMs`, off by default), as the Linux module does in `recvmsg`:
//! for that long after a call starts or a packet arrives, while operations are pending,
//! a `uv_idle_t` keeps libuv from sleeping in `epoll_wait`, so a response that comes
//! back within the window is handled without the wake-up of a sleeping thread. Other
//! callbacks run as usual meanwhile.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Buffer, ToNapiValue};
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

/// What other threads share with the loop: tokens of woken futures, and the async handle
/// that makes the loop look at them (`None` once closed).
#[derive(Debug)]
struct Ready {
    tokens: Mutex<Vec<u32>>,
    wake: Mutex<Option<SendHandle>>,
}

#[derive(Debug)]
struct SendHandle(uv::Handle);

// SAFETY: the handle is only passed to uv_async_send, which any thread may call, and only
// while it is open (the mutex in `Ready` guards that).
unsafe impl Send for SendHandle {}

impl Ready {
    fn signal(&self) {
        if let Some(h) = lock(&self.wake).as_ref() {
            // SAFETY: the async handle is open while it is in `wake`.
            unsafe { uv::uv_async_send(h.0) };
        }
    }
}

thread_local! {
    /// The ready list of the socket this thread is driving right now (see [`on_readable`]).
    static DRIVING: std::cell::Cell<*const Ready> = const { std::cell::Cell::new(ptr::null()) };
}

/// The waker of one parked future: marks its token ready and pokes the loop, unless the
/// loop is the one driving (it settles the ready list when done).
#[derive(Debug)]
struct TokenWaker {
    ready: Arc<Ready>,
    token: u32,
}

impl Wake for TokenWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let first = {
            let mut tokens = lock(&self.ready.tokens);
            tokens.push(self.token);
            tokens.len() == 1
        };
        let driving = DRIVING.with(|d| ptr::eq(d.get(), Arc::as_ptr(&self.ready)));
        if first && !driving {
            self.ready.signal();
        }
    }
}

/// A homa-io future waiting for its promise to be settled.
enum Op {
    Call(homa_io::Call),
    Recv(homa_io::RecvRequest),
}

enum Done {
    Response(homa_io::Result<Vec<u8>>),
    Request(homa_io::Result<homa_io::Request>),
}

impl Op {
    fn poll(&mut self, waker: &Waker) -> Option<Done> {
        let mut cx = Context::from_waker(waker);
        match self {
            Op::Call(c) => match Pin::new(c).poll(&mut cx) {
                Poll::Ready(r) => Some(Done::Response(r)),
                Poll::Pending => None,
            },
            Op::Recv(r) => match Pin::new(r).poll(&mut cx) {
                Poll::Ready(r) => Some(Done::Request(r)),
                Poll::Pending => None,
            },
        }
    }
}

struct Parked {
    op: Op,
    deferred: sys::napi_deferred,
    waker: Waker,
}

/// A socket run by one JavaScript thread's event loop. Lives in an `Rc` shared by the
/// `NativeSocket`, each open libuv handle and the environment's cleanup hook.
pub(crate) struct Reactor {
    env: sys::napi_env,
    socket: Option<homa_io::Socket>,
    poller: Option<homa_io::Poller>,
    poll: uv::Handle,
    wake: uv::Handle,
    /// Keeps the loop from sleeping while it busy-polls.
    idle: uv::Handle,
    /// How long to busy-poll after activity (zero: never).
    spin: Duration,
    /// Busy-poll until then, if the idle handle runs.
    spin_until: Option<std::time::Instant>,
    /// The async resource the loop's callbacks run in (for async_hooks and microtasks).
    context: sys::napi_async_context,
    resource: sys::napi_ref,
    ready: Arc<Ready>,
    parked: HashMap<u32, Parked>,
    /// Whether the poll handle keeps the loop alive (while anything is parked).
    referenced: bool,
    /// Whether the environment's cleanup hook is registered (and holds a count).
    hooked: bool,
}

pub(crate) type Shared = Rc<RefCell<Reactor>>;

impl Reactor {
    /// Runs `socket` on the loop of `env`'s thread.
    pub(crate) fn start(
        env: sys::napi_env,
        socket: homa_io::Socket,
        spin: Duration,
    ) -> Result<Shared> {
        let poller = socket.poller().map_err(io_error)?;
        let lp = event_loop(env)?;
        let (mut resource, mut name, mut object, mut context) =
            (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: plain napi calls on the current environment with out-pointers to locals.
        unsafe {
            check(sys::napi_create_object(env, &mut object), "napi_create_object")?;
            check(
                sys::napi_create_reference(env, object, 1, &mut resource),
                "napi_create_reference",
            )?;
            let label = "homa.Socket";
            check(
                sys::napi_create_string_utf8(
                    env,
                    label.as_ptr().cast(),
                    label.len() as isize,
                    &mut name,
                ),
                "napi_create_string_utf8",
            )?;
            check(sys::napi_async_init(env, object, name, &mut context), "napi_async_init")?;
        }
        let (poll, wake, idle) =
            (new_handle(uv::POLL), new_handle(uv::ASYNC), new_handle(uv::IDLE));
        let ready = Arc::new(Ready {
            tokens: Mutex::new(Vec::new()),
            wake: Mutex::new(Some(SendHandle(wake))),
        });
        let reactor = Rc::new(RefCell::new(Reactor {
            env,
            socket: Some(socket),
            poller: Some(poller),
            poll,
            wake,
            idle,
            spin,
            spin_until: None,
            context,
            resource,
            ready,
            parked: HashMap::new(),
            referenced: false,
            hooked: true,
        }));
        let fd = reactor.borrow().poller.as_ref().map_or(-1, homa_io::Poller::fd);
        // SAFETY: fresh zeroed handles of the right sizes, initialised on the loop's own
        // thread; each holds one strong count of the reactor until its close callback.
        unsafe {
            let rc = check_uv(uv::uv_poll_init(lp, poll, fd), "uv_poll_init");
            uv::uv_handle_set_data(poll, Rc::into_raw(Rc::clone(&reactor)) as *mut c_void);
            rc?;
            check_uv(uv::uv_poll_start(poll, uv::READABLE, on_readable), "uv_poll_start")?;
            uv::uv_unref(poll);
            let rc = check_uv(uv::uv_async_init(lp, wake, on_wake), "uv_async_init");
            uv::uv_handle_set_data(wake, Rc::into_raw(Rc::clone(&reactor)) as *mut c_void);
            rc?;
            uv::uv_unref(wake);
            let rc = check_uv(uv::uv_idle_init(lp, idle), "uv_idle_init");
            uv::uv_handle_set_data(idle, Rc::into_raw(Rc::clone(&reactor)) as *mut c_void);
            rc?;
            uv::uv_unref(idle);
            let hook = Rc::into_raw(Rc::clone(&reactor)) as *mut c_void;
            check(sys::napi_add_env_cleanup_hook(env, Some(on_env_exit), hook), "cleanup hook")?;
        }
        Ok(reactor)
    }

    pub(crate) fn socket(&self) -> Result<&homa_io::Socket> {
        self.socket.as_ref().ok_or_else(|| failure("shutdown", "the socket is closed"))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.socket.is_none()
    }

    /// A promise settled when `op` completes; `token` (the caller's, unique among the
    /// pending) names it for [`Reactor::cancel`].
    fn park(&mut self, token: u32, mut op: Op) -> Result<sys::napi_value> {
        let (mut deferred, mut promise) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: on the JavaScript thread, inside the call that asked for the promise.
        check(
            unsafe { sys::napi_create_promise(self.env, &mut deferred, &mut promise) },
            "napi_create_promise",
        )?;
        let waker = Waker::from(Arc::new(TokenWaker { ready: Arc::clone(&self.ready), token }));
        match op.poll(&waker) {
            Some(done) => self.settle(deferred, done),
            None => {
                self.parked.insert(token, Parked { op, deferred, waker });
                self.keep_alive();
            }
        }
        Ok(promise)
    }

    /// Starts a call: its promise resolves to the response.
    pub(crate) fn call(&mut self, token: u32, call: homa_io::Call) -> Result<sys::napi_value> {
        let promise = self.park(token, Op::Call(call));
        self.stay_awake();
        promise
    }

    /// Busy-polls for the next `spin`, if busy polling is on and anything is pending.
    fn stay_awake(&mut self) {
        if self.spin.is_zero() || self.parked.is_empty() || self.socket.is_none() {
            return;
        }
        if self.spin_until.is_none() {
            // SAFETY: the idle handle is open while the socket is.
            unsafe { uv::uv_idle_start(self.idle, on_idle) };
        }
        self.spin_until = Some(std::time::Instant::now() + self.spin);
    }

    /// Stops busy-polling once its window has passed or nothing is pending.
    fn maybe_sleep(&mut self) {
        let Some(until) = self.spin_until else { return };
        if self.parked.is_empty() || std::time::Instant::now() >= until {
            // SAFETY: the idle handle is open while it is started.
            unsafe { uv::uv_idle_stop(self.idle) };
            self.spin_until = None;
        }
    }

    /// Waits for a request: its promise resolves to a `NativeRequest`.
    pub(crate) fn recv(&mut self, token: u32) -> Result<sys::napi_value> {
        let recv = self.socket()?.recv_request_async();
        self.park(token, Op::Recv(recv))
    }

    /// Aborts parked operation `token` (a call's RPC is forgotten) and rejects its promise
    /// with `aborted`. Returns whether it was still pending.
    pub(crate) fn cancel(&mut self, token: u32) -> bool {
        let Some(p) = self.parked.remove(&token) else { return false };
        drop(p.op);
        self.reject(p.deferred, failure("aborted", "the call was aborted"));
        self.keep_alive();
        true
    }

    /// Settles the promises whose futures were woken.
    fn dispatch(&mut self) {
        let tokens = std::mem::take(&mut *lock(&self.ready.tokens));
        for token in tokens {
            let Some(p) = self.parked.get_mut(&token) else { continue };
            if let Some(done) = p.op.poll(&p.waker) {
                let p = self.parked.remove(&token).expect("present");
                self.settle(p.deferred, done);
            }
        }
        self.keep_alive();
    }

    fn settle(&self, deferred: sys::napi_deferred, done: Done) {
        let value = match done {
            Done::Response(Ok(v)) => buffer(self.env, v),
            Done::Request(Ok(r)) => request(self.env, r),
            Done::Response(Err(e)) | Done::Request(Err(e)) => {
                return self.reject(deferred, io_error(e));
            }
        };
        match value {
            // SAFETY: the deferred is unsettled and ours; settling frees it.
            Ok(v) => unsafe {
                sys::napi_resolve_deferred(self.env, deferred, v);
            },
            Err(e) => self.reject(deferred, e),
        }
    }

    fn reject(&self, deferred: sys::napi_deferred, e: Error) {
        // SAFETY: on the JavaScript thread; the deferred is unsettled and ours.
        unsafe {
            let error = JsError::from(e).into_value(self.env);
            sys::napi_reject_deferred(self.env, deferred, error);
        }
    }

    /// References the poll handle while promises are pending, so the process waits for
    /// them, and unreferences it when idle.
    fn keep_alive(&mut self) {
        let want = !self.parked.is_empty() && self.socket.is_some();
        if want != self.referenced {
            // SAFETY: the poll handle is open while the socket is.
            unsafe { if want { uv::uv_ref(self.poll) } else { uv::uv_unref(self.poll) } };
            self.referenced = want;
        }
    }

    /// Closes the socket: stops watching it, shuts it down and, when `settle`, rejects the
    /// pending promises with `shutdown` (not while the environment is being torn down).
    /// Idempotent.
    pub(crate) fn close(&mut self, settle: bool) {
        let Some(socket) = self.socket.take() else { return };
        // SAFETY: the handles are open (the socket was); the close callbacks free them.
        unsafe {
            uv::uv_poll_stop(self.poll);
            *lock(&self.ready.wake) = None;
            uv::uv_close(self.poll, on_closed);
            uv::uv_close(self.wake, on_closed);
            uv::uv_close(self.idle, on_closed);
        }
        self.spin_until = None;
        self.poller = None;
        socket.shutdown();
        for (_, p) in std::mem::take(&mut self.parked) {
            if settle {
                self.reject(p.deferred, failure("shutdown", "the socket is closed"));
            }
        }
        // SAFETY: created in `start` on this environment; freed once.
        unsafe {
            if settle {
                sys::napi_async_destroy(self.env, self.context);
                sys::napi_delete_reference(self.env, self.resource);
            }
        }
    }

    /// Drives the socket and settles what completed, inside a callback scope so that
    /// promise reactions (microtasks) run when it ends, as after any libuv callback.
    fn turn(this: &Shared, drive: bool) {
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
        {
            let mut r = this.borrow_mut();
            if drive {
                let ready = Arc::as_ptr(&r.ready);
                DRIVING.with(|d| d.set(ready));
                let got = r.poller.as_ref().map_or(0, homa_io::Poller::drive);
                DRIVING.with(|d| d.set(ptr::null()));
                if got > 0 {
                    r.stay_awake();
                }
            }
            r.dispatch();
        }
        // SAFETY: the scopes opened above; closing the callback scope runs microtasks,
        // which may call back into the reactor (it is no longer borrowed).
        unsafe {
            sys::napi_close_callback_scope(env, scope);
            sys::napi_close_handle_scope(env, handles);
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
pub(crate) const COPY_BELOW: usize = 16 * 1024;

/// A message as a Buffer: over `v` itself (an external buffer), or for short messages a
/// copy (see [`COPY_BELOW`]).
pub(crate) fn buffer(env: sys::napi_env, v: Vec<u8>) -> Result<sys::napi_value> {
    if v.len() >= COPY_BELOW {
        // SAFETY: on the JavaScript thread; the Buffer wraps the vector, uncopied.
        return unsafe { Buffer::to_napi_value(env, Buffer::from(v)) };
    }
    let (mut data, mut value) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: on the JavaScript thread; copies v.len() bytes from a live vector.
    let status = unsafe {
        sys::napi_create_buffer_copy(env, v.len(), v.as_ptr().cast(), &mut data, &mut value)
    };
    check(status, "napi_create_buffer_copy")?;
    Ok(value)
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
/// `h` is one of a reactor's open handles.
unsafe fn reactor_of(h: uv::Handle) -> Shared {
    // SAFETY: the data is an `Rc::into_raw` of the reactor, alive until `on_closed`.
    unsafe {
        let raw = uv::uv_handle_get_data(h) as *const RefCell<Reactor>;
        Rc::increment_strong_count(raw);
        Rc::from_raw(raw)
    }
}

unsafe extern "C" fn on_readable(h: uv::Handle, _status: c_int, _events: c_int) {
    // SAFETY: libuv calls this for our open poll handle.
    Reactor::turn(&unsafe { reactor_of(h) }, true);
}

unsafe extern "C" fn on_wake(h: uv::Handle) {
    // SAFETY: libuv calls this for our open async handle.
    Reactor::turn(&unsafe { reactor_of(h) }, false);
}

unsafe extern "C" fn on_idle(h: uv::Handle) {
    // SAFETY: libuv calls this for our open idle handle.
    let reactor = unsafe { reactor_of(h) };
    if let Ok(mut r) = reactor.try_borrow_mut() {
        r.maybe_sleep();
    }
}

unsafe extern "C" fn on_closed(h: uv::Handle) {
    // SAFETY: the handle is closed: release its count of the reactor and its memory.
    unsafe {
        drop(Rc::from_raw(uv::uv_handle_get_data(h) as *const RefCell<Reactor>));
        libc::free(h);
    }
}

unsafe extern "C" fn on_env_exit(arg: *mut c_void) {
    // SAFETY: `arg` is the count `start` gave the hook; the environment is going away, so
    // promises are not settled.
    let reactor = unsafe { Rc::from_raw(arg as *const RefCell<Reactor>) };
    let mut r = reactor.borrow_mut();
    r.hooked = false;
    r.close(false);
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
