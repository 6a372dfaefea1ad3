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
//! [`Receiver`] says who receives; its transitions say when the driver thread's epoll set
//! changes.
//!
//! An event loop that drives the socket ([`Poller`](crate::Poller)) may be busy for
//! seconds with the application's work. The driver thread then waits, one-shot, for the
//! next datagram to arrive; if the loop has not driven for four timer ticks then and
//! datagrams still wait, it receives for the loop (answering RESENDs with BUSY, granting,
//! acknowledging, buffering requests and responses) until the loop drives again
//! ([`state::Stall`]).
//! Protocol progress never waits for the application's thread, as the Linux module's
//! softirq handling never does.
//!
//! The parts: [`state`] (who receives), [`receive`] and [`transmit`] (the driving rule),
//! [`timer`] (the alarm), [`calls`] (what API threads wait for).

mod calls;
mod lead;
mod receive;
mod spin;
mod state;
mod timer;
mod transmit;

#[cfg(test)]
mod tests;

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use homa_core::Endpoint;
use homa_core::time::Nanos;

use calls::{Calls, ToWake};
pub(crate) use calls::{Completion, Incoming};
use receive::Intake;
pub(crate) use spin::DEFAULT_SPIN;
use spin::Spin;
use state::{Receiver, Watch};
use timer::{Alarm, TICK_SLACK};

use crate::cidr::Cidr;
use crate::error::{Error, Result};
use crate::socket::Histogram;
use crate::transport::{
    Batch, RECV_SLOT_LEN, Transport, TransportStats, Waiter, clear, gso_max_packets, signal,
};

/// Timer ticks an event loop may leave input waiting before the driver thread receives
/// for it (see `Inner::stall_limit`).
const STALL_TICKS: Nanos = 4;
/// Datagrams per send or receive batch.
const BATCH: usize = 32;
/// Datagrams per send batch for packets of `packet_len` bytes: about `BATCH`, a whole
/// number of the longest GSO runs, so that a full batch sends no short run (which would
/// cost the kernel as much as a long one).
fn tx_capacity(packet_len: usize) -> usize {
    let run = gso_max_packets(packet_len);
    run * BATCH.div_ceil(run)
}

/// How long the driver thread stays off the transport after a leader leaves, expecting it
/// (or another) back: a thread calling in a loop then costs no epoll_ctl per call.
const LEADER_GRACE: Nanos = 4_000_000;

const TOKEN_SOCKET: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_WAKE: u64 = 2;

/// Counters the driver keeps besides the endpoint's and the transport's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DriverCounters {
    pub(crate) dropped_by_allow_list: u64,
    pub(crate) wakeups: u64,
    /// Receive calls that failed (the round ends; Homa's resends recover what was lost).
    pub(crate) receive_errors: u64,
    /// Send calls that failed as a whole (their datagrams were dropped).
    pub(crate) send_errors: u64,
    /// Times the attached event loop left input waiting for four ticks, and the driver thread
    /// received for it until it drove again.
    pub(crate) loop_stalls: u64,
    /// Timers run `resend_ticks - 1` ticks or more after they were due.
    pub(crate) late_timers: u64,
    /// Payload bytes received straight into their messages.
    pub(crate) bytes_in_place: u64,
}

/// Latency histograms.
#[derive(Debug, Clone, Default)]
pub(crate) struct Latency {
    /// Calls, from their start to their response.
    pub(crate) calls: Histogram,
    /// Requests, from their arrival to their reply.
    pub(crate) served: Histogram,
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
    /// What the waiter received (added to the transport's counters).
    waiter_stats: TransportStats,
    /// Who receives from the transport.
    receiver: Receiver,
    intake: Intake,
    tx: Batch,
    /// Packets are small enough for GSO runs: where the transport sends runs
    /// (`Transport::sends_runs`), they go into the send batch in runs
    /// (`Endpoint::poll_transmit_run`), each one contiguous buffer. Otherwise (64 KB
    /// packets, one per send) a DATA packet's message bytes are its tail.
    tx_runs: bool,
    calls: Calls,
    to_wake: ToWake,
    alarm: Alarm,
    allow: Vec<Cidr>,
    /// The time when the lock was last taken (nanoseconds since the driver started).
    now: Nanos,
    pub(crate) counters: DriverCounters,
    /// Bytes of delivered messages the application still holds ([`Message`]s not yet
    /// dropped); the endpoint counts them against `max_rx_bytes`.
    pub(crate) lent: Arc<AtomicU64>,
    /// Latencies of completed calls and of served requests.
    pub(crate) latency: Latency,
    /// Threads waiting for the endpoint to become idle ([`Shared::wait_idle`]).
    idle_waiters: usize,
    /// Warnings logged (each once per socket) and not yet taken by `Socket::take_warnings`.
    pub(crate) warnings: Vec<String>,
    /// Whether the warning about messages over `max_message_length` was given.
    warned_too_long: bool,
    /// Sends wait in the send batch until [`Shared::uncork`] (see `Poller::cork`).
    corked: bool,
    /// Whether the transport is in the driver thread's epoll set.
    in_epoll: bool,
}

/// What API threads and the driver thread share.
#[derive(Debug)]
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    requests_ready: Condvar,
    /// Notified when the endpoint holds no RPC and nothing is pending.
    idle: Condvar,
    /// The driver thread's epoll set (transport, timer, wake).
    epoll: OwnedFd,
    /// The transport's readiness fd (stable for the transport's life).
    readiness: RawFd,
    /// Wakes the driver thread (shutdown).
    wake: OwnedFd,
    /// Wakes the leader: its wait may be over.
    kick: OwnedFd,
    /// The alarm's timerfd (owned here; [`Alarm`] sets it).
    timer: OwnedFd,
    origin: u64,
    closed: AtomicBool,
    /// Whether and how long a waiting leader polls before it sleeps.
    spin: Spin,
    /// The transport's blocking receiver, if it has one ([`Transport::waiter`]), with a
    /// batch of its own; used by the leader only; `None` once closed.
    waiter: Mutex<Option<(Box<dyn Waiter>, Batch)>>,
    /// Whether the transport has a waiter at all.
    has_waiter: bool,
    /// Whether receives complete on the thread that posted them
    /// ([`Transport::receives_on_poster`]): the driver thread is woken to repost when it
    /// takes over receiving.
    pub(super) receives_on_poster: bool,
    /// Wakes a leader blocked in the waiter; `None` once closed.
    wake_waiter: Mutex<Option<WakeWaiter>>,
    /// `Inner::warnings` is not empty: lets `take_warnings` skip the lock when it is.
    warnings_pending: AtomicBool,
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

fn this_thread() -> std::thread::ThreadId {
    std::thread::current().id()
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        self.receiver.is_closed()
    }

    /// How long an event loop may leave input waiting before the driver thread receives
    /// for it ([`state::Stall`]): four timer ticks, under the five after which a peer
    /// first asks to resend. Shorter, a loop that is only slow is taken over often, at a
    /// cost: with two ticks a Python client with eight 1 MB calls in flight (turns of over
    /// two milliseconds) was taken over 45 times a second, and made half the calls.
    fn stall_limit(&self) -> Nanos {
        STALL_TICKS * self.alarm.tick_ns
    }

    /// How late a timer runs before it counts in `late_timers`: so late that a peer
    /// waiting on this host may ask for a resend because of it alone.
    fn late_limit(&self) -> Nanos {
        let ticks = self.endpoint.config().resend_ticks.saturating_sub(1).max(1);
        u64::from(ticks) * self.alarm.tick_ns
    }

    /// The endpoint holds no RPC, and no call or reply waits.
    fn is_idle(&self) -> bool {
        self.endpoint.rpc_count() == 0 && self.calls.is_empty()
    }
}

impl Shared {
    /// Starts a driver thread for `endpoint` over `transport`.
    pub(crate) fn start(
        endpoint: Endpoint,
        mut transport: Box<dyn Transport>,
        allow: Vec<Cidr>,
        busy_poll: Duration,
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
        let receives_on_poster = transport.receives_on_poster();
        let origin = monotonic_ns();
        let slot_len = endpoint.config().max_packet_len();
        let tick_ns = u64::from(endpoint.config().tick_usecs).max(1) * 1000;
        let inner = Inner {
            endpoint,
            transport: Some(transport),
            closed_stats: TransportStats::default(),
            waiter_stats: TransportStats::default(),
            receiver: Receiver::Driver { claimed: false },
            intake: Intake::new(),
            tx: Batch::new(tx_capacity(slot_len), slot_len),
            tx_runs: gso_max_packets(slot_len) > 1,
            calls: Calls::default(),
            to_wake: ToWake::default(),
            alarm: Alarm::new(timer.as_raw_fd(), origin, tick_ns),
            warnings: Vec::new(),
            warned_too_long: false,
            corked: false,
            in_epoll: true,
            allow,
            now: 0,
            counters: DriverCounters::default(),
            lent: Arc::default(),
            latency: Latency::default(),
            idle_waiters: 0,
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            requests_ready: Condvar::new(),
            idle: Condvar::new(),
            epoll,
            readiness,
            wake,
            kick,
            timer,
            origin,
            closed: AtomicBool::new(false),
            spin: Spin::new(busy_poll),
            waiter: Mutex::new(waiter),
            has_waiter,
            receives_on_poster,
            wake_waiter: Mutex::new(wake_waiter),
            warnings_pending: AtomicBool::new(false),
        });
        let driver = Arc::clone(&shared);
        let thread =
            std::thread::Builder::new().name("homa-driver".into()).spawn(move || driver.run())?;
        Ok((shared, thread))
    }

    /// Nanoseconds since the driver started: the endpoint's clock.
    fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.origin)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// How long a waiting thread polls before it sleeps.
    pub(crate) fn spin_window(&self) -> Duration {
        self.spin.window()
    }

    /// Waits that busy-polled, and those that found their packet so ([`Spin::counts`]).
    pub(crate) fn spin_counts(&self) -> (u64, u64) {
        self.spin.counts()
    }

    /// Runs `f` on the locked state with the current time, then wakes whoever `f` made
    /// ready.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Inner, Nanos) -> R) -> R {
        let mut inner = self.lock();
        let now = inner.clock(self.now());
        let r = f(&mut inner, now);
        self.release(inner);
        r
    }

    /// Warnings logged since the last call (see `Socket::take_warnings`).
    pub(crate) fn take_warnings(&self) -> Vec<String> {
        // A load first: this runs on every event-loop turn, and a swap would write the line.
        if !self.warnings_pending.load(Ordering::Relaxed)
            || !self.warnings_pending.swap(false, Ordering::Acquire)
        {
            return Vec::new();
        }
        std::mem::take(&mut self.lock().warnings)
    }

    fn release(&self, mut inner: MutexGuard<'_, Inner>) {
        let to_wake = &mut inner.to_wake;
        let wakers =
            if to_wake.wakers.is_empty() { Vec::new() } else { mem::take(&mut to_wake.wakers) };
        let new = mem::take(&mut to_wake.new_requests).min(inner.calls.request_sleepers);
        let kick = mem::take(&mut inner.to_wake.kick);
        let blocked = inner.receiver.leader_blocking();
        let idle = inner.idle_waiters > 0 && inner.is_idle();
        if !inner.warnings.is_empty() {
            self.warnings_pending.store(true, Ordering::Release);
        }
        drop(inner);
        if idle {
            self.idle.notify_all();
        }
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

    /// Applies a transition's effect on the driver thread's epoll set.
    fn apply(&self, inner: &mut Inner, watch: Watch) {
        let events = match watch {
            Watch::Keep => return,
            Watch::Start => libc::EPOLLIN,
            Watch::Once => libc::EPOLLIN | libc::EPOLLONESHOT,
            Watch::Stop => 0,
        };
        if inner.is_closed() {
            return; // the descriptor is gone (its number may be another's now)
        }
        if watch == Watch::Start {
            inner.waiter_in_use(false);
            if self.receives_on_poster {
                signal(self.wake.as_raw_fd()); // to post its own receive
            }
        }
        // Removed from the epoll set, not just muted: a muted entry still sits on the
        // socket's wait queue and costs every arriving packet a callback.
        let op = match (inner.in_epoll, watch) {
            (true, Watch::Stop) => libc::EPOLL_CTL_DEL,
            (false, Watch::Stop) => return,
            (true, _) => libc::EPOLL_CTL_MOD,
            (false, _) => libc::EPOLL_CTL_ADD,
        };
        inner.in_epoll = watch != Watch::Stop;
        let mut ev = libc::epoll_event { events: events as u32, u64: TOKEN_SOCKET };
        // SAFETY: both descriptors are open; ev is a valid epoll_event.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, self.readiness, &mut ev) };
        if rc < 0 {
            tracing::error!("epoll_ctl: {}", io::Error::last_os_error());
        }
    }

    /// Attaches an event loop ([`Poller`](crate::Poller)): from now on it watches the
    /// transport and receives (in [`drive`](Shared::drive)); returns the fd to watch.
    pub(crate) fn attach(&self) -> Result<RawFd> {
        let mut inner = self.lock();
        let r = if inner.is_closed() {
            Err(Error::Shutdown)
        } else {
            let now = inner.clock(self.now());
            match inner.receiver.attach(this_thread(), now) {
                None => Err(Error::PollerExists),
                Some(watch) => {
                    self.apply(&mut inner, watch);
                    inner.waiter_in_use(false); // the loop watches the readiness fd
                    inner.receive_here();
                    Ok(self.readiness)
                }
            }
        };
        self.release(inner);
        r
    }

    /// Detaches the event loop: the driver thread watches the transport again.
    pub(crate) fn detach(&self) {
        let mut inner = self.lock();
        let watch = inner.receiver.detach();
        self.apply(&mut inner, watch);
        // A loop gone between cork and uncork leaves nothing held back.
        inner.corked = false;
        inner.settle(false);
        self.release(inner);
    }

    /// The attached event loop's turn: receives what has arrived, hands it to the endpoint,
    /// runs due timers and sends what they produced, without blocking. Wakers of calls
    /// and requests it completed are woken on this thread before it returns. Returns the
    /// number of datagrams received.
    pub(crate) fn drive(&self) -> usize {
        let mut inner = self.lock();
        let now = inner.clock(self.now());
        let watch = inner.receiver.loop_turn(this_thread(), now);
        self.apply(&mut inner, watch);
        inner.receive_here();
        // A leader blocked in the waiter's receive owns the socket until it returns.
        let got = if inner.receiver.leader_blocking() {
            0
        } else if inner.intake.loop_vlen == 1 && !inner.intake.placing {
            // Usually one datagram woke the loop: one `recvfrom`, no batch set up. If more
            // wait, the descriptor stays readable and the next turn takes batches.
            inner.receive_one(now)
        } else {
            inner.receive(now)
        };
        inner.intake.loop_vlen = if got >= inner.intake.loop_vlen { BATCH } else { 1 };
        inner.settle(true);
        self.release(inner);
        got
    }

    /// Holds sends back: packets wait in the send batch (sent when it fills) until
    /// [`uncork`](Shared::uncork).
    pub(crate) fn cork(&self) {
        self.lock().corked = true;
    }

    /// Sends what waits in the send batch, and sends at once again.
    pub(crate) fn uncork(&self) {
        let mut inner = self.lock();
        inner.corked = false;
        inner.settle(false); // sends, and hands the endpoint what the sends were refused
        self.release(inner);
    }

    /// The attached event loop saw an error condition on the transport: reads the socket's
    /// error queue (ICMP errors), fails the RPCs of peers found unreachable, wakes them.
    pub(crate) fn read_errors(&self) {
        let mut inner = self.lock();
        inner.read_errors();
        inner.settle(false);
        self.release(inner);
    }

    /// Blocks until a request is queued; `Error::TimedOut` after `timeout`.
    pub(crate) fn next_request(&self, timeout: Option<Duration>) -> Result<Incoming> {
        let end = timeout.map(|t| std::time::Instant::now() + t);
        let take = |inner: &mut Inner| {
            if inner.is_closed() { None } else { inner.calls.requests.pop_front() }
        };
        if let Some(Some(r)) = self.lead(end, |inner| !inner.calls.requests.is_empty(), take) {
            return Ok(r);
        }
        let mut inner = self.lock();
        loop {
            if inner.is_closed() {
                return Err(Error::Shutdown);
            }
            if let Some(r) = inner.calls.requests.pop_front() {
                return Ok(r);
            }
            let left = end.map(|e| e.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(Error::TimedOut);
            }
            inner.calls.request_sleepers += 1;
            inner = match left {
                None => self.requests_ready.wait(inner).unwrap_or_else(|e| e.into_inner()),
                Some(left) => {
                    let waited = self.requests_ready.wait_timeout(inner, left);
                    waited.unwrap_or_else(|e| e.into_inner()).0
                }
            };
            inner.calls.request_sleepers -= 1;
        }
    }

    /// Blocks until the endpoint holds no RPC (every call complete, every response sent and
    /// acknowledged) and nothing waits to be sent, or `timeout` passes; returns whether it
    /// is idle. Whoever drives the socket meanwhile (the driver thread, a leader) goes on.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            if inner.is_closed() || inner.is_idle() {
                return !inner.is_closed() || inner.endpoint.rpc_count() == 0;
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            inner.idle_waiters += 1;
            inner = self.idle.wait_timeout(inner, left).unwrap_or_else(|e| e.into_inner()).0;
            inner.idle_waiters -= 1;
        }
    }

    /// A queued request, if any, without waiting.
    pub(crate) fn try_request(&self) -> Result<Option<Incoming>> {
        let mut inner = self.lock();
        let r = if inner.is_closed() {
            Err(Error::Shutdown)
        } else {
            Ok(inner.calls.requests.pop_front())
        };
        drop(inner);
        r
    }

    /// A queued request, or registers `waker` for the next one.
    pub(crate) fn poll_request(&self, waker: &Waker) -> Option<Result<Incoming>> {
        let mut inner = self.lock();
        if inner.is_closed() {
            return Some(Err(Error::Shutdown));
        }
        if let Some(r) = inner.calls.requests.pop_front() {
            return Some(Ok(r));
        }
        self.need_driver(&mut inner);
        let wakers = &mut inner.calls.request_wakers;
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
        None
    }

    /// Closes: pending calls fail with `Error::Shutdown`, waiting receivers return it, the
    /// transport is closed (its port is free when this returns, whoever still holds the
    /// shared state) and the driver thread exits. Idempotent.
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        let transport = if inner.is_closed() {
            None
        } else {
            inner.receiver.close();
            inner.to_wake.kick = true; // a leader waiting in `poll` must see it
            inner.corked = false; // what a loop's last turn sent goes out before the end
            inner.fail_all();
            inner.calls.requests.clear();
            let wakers = mem::take(&mut inner.calls.request_wakers);
            inner.to_wake.wakers.extend(wakers);
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

    /// The event loop had its time to drive since input arrived: if it did not and input
    /// still waits, the driver thread receives for it until it drives again (see
    /// [`state::Stall`]). What it completes meanwhile reaches the loop through the wakers,
    /// and what it sends goes at once: a loop stalled mid-turn may have corked the socket.
    fn check_loop(&self, inner: &mut Inner, now: Nanos) {
        let waiting = inner.input_waiting();
        let limit = inner.stall_limit();
        let watch = inner.receiver.check(now, limit, waiting);
        self.apply(inner, watch);
        if inner.receiver.rescuing() {
            inner.counters.loop_stalls += 1;
            inner.corked = false;
        }
    }

    /// The driver thread: wait for packets, deadlines or shutdown; handle them; repeat.
    fn run(self: Arc<Shared>) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let mut inner = self.lock();
        if inner.receiver.driver_watches() {
            inner.receive_here(); // the receive was posted by the thread that opened it
        }
        self.release(inner);
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
            let (mut fired, mut errored, mut readable) = (false, false, false);
            for ev in &events[..n as usize] {
                match ev.u64 {
                    TOKEN_TIMER => {
                        clear(self.timer.as_raw_fd());
                        fired = true;
                    }
                    TOKEN_WAKE => clear(self.wake.as_raw_fd()),
                    _ => {
                        errored |= ev.events & libc::EPOLLERR as u32 != 0;
                        readable |= ev.events & libc::EPOLLIN as u32 != 0;
                    }
                }
            }
            let mut inner = self.lock();
            let woke = self.now();
            if fired {
                if inner.alarm.armed().is_some_and(|at| woke >= at + inner.late_limit()) {
                    inner.counters.late_timers += 1;
                }
                inner.alarm.fired(); // consumed: the next settle arms it again
            }
            // Epoll reports an error condition to every watcher, a one-shot one too. While
            // an event loop keeps up, errors are its to read, as datagrams are (it sees the
            // condition too); either is input that starts a stall check.
            if errored && inner.receiver.driver_watches() {
                inner.read_errors();
            }
            let now = inner.clock(woke);
            inner.counters.wakeups += 1;
            if inner.receiver.grace().is_some_and(|g| g <= now) {
                self.need_driver(&mut inner);
            }
            if readable || errored {
                let limit = inner.stall_limit();
                let watch = inner.receiver.input_arrived(now, limit);
                self.apply(&mut inner, watch);
            }
            if inner.receiver.deadline().is_some_and(|d| d <= now) {
                self.check_loop(&mut inner, now);
            }
            if let Some(lead) = inner.receiver.lead_mut()
                && lead.until.is_some_and(|u| u <= now)
            {
                lead.until = None;
                inner.to_wake.kick = true; // the leader's wait is over
            }
            // Timers run only once what had arrived is handled: a response waiting in the
            // socket queue must count before its RPC is judged silent. A leader blocked in
            // the waiter's receive takes it instead: this thread must not, or it could
            // swallow the datagram that wakes the leader. A loop that keeps up receives its
            // own datagrams (it is woken for them too) unless timers are due: a stall check
            // that found it keeping up is no reason to take its input.
            let loop_receives = inner.receiver.loop_keeps_up()
                && !(fired && inner.timers_deadline().is_some_and(|d| d <= now));
            if loop_receives {
                // Its turn comes.
            } else if !inner.receiver.leader_blocking() {
                inner.receive(now);
            } else if fired && inner.input_waiting() {
                // Datagrams wait and the leader is being woken for them: it runs the due
                // timers once it has taken them. Run here first, they would judge silent
                // what sits in the queue (RESENDs, duplicate retransmissions); look again
                // shortly in case the leader is slow to run.
                let retry = now + TICK_SLACK;
                inner.alarm.arm(Some(retry), now);
                self.release(inner);
                continue;
            }
            inner.settle(true);
            if inner.receiver.driver_watches() {
                inner.receive_here(); // before it waits again
            }
            self.release(inner);
        }
    }
}
