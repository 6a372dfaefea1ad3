//! [`Reactor`]: a socket's calls and receives as the futures of another language's event
//! loop (asyncio, Node's libuv), for bindings.
//!
//! A binding starts a call or a receive and [`park`](Reactor::park)s it with the handle of
//! the language's future (an asyncio future, a promise's deferred). The event loop watches
//! [`Poller::fd`] and calls [`Reactor::drive`] when it is readable: datagrams are received
//! and handled on the loop's thread, and the futures they complete are woken there, which
//! puts their tokens on the ready list. [`Reactor::take_done`] then polls those and returns
//! what finished, with its handle, for the binding to settle.
//!
//! Futures completed on another thread (homa-io's driver thread runs timers, and receives
//! while the loop is busy: see the crate's README) put their tokens on the list too and,
//! if it was empty, call the binding's wake-up hook (an eventfd write, `uv_async_send`):
//! the loop's callback for it calls `take_done`. So the loop learns of every completion,
//! once: a token pushed onto an empty list always fires the hook unless the loop itself is
//! inside `drive` (it calls `take_done` right after), and the list is emptied only by
//! `take_done`, which the hook's callback runs. The hook runs on whatever thread completes
//! the future, never with the socket's lock held; it must not block or call into the
//! language.
//!
//! Busy polling, as a thread blocked in [`Socket::call`](crate::Socket::call) does and as
//! the Linux module does in `recvmsg` (`poll_usecs`): after a call starts or a datagram
//! arrives ([`busy_poll`](Reactor::busy_poll)), the loop goes on polling without sleeping
//! for the socket's window ([`Builder::busy_poll`](crate::Builder::busy_poll), 50 µs by
//! default) while [`keep_polling`](Reactor::keep_polling) says so, so that a response
//! coming back within it costs no wake-up of a sleeping thread. It adapts: a window that
//! ends with calls or receives pending and no datagram, when none comes within four windows
//! of its start either, makes the next 1, 2, 4, ... up to 1,024 chances to poll pass (an
//! idle process, or one starved of CPU so that answers come late, polls almost never); a
//! window that pays starts over. A datagram that comes late, but within those four windows,
//! is let pass: the peer was asleep, and answers sooner once it polls too. Between two
//! event loops polling pays only when both poll, so a rule that gave up on the first late
//! answer would never start. (Tried: counting four late answers in a row as an unpaid
//! window stopped a client from polling in vain for a peer that never polls, but two Node
//! processes then rarely settled into polling together, and their p50 went from a quarter
//! of TCP's to above it.) So a socket whose peer never polls polls for at most one window
//! per call. A blocked thread's polling also stops when a yield runs another thread; a loop
//! does not yield, and between two processes on two CPUs it is preempted by its peer's work
//! in most windows that pay, so that is no sign here.
//!
//! Threads: `park`, `drive`, `take_done` and `cancel` are for the loop's thread (the
//! reactor locks its own state, so a binding whose language objects are shareable may
//! call them from others); the wakers run on any thread and touch only the ready list.
//! At shutdown the socket fails every pending call and receive with
//! [`Error::Shutdown`](crate::Error::Shutdown), which wakes them like any completion.

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::socket::{Call, Message, Poller, RecvRequest, Request};

/// What a binding parks: a call awaiting its response, or a wait for the next request.
#[derive(Debug)]
pub enum Op {
    /// [`Socket::call_async`](crate::Socket::call_async).
    Call(Call),
    /// [`Socket::recv_request_async`](crate::Socket::recv_request_async).
    Recv(RecvRequest),
}

/// A parked operation's outcome.
#[derive(Debug)]
pub enum Done {
    /// A call's response, or why it failed.
    Response(Result<Message>),
    /// A request, or why none will come (shutdown).
    Request(Result<Request>),
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

/// What [`Reactor::park`] made of an operation.
#[derive(Debug)]
pub enum Parked<T> {
    /// Pending: [`take_done`](Reactor::take_done) returns it when it completes.
    Pending,
    /// It was done already: the handle back, with the outcome.
    Done(T, Done),
}

/// The tokens of woken futures, and the binding's wake-up hook.
struct Ready {
    tokens: Mutex<Vec<u64>>,
    wake: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready").field("tokens", &self.tokens).finish_non_exhaustive()
    }
}

thread_local! {
    /// The ready list of the reactor this thread is driving now (see [`Reactor::drive`]).
    static DRIVING: Cell<*const Ready> = const { Cell::new(std::ptr::null()) };
}

/// The waker of one parked future: its token onto the ready list, and the hook if the list
/// was empty and the loop is not the one driving.
struct TokenWaker {
    ready: Arc<Ready>,
    token: u64,
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
        let driving = DRIVING.with(|d| std::ptr::eq(d.get(), Arc::as_ptr(&self.ready)));
        if first && !driving {
            (self.ready.wake)();
        }
    }
}

struct Entry<T> {
    op: Op,
    handle: T,
    waker: Waker,
}

/// A socket's pending calls and receives for one event loop; `T` is the binding's handle
/// for the future each settles (see the module docs).
pub struct Reactor<T> {
    ready: Arc<Ready>,
    parked: Mutex<HashMap<u64, Entry<T>>>,
    next: AtomicU64,
    busy: Mutex<BusyPoll>,
}

/// The most chances to poll that one unpaid window makes pass.
const MAX_SKIP: u32 = 1024;

/// A datagram this many windows after a window began still shows a conversation: the
/// window was too short only because the peer slept (its own polling shortens its answer).
const CONVERSATION: u32 = 4;

/// When the loop polls without sleeping (see the module docs).
#[derive(Debug)]
struct BusyPoll {
    /// How long a window lasts; zero: never poll.
    window: Duration,
    /// The window now running: its end and its start.
    until: Option<Instant>,
    started: Instant,
    /// A datagram arrived in the window now running.
    paid: bool,
    /// The start of a window that ended without a datagram: the next datagram says whether
    /// it was a conversation (see [`CONVERSATION`]).
    unpaid_since: Option<Instant>,
    /// Chances to poll left to pass, and how many the next unpaid window makes pass.
    skip: u32,
    backoff: u32,
}

impl BusyPoll {
    fn new(window: Duration) -> BusyPoll {
        BusyPoll {
            window,
            until: None,
            started: Instant::now(),
            paid: false,
            unpaid_since: None,
            skip: 0,
            backoff: 1,
        }
    }

    fn activity(&mut self, arrived: bool) -> bool {
        if self.window.is_zero() {
            return false;
        }
        let now = Instant::now();
        if arrived
            && let Some(since) = self.unpaid_since.take()
            && now - since > self.window * CONVERSATION
        {
            self.back_off();
        }
        if self.until.is_some() {
            // A datagram in the window pays for it; activity keeps it open.
            self.paid |= arrived;
            self.until = Some(now + self.window);
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        self.until = Some(now + self.window);
        (self.started, self.paid) = (now, false);
        true
    }

    fn keep_polling(&mut self, pending: bool) -> bool {
        let Some(until) = self.until else { return false };
        if pending && Instant::now() < until {
            return true;
        }
        self.until = None;
        if self.paid {
            self.backoff = 1;
        } else if pending {
            self.unpaid_since = Some(self.started);
        }
        false
    }

    fn back_off(&mut self) {
        self.skip = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_SKIP);
    }
}

impl<T> std::fmt::Debug for Reactor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor").field("pending", &self.pending()).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T> Reactor<T> {
    /// A reactor whose completions on other threads call `wake` (which makes the event
    /// loop call [`take_done`](Reactor::take_done) soon), busy-polling for `busy_poll`
    /// after activity (the socket's [`Socket::busy_poll`](crate::Socket::busy_poll);
    /// zero: never).
    pub fn new(wake: impl Fn() + Send + Sync + 'static, busy_poll: Duration) -> Reactor<T> {
        Reactor {
            ready: Arc::new(Ready { tokens: Mutex::new(Vec::new()), wake: Box::new(wake) }),
            parked: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            busy: Mutex::new(BusyPoll::new(busy_poll)),
        }
    }

    /// A call started (`arrived` false) or datagrams arrived (true): whether the loop
    /// should start polling without sleeping, calling [`drive`](Reactor::drive) and
    /// [`keep_polling`](Reactor::keep_polling) each time round (false also while it
    /// already polls).
    pub fn busy_poll(&self, arrived: bool) -> bool {
        lock(&self.busy).activity(arrived)
    }

    /// Whether the loop should go on polling: its window is open and operations are
    /// pending. `false` ends the window (and learns from it).
    pub fn keep_polling(&self) -> bool {
        let pending = self.pending() > 0;
        lock(&self.busy).keep_polling(pending)
    }

    /// A token no other operation of this reactor was given by it.
    pub fn next_token(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Polls `op` once: done, it comes back with `handle`; else it is kept under `token`
    /// (unique among the pending) until it completes or is cancelled.
    pub fn park(&self, token: u64, mut op: Op, handle: T) -> Parked<T> {
        let waker = Waker::from(Arc::new(TokenWaker { ready: Arc::clone(&self.ready), token }));
        match op.poll(&waker) {
            Some(done) => Parked::Done(handle, done),
            None => {
                lock(&self.parked).insert(token, Entry { op, handle, waker });
                Parked::Pending
            }
        }
    }

    /// The loop's turn: reads the socket's error queue first if the loop saw an error
    /// condition (`errored`), then receives and handles what arrived ([`Poller::drive`]).
    /// Futures completed meanwhile need no wake-up hook: call
    /// [`take_done`](Reactor::take_done) next. Returns the datagrams received.
    pub fn drive(&self, poller: &Poller, errored: bool) -> usize {
        struct Driving;
        impl Drop for Driving {
            fn drop(&mut self) {
                DRIVING.with(|d| d.set(std::ptr::null()));
            }
        }
        DRIVING.with(|d| d.set(Arc::as_ptr(&self.ready)));
        let _driving = Driving;
        if errored {
            poller.read_errors();
        }
        poller.drive()
    }

    /// The parked operations that completed since the last call, with their handles.
    pub fn take_done(&self) -> Vec<(T, Done)> {
        let tokens = std::mem::take(&mut *lock(&self.ready.tokens));
        if tokens.is_empty() {
            return Vec::new();
        }
        let mut done = Vec::new();
        let mut parked = lock(&self.parked);
        for token in tokens {
            let Some(e) = parked.get_mut(&token) else { continue }; // cancelled
            if let Some(d) = e.op.poll(&e.waker) {
                let e = parked.remove(&token).expect("present");
                done.push((e.handle, d));
            }
        }
        done
    }

    /// Forgets operation `token` (a call's RPC is aborted; the server is not told) and
    /// returns its handle, if it was pending.
    pub fn cancel(&self, token: u64) -> Option<T> {
        let entry = lock(&self.parked).remove(&token);
        entry.map(|e| e.handle)
    }

    /// Forgets every pending operation (at close), returning their handles.
    pub fn cancel_all(&self) -> Vec<T> {
        let parked = std::mem::take(&mut *lock(&self.parked));
        parked.into_values().map(|e| e.handle).collect()
    }

    /// Operations parked and not yet done.
    pub fn pending(&self) -> usize {
        lock(&self.parked).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chances to poll that pass before one starts a window.
    fn skipped(b: &mut BusyPoll) -> usize {
        std::iter::from_fn(|| (!b.activity(false)).then_some(())).take(10_000).count()
    }

    #[test]
    fn a_zero_window_never_polls() {
        let mut b = BusyPoll::new(Duration::ZERO);
        assert!(!b.activity(false) && !b.activity(true) && !b.keep_polling(true));
    }

    /// Ends the running window now, with calls pending and no datagram in it, and has
    /// the next datagram come `late` windows after it began.
    fn unpaid(b: &mut BusyPoll, late: u32) {
        b.until = Some(Instant::now());
        assert!(!b.keep_polling(true));
        b.unpaid_since = b.unpaid_since.map(|t| t - b.window * late);
    }

    /// The late datagram arrives (it judges the window, and is a chance that passes if any
    /// does): the chances that pass, counted until one starts a window.
    fn judged(b: &mut BusyPoll) -> usize {
        if b.activity(true) {
            return 0;
        }
        1 + skipped(b)
    }

    #[test]
    fn windows_unanswered_make_ever_more_chances_pass_and_a_paid_one_starts_over() {
        let mut b = BusyPoll::new(Duration::from_secs(1));
        assert!(b.activity(false), "a call starts: poll");
        assert!(!b.activity(false), "already polling");
        assert!(b.keep_polling(true), "the window is open");
        let mut counts = Vec::new();
        for _ in 0..3 {
            unpaid(&mut b, 5);
            counts.push(judged(&mut b));
        }
        assert_eq!(counts, [1, 2, 4]);
        // A datagram in the window pays for it: the next unanswered one skips one chance.
        assert!(!b.activity(true), "arrivals keep the window open");
        b.until = Some(Instant::now());
        assert!(!b.keep_polling(true));
        assert!(b.activity(false), "paid: no chance passes");
        unpaid(&mut b, 5);
        assert_eq!(judged(&mut b), 1);
    }

    #[test]
    fn a_late_answer_is_a_conversation_and_a_much_later_one_is_not() {
        let mut b = BusyPoll::new(Duration::from_millis(10));
        assert!(b.activity(false));
        // The window ends without a datagram, with calls pending.
        b.until = Some(Instant::now());
        assert!(!b.keep_polling(true));
        // The answer comes within four windows: polling goes on at once, every time.
        for _ in 0..10 {
            assert!(b.activity(true), "a conversation: no chance passes");
            b.until = Some(Instant::now());
            assert!(!b.keep_polling(true));
        }
        // One that comes only after four windows: the next chance passes.
        b.unpaid_since = Some(Instant::now() - Duration::from_millis(41));
        assert!(!b.activity(true));
        assert!(b.activity(false));
        // Nothing pending when a window ends: nothing learnt.
        b.until = Some(Instant::now());
        assert!(!b.keep_polling(false));
        assert_eq!((b.unpaid_since, b.skip), (None, 0));
    }
}
