//! Calls and requests: what API threads and tasks wait for, and how the endpoint's events
//! complete them. A send the endpoint has no room for (its outgoing bytes would pass
//! `wmem_max`) waits for room, as a write to a full socket would, oldest first.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::Waker;
use std::time::Duration;

use homa_core::time::Nanos;
use homa_core::{ApiError, Event, FailReason, Instant, Payload, ServerRpc};

use super::Inner;
use crate::error::{Error, Result};
use crate::socket::Message;

/// Hashes RPC ids (our own counter, so no peer chooses them) with one multiplication
/// instead of SipHash.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

#[derive(Debug)]
pub(super) struct IdHasher(u64);

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

/// The outcome of one call, filled by the driver, awaited by a thread or a task.
#[derive(Debug, Default)]
pub(crate) struct Completion {
    state: Mutex<CallState>,
    cv: Condvar,
    done: AtomicBool,
}

#[derive(Debug, Default)]
struct CallState {
    result: Option<Result<Message>>,
    waker: Option<Waker>,
    /// A thread sleeps on `cv` (notifying costs a system call; skip it otherwise).
    sleeping: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Completion {
    /// Stores the result; returns the task to wake, if one is waiting.
    fn complete(&self, result: Result<Message>) -> Option<Waker> {
        let mut s = lock(&self.state);
        s.result = Some(result);
        self.done.store(true, Ordering::Release);
        if s.sleeping {
            self.cv.notify_all();
        }
        s.waker.take()
    }

    /// The result if there is one, else registers `waker` to be woken with it.
    pub(crate) fn poll(&self, waker: &Waker) -> Option<Result<Message>> {
        let mut s = lock(&self.state);
        let r = s.result.take();
        if r.is_none() && !s.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            s.waker = Some(waker.clone());
        }
        r
    }

    pub(super) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Blocks until the result is there or `until` passes (then `None`).
    pub(super) fn wait_until(&self, until: std::time::Instant) -> Option<Result<Message>> {
        let mut s = lock(&self.state);
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
    pub(super) fn wait(&self) -> Result<Message> {
        let mut s = lock(&self.state);
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
    deadline: Option<Nanos>,
    /// When it started, for the latency histogram.
    started: Nanos,
    /// The endpoint's RPC, once it took the request (until then the request waits for room).
    rpc: Option<u64>,
}

/// A send waiting for room in the endpoint's send buffer.
#[derive(Debug)]
enum Waiting {
    /// A call's request (call id; the request's source port, transport address, Homa port).
    Call { id: u64, port: u16, peer: SocketAddr, dest_port: u16, message: Payload },
    /// A server's response.
    Reply { rpc: ServerRpc, message: Payload },
}

/// A request received and not yet taken by the application.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub(crate) rpc: ServerRpc,
    pub(crate) client_port: u16,
    pub(crate) message: Message,
    /// When it was delivered, for the latency histogram of served requests.
    pub(crate) arrived: Nanos,
}

/// Calls in flight and requests waiting to be taken.
#[derive(Debug, Default)]
pub(super) struct Calls {
    /// By call id (the RPC's cookie).
    calls: HashMap<u64, PendingCall, IdHash>,
    next_call: u64,
    /// Sends waiting for room, oldest first.
    waiting: VecDeque<Waiting>,
    /// Application deadlines of calls: (when, id).
    deadlines: BTreeSet<(Nanos, u64)>,
    pub(super) requests: VecDeque<Incoming>,
    /// Tasks waiting for a request.
    pub(super) request_wakers: Vec<Waker>,
    /// Threads sleeping until a request is queued.
    pub(super) request_sleepers: usize,
}

impl Calls {
    pub(super) fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether sends wait for room.
    pub(super) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether nothing is pending: no call, no send waiting for room.
    pub(super) fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.waiting.is_empty()
    }

    /// Whether anyone waits for the transport: a call pending, or a thread or task waiting
    /// for a request.
    pub(super) fn anyone_waits(&self) -> bool {
        !self.calls.is_empty() || self.request_sleepers > 0 || !self.request_wakers.is_empty()
    }

    /// The earliest call deadline.
    pub(super) fn next_deadline(&self) -> Option<Nanos> {
        self.deadlines.first().map(|&(when, _)| when)
    }

    /// Takes a call whose deadline is at or before `now`.
    pub(super) fn pop_expired(&mut self, now: Nanos) -> Option<u64> {
        let &(when, id) = self.deadlines.first()?;
        (when <= now).then(|| {
            self.deadlines.pop_first();
            id
        })
    }

    /// Forgets call `id`, returning its completion.
    fn remove(&mut self, id: u64) -> Option<PendingCall> {
        let call = self.calls.remove(&id)?;
        if let Some(d) = call.deadline {
            self.deadlines.remove(&(d, id));
        }
        Some(call)
    }

    fn ids(&self) -> Vec<u64> {
        self.calls.keys().copied().collect()
    }
}

/// What to do once the lock is released: wake tasks and threads that something completed
/// for. (Waking with the lock held would make them wait for it at once.)
#[derive(Debug, Default)]
pub(super) struct ToWake {
    pub(super) wakers: Vec<Waker>,
    /// Requests queued since the lock was taken (threads to notify).
    pub(super) new_requests: usize,
    /// Someone other than the leader completed something: kick the leader.
    pub(super) kick: bool,
}

impl Inner {
    /// Hands an event of the endpoint to whoever waits for it.
    pub(super) fn dispatch(&mut self, event: Event) {
        match event {
            Event::RequestReceived { rpc, client_port, message, .. } => {
                let message = Message::lend(message, &self.lent);
                let arrived = self.now;
                self.calls.requests.push_back(Incoming { rpc, client_port, message, arrived });
                self.to_wake.new_requests += 1;
                self.kick_leader();
                let wakers = std::mem::take(&mut self.calls.request_wakers);
                self.to_wake.wakers.extend(wakers);
            }
            Event::ResponseReceived { cookie: id, message, .. } => {
                self.finish(id, Ok(Message::lend(message, &self.lent)));
            }
            Event::RpcFailed { cookie: id, reason, .. } => {
                let Some(dest) = self.calls.calls.get(&id).map(|c| c.dest) else { return };
                let err = match reason {
                    FailReason::Timeout => Error::PeerSilent(dest),
                    FailReason::Unreachable => Error::Unreachable(dest),
                    _ => Error::Shutdown,
                };
                self.finish(id, Err(err));
            }
        }
    }

    /// A leader waiting elsewhere than in this turn must look: what it waits for may be
    /// done.
    fn kick_leader(&mut self) {
        self.to_wake.kick |= self.receiver.lead().is_some_and(|l| !l.in_turn);
    }

    /// Hands a call its result.
    fn finish(&mut self, id: u64, result: Result<Message>) {
        let Some(call) = self.calls.remove(id) else { return };
        if result.is_ok() {
            self.latency.calls.record(self.now.saturating_sub(call.started));
        }
        self.kick_leader();
        if let Some(w) = call.completion.complete(result) {
            self.to_wake.wakers.push(w);
        }
    }

    /// Starts a call (the caller settles afterwards): sends the request, or with `wait`
    /// queues it until the endpoint has room for it. Returns the call's id (for `cancel`)
    /// and its completion.
    pub(crate) fn start_call(
        &mut self,
        now: Nanos,
        port: u16,
        dest: SocketAddr,
        message: Payload,
        timeout: Option<Duration>,
        wait: bool,
    ) -> Result<(u64, Arc<Completion>)> {
        if self.is_closed() {
            return Err(Error::Shutdown);
        }
        if dest.port() == 0 || dest.port() >= homa_core::MIN_EPHEMERAL_PORT {
            return Err(ApiError::InvalidPort(dest.port()).into());
        }
        let transport = self.transport.as_ref().ok_or(Error::Shutdown)?;
        let peer = transport.peer(dest).ok_or(Error::AddressFamily(dest))?;
        let id = self.calls.next_call;
        // Behind sends already waiting, so that a long one is not passed for ever.
        let rpc = match self.room_for(message.len()) {
            Ok(()) => {
                let at = Instant::from_nanos(now);
                Some(self.endpoint.send_request(at, port, peer, dest.port(), message, id)?)
            }
            Err(ApiError::TxBufferFull) if wait => {
                let dest_port = dest.port();
                self.calls.waiting.push_back(Waiting::Call { id, port, peer, dest_port, message });
                None
            }
            Err(e) => return Err(e.into()),
        };
        self.calls.next_call += 1;
        let completion = Arc::new(Completion::default());
        let deadline =
            timeout.map(|t| now.saturating_add(t.as_nanos().try_into().unwrap_or(u64::MAX)));
        if let Some(d) = deadline {
            self.calls.deadlines.insert((d, id));
        }
        let call =
            PendingCall { completion: Arc::clone(&completion), dest, deadline, started: now, rpc };
        self.calls.calls.insert(id, call);
        Ok((id, completion))
    }

    /// Whether a message of `len` bytes may go now: it has a valid length, the endpoint has
    /// room for it, and nothing waits before it.
    fn room_for(&self, len: usize) -> Result<(), ApiError> {
        self.endpoint.check_send(len)?;
        if self.calls.waiting.is_empty() { Ok(()) } else { Err(ApiError::TxBufferFull) }
    }

    /// Answers request `rpc`, or queues the answer until the endpoint has room for it.
    pub(crate) fn reply(
        &mut self,
        now: Nanos,
        rpc: ServerRpc,
        arrived: Nanos,
        message: Payload,
    ) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Shutdown);
        }
        self.latency.served.record(now.saturating_sub(arrived));
        match self.room_for(message.len()) {
            Ok(()) => {}
            Err(ApiError::TxBufferFull) => {
                self.calls.waiting.push_back(Waiting::Reply { rpc, message });
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        match self.endpoint.send_response(Instant::from_nanos(now), rpc, message) {
            // The client went away: success, as the module's `sendmsg`.
            Ok(()) | Err(ApiError::UnknownRpc(_) | ApiError::NotAwaitingResponse(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends what waits for room, oldest first, while the endpoint has room; returns
    /// whether anything went.
    pub(super) fn send_waiting(&mut self, now: Nanos) -> bool {
        let at = Instant::from_nanos(now);
        let mut sent = false;
        while let Some(front) = self.calls.waiting.front() {
            let len = match front {
                Waiting::Call { message, .. } | Waiting::Reply { message, .. } => message.len(),
            };
            if self.endpoint.check_send(len).is_err() {
                break; // no room yet (lengths were checked when they queued)
            }
            sent = true;
            match self.calls.waiting.pop_front().expect("looked at") {
                Waiting::Call { id, port, peer, dest_port, message } => {
                    match self.endpoint.send_request(at, port, peer, dest_port, message, id) {
                        Ok(rpc) => {
                            if let Some(call) = self.calls.calls.get_mut(&id) {
                                call.rpc = Some(rpc);
                            }
                        }
                        Err(e) => self.finish(id, Err(e.into())),
                    }
                }
                Waiting::Reply { rpc, message } => {
                    let _ = self.endpoint.send_response(at, rpc, message);
                }
            }
        }
        sent
    }

    /// Abandons call `id`, completing it with `error` if given. Returns whether it existed.
    pub(crate) fn cancel(&mut self, id: u64, error: Option<Error>) -> bool {
        let Some(call) = self.calls.calls.get(&id) else { return false };
        match call.rpc {
            Some(rpc) => {
                let _ = self.endpoint.abort(rpc);
            }
            None => {
                self.calls
                    .waiting
                    .retain(|w| !matches!(w, Waiting::Call { id: queued, .. } if *queued == id));
            }
        }
        match error {
            Some(e) => self.finish(id, Err(e)),
            None => {
                self.calls.remove(id);
            }
        }
        true
    }

    /// Fails every pending call with `Error::Shutdown` (and drops the replies waiting).
    pub(super) fn fail_all(&mut self) {
        self.calls.waiting.clear();
        for id in self.calls.ids() {
            self.cancel(id, Some(Error::Shutdown));
        }
    }

    /// Fails the calls whose deadline has passed with `Error::TimedOut`.
    pub(super) fn expire_calls(&mut self, now: Nanos) {
        while let Some(id) = self.calls.pop_expired(now) {
            self.cancel(id, Some(Error::TimedOut));
        }
    }

    pub(crate) fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    /// Requests received and not yet taken.
    pub(crate) fn queued_requests(&self) -> usize {
        self.calls.requests.len()
    }
}
