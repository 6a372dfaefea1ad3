//! The driver: one [`Endpoint`] and its transport behind a mutex, a thread that waits for
//! packets and deadlines, and the completions API threads wait on.
//!
//! Whoever holds the lock drives: an API thread sends its request or response itself (no
//! hop to another thread on the send path), and the driver thread handles arrivals and
//! timers. Every input is followed by draining transmits and events (`drain`), and before
//! the lock is released `settle` reads the deadline and arms a timerfd with it — the
//! driving rule of `homa_core`, whoever the driver is.
//!
//! A thread that blocks waiting for a response or a request *leads* if no other thread
//! does: it polls the transport itself and handles what arrives, so the packet it waits
//! for wakes it directly rather than the driver thread, which then hands it over (two
//! context switches per round trip instead of four). While a leader leads the driver
//! thread stops watching the transport and only runs timers; anyone else who completes
//! the leader's wait meanwhile (a timer, shutdown) kicks it through an eventfd. When the
//! leader leaves, the driver thread resumes watching at once if a future waits, else after
//! `LEADER_GRACE` unless a new leader came (a loop of blocking calls needs no hand-over).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use homa_core::wire::data;
use homa_core::{Endpoint, Event, FailReason, Instant, Payload, ServerRpc};

use crate::cidr::Cidr;
use crate::error::{Error, Result};
use crate::transport::{
    Batch, Datagram, RECV_SLOT_LEN, Transport, TransportStats, Waiter, clear, signal,
};

/// Datagrams per send or receive batch.
const BATCH: usize = 32;
/// Receive batches handled per wake-up before timers run anyway and the lock is released.
const RX_ROUNDS: usize = 64;
/// Timer passes in one go before leaving the rest to the (already due) timerfd.
const TIMER_ROUNDS: usize = 8;
/// Datagrams from this long are received in place when they can be (`Inner::placing`):
/// the payload copy saved then outweighs the extra system call that looks at the header.
const PLACE_MIN: usize = 16 * 1024;
/// How late a timer tick may fire (see `Inner::arm`): a busy socket's leader runs it
/// first. Ticks are a millisecond; Homa acts on several of them.
const TICK_SLACK: Instant = 250_000;
/// How long the driver thread stays off the transport after a leader leaves, expecting it
/// (or another) back: a thread calling in a loop then costs no epoll_ctl per call.
const LEADER_GRACE: Instant = 4_000_000;

const TOKEN_SOCKET: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_WAKE: u64 = 2;

/// Hashes RPC ids (our own counter, so no peer chooses them) with one multiplication
/// instead of SipHash.
#[derive(Debug, Clone, Copy, Default)]
struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

#[derive(Debug)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Counters the driver keeps besides the endpoint's and the transport's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DriverCounters {
    pub(crate) dropped_by_allow_list: u64,
    pub(crate) wakeups: u64,
}

/// The outcome of one call, filled by the driver, awaited by a thread or a task.
#[derive(Debug, Default)]
pub(crate) struct Completion {
    state: Mutex<CallState>,
    cv: Condvar,
    done: AtomicBool,
}

#[derive(Debug, Default)]
struct CallState {
    result: Option<Result<Vec<u8>>>,
    waker: Option<Waker>,
    /// A thread sleeps on `cv` (notifying costs a system call; skip it otherwise).
    sleeping: bool,
}

impl Completion {
    /// Stores the result; returns the task to wake, if one is waiting.
    fn complete(&self, result: Result<Vec<u8>>) -> Option<Waker> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.result = Some(result);
        self.done.store(true, Ordering::Release);
        if s.sleeping {
            self.cv.notify_all();
        }
        s.waker.take()
    }

    /// The result if there is one, else registers `waker` to be woken with it.
    pub(crate) fn poll(&self, waker: &Waker) -> Option<Result<Vec<u8>>> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let r = s.result.take();
        if r.is_none() && !s.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            s.waker = Some(waker.clone());
        }
        r
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Blocks until the result is there or `until` passes (then `None`).
    fn wait_until(&self, until: std::time::Instant) -> Option<Result<Vec<u8>>> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = s.result.take() {
                return Some(r);
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            s.sleeping = true;
            s = self.cv.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Blocks until the result is there.
    fn wait(&self) -> Result<Vec<u8>> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = s.result.take() {
                return r;
            }
            s.sleeping = true;
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A client RPC the application waits for.
#[derive(Debug)]
struct PendingCall {
    completion: Arc<Completion>,
    /// The destination as the application named it (for `Error::Unreachable`).
    dest: SocketAddr,
    deadline: Option<Instant>,
}

/// A request received and not yet taken by the application.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub(crate) rpc: ServerRpc,
    pub(crate) client_port: u16,
    pub(crate) message: Vec<u8>,
}

/// Everything the lock protects.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) endpoint: Endpoint,
    /// `None` once closed: the socket (and its port) is released at shutdown, even while
    /// requests, calls or pollers still hold the shared state.
    transport: Option<Box<dyn Transport>>,
    /// The transport's counters at close.
    closed_stats: TransportStats,
    tx: Batch,
    rx: Batch,
    /// One slot, for receiving one datagram (`Inner::receive_one`).
    rx1: Batch,
    /// Datagrams the next [`Shared::drive`] asks for: 1, or a batch after a turn that
    /// found as many as it asked for.
    drive_vlen: usize,
    /// Bulk data is arriving: receive in place (`homa_core::Endpoint::placement`), one
    /// datagram at a time, while the datagrams are large DATA packets. Only for transports
    /// that can.
    placing: bool,
    calls: HashMap<u64, PendingCall, IdHash>,
    /// Application deadlines of calls: (when, id).
    deadlines: BTreeSet<(Instant, u64)>,
    pub(crate) requests: VecDeque<Incoming>,
    request_wakers: Vec<Waker>,
    allow: Vec<Cidr>,
    /// When the timerfd fires (until the driver thread consumes the expiry).
    armed: Option<Instant>,
    /// The deadline `armed` was set for.
    armed_for: Instant,
    /// The endpoint's timer tick in nanoseconds.
    tick_ns: Instant,
    /// The time when the lock was last taken (nanoseconds since the driver started).
    now: Instant,
    timer: RawFd,
    origin: u64,
    pub(crate) counters: DriverCounters,
    /// Tasks to wake once the lock is released.
    to_wake: Vec<Waker>,
    new_requests: usize,
    pub(crate) closed: bool,
    /// A thread is leading (see the module docs).
    leader: bool,
    /// The leader sleeps in the waiter's receive call (not in `poll`): wake it through
    /// the waiter, not the kick eventfd.
    leader_blocking: bool,
    /// What the waiter received (added to the transport's counters).
    pub(crate) waiter_stats: TransportStats,
    /// The lock is held by the leader.
    in_leader: bool,
    /// Someone other than the leader completed something: kick the leader on release.
    kick: bool,
    /// Threads sleeping on `requests_ready`.
    request_sleepers: usize,
    /// The driver thread does not watch the transport.
    blind: bool,
    /// When a blind driver thread without a leader resumes watching.
    grace: Option<Instant>,
    /// When the wait of a leader asleep in the waiter's receive call ends: the driver
    /// thread wakes it then.
    leader_until: Option<Instant>,
    /// An event loop drives the socket through a [`Poller`](crate::Poller): it watches
    /// the transport and receives; the driver thread only runs timers (and drains the
    /// socket before it does), and only the loop's thread may lead.
    attached: bool,
    /// The thread of the attached event loop (the last one that drove).
    loop_thread: Option<std::thread::ThreadId>,
}

/// What API threads and the driver thread share.
#[derive(Debug)]
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    requests_ready: Condvar,
    /// The driver thread's epoll set (transport, timer, wake).
    epoll: OwnedFd,
    /// The transport's readiness fd (stable for the transport's life).
    readiness: RawFd,
    /// Wakes the driver thread (shutdown).
    wake: OwnedFd,
    /// Wakes the leader: its wait may be over.
    kick: OwnedFd,
    timer: OwnedFd,
    origin: u64,
    closed: AtomicBool,
    busy_poll: Option<Duration>,
    /// The transport's blocking receiver, if it has one ([`Transport::waiter`]), with a
    /// batch of its own; used by the leader only; `None` once closed.
    waiter: Mutex<Option<(Box<dyn Waiter>, Batch)>>,
    /// Whether the transport has a waiter at all.
    has_waiter: bool,
    /// Wakes a leader blocked in the waiter; `None` once closed.
    wake_waiter: Mutex<Option<WakeWaiter>>,
}

/// [`WaitHandle::wake`](crate::transport::WaitHandle::wake) and
/// [`WaitHandle::shutdown`](crate::transport::WaitHandle::shutdown), printable.
struct WakeWaiter {
    wake: Box<dyn Fn() + Send + Sync>,
    shutdown: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for WakeWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WakeWaiter")
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// Takes ownership of a file descriptor a system call just returned.
fn owned(rc: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a non-negative result of eventfd/timerfd_create/epoll_create1 is a new fd
    // owned by nobody else.
    cvt(rc).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: a plain system call creating a new descriptor.
    owned(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })
}

impl Shared {
    /// Starts a driver thread for `endpoint` over `transport`.
    pub(crate) fn start(
        endpoint: Endpoint,
        mut transport: Box<dyn Transport>,
        allow: Vec<Cidr>,
        busy_poll: Option<Duration>,
    ) -> Result<(Arc<Shared>, std::thread::JoinHandle<()>)> {
        let (wake, kick) = (eventfd()?, eventfd()?);
        // SAFETY: plain system calls creating new descriptors.
        let timer = owned(unsafe {
            libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
        })?;
        // SAFETY: a plain system call creating a new descriptor.
        let epoll = owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        let readiness = transport.readiness_fd().as_raw_fd();
        for (fd, token) in [
            (readiness, TOKEN_SOCKET),
            (timer.as_raw_fd(), TOKEN_TIMER),
            (wake.as_raw_fd(), TOKEN_WAKE),
        ] {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
            // SAFETY: all three descriptors are open; ev is a valid epoll_event.
            cvt(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        }
        let (waiter, wake_waiter) = match transport.waiter() {
            Some(h) => (
                Some((h.waiter, Batch::new(BATCH, RECV_SLOT_LEN))),
                Some(WakeWaiter { wake: h.wake, shutdown: h.shutdown }),
            ),
            None => (None, None),
        };
        let has_waiter = waiter.is_some();
        let origin = monotonic_ns();
        let slot_len = endpoint.config().max_packet_len();
        let tick_ns = u64::from(endpoint.config().tick_usecs).max(1) * 1000;
        let inner = Inner {
            endpoint,
            transport: Some(transport),
            closed_stats: TransportStats::default(),
            tx: Batch::new(BATCH, slot_len),
            rx: Batch::new(BATCH, RECV_SLOT_LEN),
            rx1: Batch::new(1, RECV_SLOT_LEN),
            drive_vlen: 1,
            placing: false,
            calls: HashMap::default(),
            deadlines: BTreeSet::new(),
            requests: VecDeque::new(),
            request_wakers: Vec::new(),
            allow,
            armed: None,
            armed_for: 0,
            tick_ns,
            now: 0,
            timer: timer.as_raw_fd(),
            origin,
            counters: DriverCounters::default(),
            to_wake: Vec::new(),
            new_requests: 0,
            closed: false,
            leader: false,
            leader_blocking: false,
            waiter_stats: TransportStats::default(),
            in_leader: false,
            kick: false,
            request_sleepers: 0,
            blind: false,
            grace: None,
            leader_until: None,
            attached: false,
            loop_thread: None,
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            requests_ready: Condvar::new(),
            epoll,
            readiness,
            wake,
            kick,
            timer,
            origin,
            closed: AtomicBool::new(false),
            busy_poll,
            waiter: Mutex::new(waiter),
            has_waiter,
            wake_waiter: Mutex::new(wake_waiter),
        });
        let driver = Arc::clone(&shared);
        let thread =
            std::thread::Builder::new().name("homa-driver".into()).spawn(move || driver.run())?;
        Ok((shared, thread))
    }

    /// Nanoseconds since the driver started: the endpoint's clock.
    fn now(&self) -> Instant {
        monotonic_ns().saturating_sub(self.origin)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Runs `f` on the locked state with the current time, then wakes whoever `f` made
    /// ready.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Inner, Instant) -> R) -> R {
        let mut inner = self.lock();
        let now = inner.clock(self.now());
        let r = f(&mut inner, now);
        self.release(inner);
        r
    }

    fn release(&self, mut inner: MutexGuard<'_, Inner>) {
        let wakers =
            if inner.to_wake.is_empty() { Vec::new() } else { mem::take(&mut inner.to_wake) };
        let new = mem::take(&mut inner.new_requests).min(inner.request_sleepers);
        let kick = mem::take(&mut inner.kick);
        let blocked = inner.leader_blocking;
        drop(inner);
        if kick {
            let waiter = blocked.then(|| lock(&self.wake_waiter));
            match waiter.as_deref() {
                Some(Some(w)) => (w.wake)(),
                _ => signal(self.kick.as_raw_fd()),
            }
        }
        for _ in 0..new {
            self.requests_ready.notify_one();
        }
        for w in wakers {
            w.wake();
        }
    }

    /// Whether the driver thread watches the transport.
    pub(crate) fn watch_transport(&self, inner: &mut Inner, on: bool) {
        // Closed: the descriptor is gone (its number may be another's now). Attached: the
        // event loop watches.
        if inner.blind != on || inner.closed || (on && inner.attached) {
            return;
        }
        inner.blind = !on;
        inner.grace = None;
        if on {
            inner.waiter_in_use(false);
        }
        // Removed from the epoll set, not just muted: a muted entry still sits on the
        // socket's wait queue and costs every arriving packet a callback.
        let op = if on { libc::EPOLL_CTL_ADD } else { libc::EPOLL_CTL_DEL };
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: TOKEN_SOCKET };
        // SAFETY: both descriptors are open; ev is a valid epoll_event.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, self.readiness, &mut ev) };
        if rc < 0 {
            tracing::error!("epoll_ctl: {}", io::Error::last_os_error());
        }
    }

    /// Makes the calling thread the leader unless another thread is; returns whether it is.
    /// A thread about to send and then wait claims leadership first, so that no other
    /// thread starts leading in between. The driver thread stops watching the transport
    /// only once the leader leads (`lead_locked`, or `call` before it sends; `start_call`
    /// makes it watch if an earlier leader's grace period still kept it off): a [`Call`]
    /// started to be waited on later leaves receiving to the driver thread until then, or
    /// threads waiting for requests meanwhile would wait for a leader that does not
    /// receive.
    ///
    /// [`Call`]: crate::Call
    pub(crate) fn claim(&self, inner: &mut Inner) -> bool {
        if inner.leader
            || (inner.attached && inner.loop_thread != Some(std::thread::current().id()))
        {
            return false;
        }
        inner.leader = true;
        true
    }

    /// The driver thread must watch the transport: a future waits on it. (A thread that
    /// blocks leads instead, or waits for the leader.)
    pub(crate) fn need_driver(&self, inner: &mut Inner) {
        if !inner.leader {
            self.watch_transport(inner, true);
        }
    }

    /// Ends a leader's term. If others wait (calls pending, threads sleeping for
    /// requests), the driver thread takes over now; else after `LEADER_GRACE`, unless
    /// someone leads or needs it before.
    fn step_down(&self, inner: &mut Inner) {
        inner.leader = false;
        if inner.request_sleepers > 0 || !inner.calls.is_empty() || !inner.request_wakers.is_empty()
        {
            self.watch_transport(inner, true);
        } else if inner.blind && !inner.attached {
            // Moved only when less than half of it is left: calls in a loop then keep one
            // grace deadline for a while instead of moving it (and the timerfd) each time.
            // It is a lower bound: watching resumes between half and all of
            // `LEADER_GRACE` after the last leader left.
            let now = inner.now;
            if inner.grace.is_none_or(|g| g < now + LEADER_GRACE / 2) {
                // On a tick boundary, like the endpoint's timers (one timerfd setting
                // serves both).
                let tick = inner.tick_ns;
                inner.grace = Some((now + LEADER_GRACE).div_ceil(tick) * tick);
                let next = inner.next_deadline();
                inner.arm(next); // for the grace period
            }
        }
    }

    /// Gives leadership up (for a leader that will not wait after all).
    pub(crate) fn resign(&self) {
        let mut inner = self.lock();
        self.step_down(&mut inner); // the driver thread takes over if calls wait
        self.release(inner);
    }

    /// Leads (see the module docs) until `done` holds, the socket closes or `until`
    /// passes. Returns `false` at once if another thread leads.
    /// Once done, `then` runs on the locked state (e.g. to take what was waited for) and
    /// its result is returned.
    fn lead<R>(
        &self,
        until: Option<std::time::Instant>,
        done: impl Fn(&Inner) -> bool,
        then: impl FnOnce(&mut Inner) -> R,
    ) -> Option<R> {
        let mut inner = self.lock();
        if !self.claim(&mut inner) {
            self.release(inner);
            return None;
        }
        Some(self.lead_locked(inner, until, done, then))
    }

    /// [`lead`](Shared::lead) for a thread that has claimed leadership already.
    fn lead_claimed<R>(
        &self,
        until: Option<std::time::Instant>,
        done: impl Fn(&Inner) -> bool,
        then: impl FnOnce(&mut Inner) -> R,
    ) -> R {
        self.lead_locked(self.lock(), until, done, then)
    }

    fn lead_locked<'a, R>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        until: Option<std::time::Instant>,
        done: impl Fn(&Inner) -> bool,
        then: impl FnOnce(&mut Inner) -> R,
    ) -> R {
        self.watch_transport(&mut inner, false); // this thread receives now
        // Sleep in the transport's own receive call when there is one, unless busy polling
        // (it needs `poll`) is asked for. The receive call has no timeout: a deadline is
        // the driver thread's to enforce (it wakes the leader).
        let use_waiter = self.has_waiter && self.busy_poll.is_none();
        loop {
            let expired = until.is_some_and(|u| std::time::Instant::now() >= u);
            if inner.closed || done(&inner) || expired {
                inner.leader_until = None;
                self.step_down(&mut inner);
                let r = then(&mut inner);
                self.release(inner);
                return r;
            }
            // Bulk data is received in place, one datagram at a time: not by the waiter.
            if use_waiter && !inner.placing {
                // Unless an event loop watches it, the readiness fd goes unwatched until
                // the driver thread watches again (`watch_transport`), across calls in a
                // loop.
                if !inner.attached {
                    inner.waiter_in_use(true);
                }
                inner.leader_blocking = true;
                if let Some(u) = until {
                    let left = u.saturating_duration_since(std::time::Instant::now());
                    let left = left.as_nanos().try_into().unwrap_or(u64::MAX);
                    inner.leader_until = Some(inner.now.saturating_add(left));
                    let next = inner.next_deadline();
                    inner.arm(next);
                }
                self.release(inner);
                let mut w = lock(&self.waiter);
                let result = match w.as_mut() {
                    Some((waiter, batch)) => {
                        batch.clear();
                        waiter.wait(batch)
                    }
                    None => Ok(()), // closed meanwhile
                };
                inner = self.lock();
                inner.leader_blocking = false;
                let Some((waiter, batch)) = w.as_mut() else { continue };
                inner.in_leader = true;
                if let Err(e) = result {
                    tracing::error!("receive failed: {e}");
                }
                let now = inner.clock(self.now());
                inner.waiter_stats = waiter.stats();
                while let Some(u) = waiter.poll_unreachable() {
                    inner.endpoint.handle_unreachable(u.peer, u.port);
                }
                if waiter.only_waits() {
                    inner.receive(now);
                } else {
                    inner.feed(now, batch);
                    // More may be waiting; bulk data, to be received in place.
                    if batch.is_full() || inner.placing {
                        inner.drain(now); // answer this batch before taking more
                        inner.receive(now);
                    }
                }
                drop(w);
                // The leader has just received, as the driver thread does before running
                // timers: it runs those due itself, so that a busy socket's timer ticks
                // (each RPC arms one) do not wake the driver thread every millisecond.
                inner.settle(true);
                inner.in_leader = false;
                continue;
            }
            self.release(inner);
            let (kicked, errored) = self.await_input(until);
            inner = self.lock();
            inner.in_leader = true;
            if kicked {
                clear(self.kick.as_raw_fd());
            }
            if errored {
                inner.read_errors();
            }
            let now = inner.clock(self.now());
            inner.receive(now);
            inner.settle(true); // timers too, as after the waiter's receive
            inner.in_leader = false;
        }
    }

    /// Sleeps until the transport is readable or in error, the leader is kicked, or `until`
    /// passes; with busy polling, checks without sleeping for a while first. Returns
    /// whether it was kicked and whether the transport is in error.
    fn await_input(&self, until: Option<std::time::Instant>) -> (bool, bool) {
        let mut fds = [
            libc::pollfd { fd: self.readiness, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.kick.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        let mut poll = |timeout_ms: i32| {
            // SAFETY: fds is a live array of the length given.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
        };
        let mut ready = false;
        if let Some(spin) = self.busy_poll {
            let start = std::time::Instant::now();
            while !ready && start.elapsed() < spin {
                ready = poll(0) != 0;
                std::hint::spin_loop();
            }
        }
        if !ready {
            let timeout = until.map_or(-1, |u| {
                let left = u.saturating_duration_since(std::time::Instant::now());
                left.as_millis().saturating_add(1).min(i32::MAX as u128) as i32
            });
            poll(timeout);
        }
        (fds[1].revents != 0, fds[0].revents & libc::POLLERR != 0)
    }

    /// A blocking call: starts it and waits for its result in one go (one lock hold from
    /// sending to sleeping when this thread leads).
    pub(crate) fn call(
        &self,
        port: u16,
        dest: SocketAddr,
        message: Payload,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>> {
        let mut inner = self.lock();
        let now = inner.clock(self.now());
        // Claimed (and the driver thread off the transport) before sending, so a fast
        // answer cannot slip to the driver thread.
        let leading = self.claim(&mut inner);
        if leading {
            self.watch_transport(&mut inner, false);
        }
        let started = inner.start_call(now, port, dest, message, timeout);
        inner.settle(false);
        let completion = match started {
            Ok((_, c)) => c,
            Err(e) => {
                if leading {
                    self.step_down(&mut inner);
                }
                self.release(inner);
                return Err(e);
            }
        };
        if leading {
            self.lead_locked(inner, None, |_| completion.is_done(), |_| ());
        } else {
            self.release(inner);
            self.lead(None, |_| completion.is_done(), |_| ());
        }
        completion.wait()
    }

    /// Waits until call `c` completes (`Some`) or `until` passes (`None`), leading if
    /// nobody does.
    pub(crate) fn wait_call_until(
        &self,
        c: &Completion,
        claimed: bool,
        until: std::time::Instant,
    ) -> Option<Result<Vec<u8>>> {
        if claimed {
            self.lead_claimed(Some(until), |_| c.is_done(), |_| ());
        } else {
            self.lead(Some(until), |_| c.is_done(), |_| ());
        }
        c.wait_until(until)
    }

    /// Attaches an event loop ([`Poller`](crate::Poller)): from now on it watches the
    /// transport and receives (in [`drive`](Shared::drive)); returns the fd to watch.
    pub(crate) fn attach(&self) -> Result<RawFd> {
        let mut inner = self.lock();
        let r = if inner.closed {
            Err(Error::Shutdown)
        } else if inner.attached {
            Err(Error::PollerExists)
        } else {
            inner.attached = true;
            inner.loop_thread = Some(std::thread::current().id());
            self.watch_transport(&mut inner, false);
            inner.waiter_in_use(false); // the loop watches the readiness fd
            Ok(self.readiness)
        };
        self.release(inner);
        r
    }

    /// Detaches the event loop: the driver thread watches the transport again.
    pub(crate) fn detach(&self) {
        let mut inner = self.lock();
        inner.attached = false;
        inner.loop_thread = None;
        if !inner.leader {
            self.watch_transport(&mut inner, true);
        }
        self.release(inner);
    }

    /// The attached event loop's turn: receives what has arrived, hands it to the endpoint,
    /// runs due timers and sends what they produced, without blocking. Wakers of calls
    /// and requests it completed are woken on this thread before it returns. Returns the
    /// number of datagrams received.
    pub(crate) fn drive(&self) -> usize {
        let mut inner = self.lock();
        if inner.attached {
            inner.loop_thread = Some(std::thread::current().id());
        }
        let now = inner.clock(self.now());
        // A leader blocked in the waiter's receive owns the socket until it returns.
        let got = if inner.leader_blocking {
            0
        } else if inner.drive_vlen == 1 && !inner.placing {
            // Usually one datagram woke the loop: one `recvfrom`, no batch set up. If more
            // wait, the descriptor stays readable and the next turn takes batches.
            inner.receive_one(now)
        } else {
            inner.receive(now)
        };
        inner.drive_vlen = if got >= inner.drive_vlen { BATCH } else { 1 };
        inner.settle(true);
        self.release(inner);
        got
    }

    /// Blocks until call `c` completes, leading if this thread `claimed` leadership or
    /// nobody leads.
    pub(crate) fn wait_call(&self, c: &Completion, claimed: bool) -> Result<Vec<u8>> {
        if claimed {
            self.lead_claimed(None, |_| c.is_done(), |_| ());
        } else {
            self.lead(None, |_| c.is_done(), |_| ());
        }
        c.wait()
    }

    /// Blocks until a request is queued; `Error::TimedOut` after `timeout`.
    pub(crate) fn next_request(&self, timeout: Option<Duration>) -> Result<Incoming> {
        let end = timeout.map(|t| std::time::Instant::now() + t);
        let take = |inner: &mut Inner| if inner.closed { None } else { inner.requests.pop_front() };
        if let Some(Some(r)) = self.lead(end, |inner| !inner.requests.is_empty(), take) {
            return Ok(r);
        }
        let mut inner = self.lock();
        loop {
            if inner.closed {
                return Err(Error::Shutdown);
            }
            if let Some(r) = inner.requests.pop_front() {
                return Ok(r);
            }
            let left = end.map(|e| e.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(Error::TimedOut);
            }
            inner.request_sleepers += 1;
            inner = match left {
                None => self.requests_ready.wait(inner).unwrap_or_else(|e| e.into_inner()),
                Some(left) => {
                    let waited = self.requests_ready.wait_timeout(inner, left);
                    waited.unwrap_or_else(|e| e.into_inner()).0
                }
            };
            inner.request_sleepers -= 1;
        }
    }

    /// A queued request, if any, without waiting.
    pub(crate) fn try_request(&self) -> Result<Option<Incoming>> {
        let mut inner = self.lock();
        let r = if inner.closed { Err(Error::Shutdown) } else { Ok(inner.requests.pop_front()) };
        drop(inner);
        r
    }

    /// A queued request, or registers `waker` for the next one.
    pub(crate) fn poll_request(&self, waker: &Waker) -> Option<Result<Incoming>> {
        let mut inner = self.lock();
        if inner.closed {
            return Some(Err(Error::Shutdown));
        }
        if let Some(r) = inner.requests.pop_front() {
            return Some(Ok(r));
        }
        self.need_driver(&mut inner);
        if !inner.request_wakers.iter().any(|w| w.will_wake(waker)) {
            inner.request_wakers.push(waker.clone());
        }
        None
    }

    /// Closes: pending calls fail with `Error::Shutdown`, waiting receivers return it, the
    /// transport is closed (its port is free when this returns, whoever still holds the
    /// shared state) and the driver thread exits. Idempotent.
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        let transport = if inner.closed {
            None
        } else {
            inner.closed = true;
            inner.kick = true; // a leader waiting in `poll` must see it
            inner.fail_all();
            inner.requests.clear();
            let wakers = mem::take(&mut inner.request_wakers);
            inner.to_wake.extend(wakers);
            inner.clock(self.now());
            inner.settle(false);
            inner.closed_stats = inner.transport_stats();
            inner.transport.take()
        };
        self.closed.store(true, Ordering::Release);
        self.release(inner);
        self.requests_ready.notify_all();
        signal(self.kick.as_raw_fd());
        signal(self.wake.as_raw_fd());
        let wake_waiter = lock(&self.wake_waiter).take();
        if let Some(w) = &wake_waiter {
            (w.shutdown)();
        }
        drop(wake_waiter);
        drop(transport);
        // Waits for a leader still in the waiter's receive (the shutdown made it return).
        let waiter = lock(&self.waiter).take();
        drop(waiter);
    }

    /// The driver thread: wait for packets, deadlines or shutdown; handle them; repeat.
    fn run(self: Arc<Shared>) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        loop {
            // SAFETY: events is a live array of the length given.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    -1,
                )
            };
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            if n <= 0 {
                continue; // EINTR
            }
            let (mut fired, mut errored) = (false, false);
            for ev in &events[..n as usize] {
                match ev.u64 {
                    TOKEN_TIMER => {
                        clear(self.timer.as_raw_fd());
                        fired = true;
                    }
                    TOKEN_WAKE => clear(self.wake.as_raw_fd()),
                    _ => errored |= ev.events & libc::EPOLLERR as u32 != 0,
                }
            }
            let mut inner = self.lock();
            if fired {
                inner.armed = None; // consumed: the next settle arms it again
            }
            if errored {
                inner.read_errors();
            }
            let now = inner.clock(self.now());
            inner.counters.wakeups += 1;
            if inner.grace.is_some_and(|g| g <= now) {
                inner.grace = None;
                self.need_driver(&mut inner);
            }
            if inner.leader_until.is_some_and(|u| u <= now) {
                inner.leader_until = None;
                inner.kick = true; // the leader's wait is over
            }
            // Timers run only once what had arrived is handled: a response waiting in the
            // socket queue must count before its RPC is judged silent. A leader blocked in
            // the waiter's receive takes it instead: this thread must not, or it could
            // swallow the datagram that wakes the leader.
            if !inner.leader_blocking {
                inner.receive(now);
            } else if fired && inner.input_waiting() {
                // Datagrams wait and the leader is being woken for them: it runs the due
                // timers once it has taken them. Run here first, they would judge silent
                // what sits in the queue (RESENDs, duplicate retransmissions); look again
                // shortly in case the leader is slow to run.
                let retry = now + TICK_SLACK;
                inner.arm(Some(retry));
                self.release(inner);
                continue;
            }
            inner.settle(true);
            self.release(inner);
        }
    }
}

impl Inner {
    fn allowed(&self, from: SocketAddr) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|c| c.contains(from.ip()))
    }

    /// Receives what is waiting (a bounded number of batches; while bulk data arrives, a
    /// batch's worth, one datagram at a time) and feeds it to the endpoint; returns the
    /// number of datagrams.
    fn receive(&mut self, now: Instant) -> usize {
        if self.placing {
            return self.receive_bulk(now);
        }
        let mut rx = mem::replace(&mut self.rx, Batch::new(0, 0));
        let mut got = 0;
        for round in 0..RX_ROUNDS {
            if round > 0 {
                self.drain(now); // answer the last batch before taking more
            }
            rx.clear();
            let Some(transport) = self.transport.as_mut() else { break };
            if let Err(e) = transport.recv(&mut rx) {
                tracing::error!("receive failed: {e}");
                break;
            }
            got += rx.len();
            self.feed(now, &rx);
            if !rx.is_full() {
                break;
            }
        }
        self.rx = rx;
        got
    }

    /// `receive` while bulk data arrives: up to a batch's worth of datagrams, each
    /// received in place if it can be, else alone by copy, and each answered at once (the
    /// sender may be waiting for its GRANTs). Then the caller's turn: it may be waiting for
    /// what came.
    fn receive_bulk(&mut self, now: Instant) -> usize {
        let mut got = 0;
        while got < BATCH && self.placing {
            // (A datagram taken by copy may end the bulk mode.)
            if !self.receive_in_place(now) && self.receive_one(now) == 0 {
                break;
            }
            got += 1;
            self.drain(now);
            self.flush();
        }
        got
    }

    /// Receives one datagram (one `recvfrom`, no batch set up) and feeds it to the endpoint;
    /// returns how many it took, 0 or 1.
    fn receive_one(&mut self, now: Instant) -> usize {
        let mut rx = mem::replace(&mut self.rx1, Batch::new(0, 0));
        rx.clear();
        if let Some(Err(e)) = self.transport.as_mut().map(|t| t.recv(&mut rx)) {
            tracing::error!("receive failed: {e}");
        }
        self.feed(now, &rx);
        let got = rx.len();
        self.rx1 = rx;
        got
    }

    /// Receives the next datagram straight into its message, if it is a large DATA packet
    /// that extends its message in order (see `Endpoint::placement`); returns whether it
    /// took it. If not, it is left for `recv`.
    fn receive_in_place(&mut self, now: Instant) -> bool {
        let mut head = [0; data::HEADER_LEN];
        let Some((from, len)) = self.transport.as_mut().and_then(|t| t.peek(&mut head)) else {
            return false;
        };
        if len < PLACE_MIN || !self.allowed(from) {
            return false;
        }
        let payload_len = len - data::HEADER_LEN;
        let (Some(transport), Some(message)) =
            (self.transport.as_mut(), self.endpoint.placement(from, &head, payload_len))
        else {
            return false;
        };
        let mut got = [0; data::HEADER_LEN];
        match transport.recv_split(&mut got, message, payload_len) {
            Ok(Some(f)) if f == from && got == head => {
                let _ = self.endpoint.handle_placed(now, from, &got);
            }
            // Another datagram than the one peeked at: never seen (receives are
            // serialized). What it appended is past the message's bytes, and goes.
            Ok(_) => tracing::debug!("a datagram other than the one peeked at: dropped"),
            Err(e) => {
                tracing::error!("receive failed: {e}");
                return false;
            }
        }
        true
    }

    /// Hands the datagrams in `rx` to the endpoint (those the allow-list admits). The caller
    /// drains next (before receiving more, or settling), so the endpoint answers the whole
    /// batch together: one GRANT per message, not one per DATA packet; the DATA that GRANTs
    /// allow, in runs. Large datagrams start receiving in place, if the transport can.
    fn feed(&mut self, now: Instant, rx: &Batch) {
        if !rx.is_empty() {
            // (Not for what GRO coalesced: several small packets.)
            self.placing =
                (0..rx.len()).map(|i| rx.get(i).0).any(|d| d.segment == 0 && d.len >= PLACE_MIN)
                    && self.transport.as_ref().is_some_and(|t| t.receives_in_place());
        }
        for i in 0..rx.len() {
            let (d, bytes) = rx.get(i);
            if !self.allowed(d.addr) {
                self.counters.dropped_by_allow_list += 1;
                continue;
            }
            for packet in d.packets(bytes) {
                // Malformed packets are counted by the endpoint; nothing else to do.
                let _ = self.endpoint.handle_packet(now, d.addr, packet);
            }
        }
    }

    /// The transport's counters, with what the waiter received.
    pub(crate) fn transport_stats(&self) -> TransportStats {
        let Some(transport) = &self.transport else { return self.closed_stats };
        let (t, w) = (transport.stats(), self.waiter_stats);
        TransportStats {
            rx_datagrams: t.rx_datagrams + w.rx_datagrams,
            rx_calls: t.rx_calls + w.rx_calls,
            rx_dropped: t.rx_dropped + w.rx_dropped,
            unreachable: t.unreachable + w.unreachable,
            ..t
        }
    }

    /// Step 1 of the driving rule: takes every ready packet (into the send batch, sent
    /// when full) and every event.
    fn drain(&mut self, now: Instant) {
        while let Some((t, tail)) = self.endpoint.poll_transmit_gather(now, self.tx.next_slot()) {
            let d = Datagram { addr: t.to, len: t.len, priority: t.priority, segment: 0 };
            self.tx.push_gather(d, tail);
            if self.tx.is_full() {
                self.flush();
            }
        }
        while let Some(event) = self.endpoint.poll_event() {
            self.dispatch(event);
        }
    }

    fn flush(&mut self) {
        if self.tx.is_empty() {
            return;
        }
        let Some(transport) = self.transport.as_mut() else {
            self.tx.clear(); // closed
            return;
        };
        if let Err(e) = transport.send(&mut self.tx) {
            tracing::error!("send failed: {e}");
            self.tx.clear();
        }
    }

    /// Records the time at which the lock was taken (never going backwards).
    pub(crate) fn clock(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    /// The earliest of the endpoint's deadline and the calls' deadlines.
    fn next_deadline(&mut self) -> Option<Instant> {
        let user = self.deadlines.first().map(|&(when, _)| when);
        let grace = self.grace.filter(|_| !self.leader);
        let earlier = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        earlier(earlier(self.endpoint.poll_timeout(), user), earlier(grace, self.leader_until))
    }

    /// Drains, feeds back what the transport learned (unreachable peers); with `timers`,
    /// handles expired call deadlines and due endpoint timers; arms the timerfd with the
    /// next deadline; and sends. Call before releasing the lock after any input. API
    /// threads pass `timers = false`: the driver thread runs timers, after draining
    /// arrivals (and so does a leader after receiving).
    ///
    /// The send comes last: on a machine where both ends share a core, whatever a thread
    /// does between sending and sleeping delays the peer it just woke.
    pub(crate) fn settle(&mut self, timers: bool) {
        let now = self.now;
        let mut rounds = 0;
        let mut drained = false;
        loop {
            self.drain(now);
            if self.feed_unreachable() {
                continue;
            }
            let next = self.next_deadline();
            if timers && next.is_some_and(|d| d <= now) && rounds < TIMER_ROUNDS {
                // Timers judge silence: first take whatever waits in the socket queue (a
                // leader or an event loop has read only what woke it), else data that has
                // arrived looks missing and draws RESENDs (and duplicate retransmissions).
                // Not while a leader sleeps in the waiter: its wake-up must reach it.
                if !drained && !self.leader_blocking {
                    drained = true;
                    // (Bulk data comes a batch's worth per `receive`: take it all.)
                    let mut got = self.receive(now);
                    while self.placing
                        && got > 0
                        && got.is_multiple_of(BATCH)
                        && got < RX_ROUNDS * BATCH
                    {
                        got += self.receive(now);
                    }
                    if got > 0 {
                        continue;
                    }
                }
                rounds += 1;
                while let Some(&(when, id)) = self.deadlines.first()
                    && when <= now
                {
                    self.deadlines.pop_first();
                    self.cancel(id, Some(Error::TimedOut));
                }
                self.endpoint.handle_timeout(now);
                continue;
            }
            self.arm(next);
            self.flush();
            if self.feed_unreachable() {
                continue; // refused sends: the endpoint has more to say
            }
            return;
        }
    }

    /// Reads the errors queued on the transport's socket (see `Transport::read_errors`);
    /// the next settle hands the endpoint the unreachable peers among them.
    fn read_errors(&mut self) {
        if let Some(t) = self.transport.as_mut() {
            t.read_errors();
        }
    }

    /// Whether datagrams wait to be received (`Transport::input_waiting`).
    fn input_waiting(&mut self) -> bool {
        self.transport.as_mut().is_some_and(|t| t.input_waiting())
    }

    /// Tells the transport whether its waiter is in use (`Transport::waiter_in_use`).
    fn waiter_in_use(&mut self, in_use: bool) {
        if let Some(t) = self.transport.as_mut() {
            t.waiter_in_use(in_use);
        }
    }

    /// Hands the endpoint the peers the transport found unreachable; whether there were.
    fn feed_unreachable(&mut self) -> bool {
        let mut fed = false;
        while let Some(u) = self.transport.as_mut().and_then(|t| t.poll_unreachable()) {
            self.endpoint.handle_unreachable(u.peer, u.port);
            fed = true;
        }
        fed
    }

    /// Makes sure the timerfd fires by `deadline`, with as few `timerfd_settime` calls as
    /// possible (each costs microseconds, in a VM especially; most settles must not make
    /// one):
    ///
    /// - Timer ticks (deadlines on a tick boundary) fire `TICK_SLACK` late: the timers of
    ///   a busy socket are then run by its leader (which runs what is due after
    ///   receiving), and the timer is moved on before it fires.
    /// - A timer set to fire earlier than needed is left alone unless it would fire within
    ///   a tick: deadlines move later all the time (an RPC ends and its timer entry goes),
    ///   and whoever settles before it fires moves it then. One about to fire for nothing
    ///   is moved, which spares the driver thread a wake-up (and the lock hand-over).
    ///   So is one that has fired (and not yet been consumed) for a deadline no longer
    ///   there.
    /// - A timer set to fire later is always moved earlier.
    ///
    /// Without a deadline the timer is left as it is (it may wake the driver once for
    /// nothing).
    fn arm(&mut self, deadline: Option<Instant>) {
        let Some(d) = deadline else { return };
        if self.armed.is_some() && self.armed_for == d {
            return; // the common case: nothing moved
        }
        let fire = if d % self.tick_ns == 0 { d + TICK_SLACK } else { d };
        let keep = match self.armed {
            Some(a) => a == fire || (a < fire && a > self.now + self.tick_ns),
            None => false,
        };
        if keep {
            return;
        }
        self.armed_for = d;
        self.armed = Some(fire);
        let d = fire;
        // An absolute time already past fires at once.
        let at = self.origin + d.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (at / 1_000_000_000) as libc::time_t,
                tv_nsec: (at % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: our timerfd, a valid itimerspec, and no old value wanted.
        let rc = unsafe {
            libc::timerfd_settime(self.timer, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
        };
        if rc < 0 {
            tracing::error!("timerfd_settime failed: {}", io::Error::last_os_error());
        }
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::RequestReceived { rpc, client_port, message, .. } => {
                self.requests.push_back(Incoming { rpc, client_port, message });
                self.new_requests += 1;
                self.kick |= self.leader && !self.in_leader;
                let wakers = mem::take(&mut self.request_wakers);
                self.to_wake.extend(wakers);
            }
            Event::ResponseReceived { id, message, .. } => self.finish(id, Ok(message)),
            Event::RpcFailed { id, reason, .. } => {
                let Some(dest) = self.calls.get(&id).map(|c| c.dest) else { return };
                let err = match reason {
                    FailReason::Timeout => Error::TimedOut,
                    FailReason::Unreachable => Error::Unreachable(dest),
                    _ => Error::Shutdown,
                };
                self.finish(id, Err(err));
            }
        }
    }

    /// Hands a call its result.
    fn finish(&mut self, id: u64, result: Result<Vec<u8>>) {
        let Some(call) = self.calls.remove(&id) else { return };
        self.kick |= self.leader && !self.in_leader;
        if let Some(d) = call.deadline {
            self.deadlines.remove(&(d, id));
        }
        if let Some(w) = call.completion.complete(result) {
            self.to_wake.push(w);
        }
    }

    /// Starts a call (the caller settles afterwards).
    pub(crate) fn start_call(
        &mut self,
        now: Instant,
        port: u16,
        dest: SocketAddr,
        message: Payload,
        timeout: Option<Duration>,
    ) -> Result<(u64, Arc<Completion>)> {
        if self.closed {
            return Err(Error::Shutdown);
        }
        if dest.port() == 0 || dest.port() >= homa_core::MIN_EPHEMERAL_PORT {
            return Err(Error::InvalidPort(dest.port()));
        }
        let transport = self.transport.as_ref().ok_or(Error::Shutdown)?;
        let peer = transport.peer(dest).ok_or(Error::AddressFamily(dest))?;
        let id = self.endpoint.send_request(now, port, peer, dest.port(), message, 0)?;
        let completion = Arc::new(Completion::default());
        let deadline =
            timeout.map(|t| now.saturating_add(t.as_nanos().try_into().unwrap_or(u64::MAX)));
        if let Some(d) = deadline {
            self.deadlines.insert((d, id));
        }
        self.calls.insert(id, PendingCall { completion: Arc::clone(&completion), dest, deadline });
        Ok((id, completion))
    }

    /// Abandons call `id`, completing it with `error` if given. Returns whether it existed.
    pub(crate) fn cancel(&mut self, id: u64, error: Option<Error>) -> bool {
        let Some(call) = self.calls.get(&id) else { return false };
        let _ = self.endpoint.abort(id);
        match error {
            Some(e) => self.finish(id, Err(e)),
            None => {
                if let Some(d) = call.deadline {
                    self.deadlines.remove(&(d, id));
                }
                self.calls.remove(&id);
            }
        }
        true
    }

    /// Fails every pending call with `Error::Shutdown`.
    fn fail_all(&mut self) {
        let ids: Vec<u64> = self.calls.keys().copied().collect();
        for id in ids {
            self.cancel(id, Some(Error::Shutdown));
        }
    }

    pub(crate) fn pending_calls(&self) -> usize {
        self.calls.len()
    }
}
