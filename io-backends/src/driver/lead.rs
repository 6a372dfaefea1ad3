//! Leading: a thread that waits for a response or a request receives from the transport
//! itself (see the module docs of [`driver`](super)).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::MutexGuard;
use std::time::Duration;

use homa_core::Payload;

use super::spin::Spun;
use super::state::Receiver;
use super::{Completion, Inner, LEADER_GRACE, Shared, lock, this_thread};
use crate::error::Result;
use crate::socket::Message;
use crate::transport::clear;

impl Shared {
    /// Makes the calling thread the leader unless another thread is; returns whether it is.
    /// A thread about to send and then wait claims leadership first, so that no other
    /// thread starts leading in between. The driver thread stops watching the transport
    /// only once the leader leads (`start_leading`, or `call` before it sends;
    /// `start` makes it watch if an earlier leader's grace period still kept it off): a
    /// [`Call`] started to be waited on later leaves receiving to the driver thread until
    /// then, or threads waiting for requests meanwhile would wait for a leader that does
    /// not receive.
    ///
    /// [`Call`]: crate::Call
    pub(crate) fn claim(&self, inner: &mut Inner) -> bool {
        inner.receiver.claim(this_thread())
    }

    /// The claimer starts receiving itself.
    pub(super) fn start_leading(&self, inner: &mut Inner) {
        let watch = inner.receiver.start_leading();
        self.apply(inner, watch);
        inner.receive_here(); // before it sends what it will wait for
    }

    /// The claimer will wait later (see [`Receiver::watch_for_claimer`]).
    pub(crate) fn watch_for_claimer(&self, inner: &mut Inner) {
        let watch = inner.receiver.watch_for_claimer();
        self.apply(inner, watch);
    }

    /// The driver thread must watch the transport: a future waits on it. (A thread that
    /// blocks leads instead, or waits for the leader.)
    pub(crate) fn need_driver(&self, inner: &mut Inner) {
        let watch = inner.receiver.need_driver();
        self.apply(inner, watch);
    }

    /// Ends a leader's term. If others wait (calls pending, threads sleeping for
    /// requests), the driver thread takes over now; else after `LEADER_GRACE`, unless
    /// someone leads or needs it before.
    pub(super) fn step_down(&self, inner: &mut Inner) {
        let now = inner.now;
        // On a tick boundary, like the endpoint's timers (one timerfd setting serves both).
        // It is a lower bound: watching resumes between half and all of `LEADER_GRACE`
        // after the last leader left.
        let tick = inner.alarm.tick_ns;
        let grace = (now + LEADER_GRACE).div_ceil(tick) * tick;
        let watch =
            inner.receiver.step_down(inner.calls.anyone_waits(), grace, now + LEADER_GRACE / 2);
        self.apply(inner, watch);
        if inner.receiver.grace().is_some() {
            let next = inner.next_deadline();
            inner.alarm.arm(next, inner.now); // for the grace period
        }
    }

    /// Gives leadership up (for a leader that will not wait after all).
    pub(crate) fn resign(&self) {
        let mut inner = self.lock();
        self.step_down(&mut inner); // the driver thread takes over if calls wait
        self.release(inner);
    }

    /// Leads (see the module docs) until `done` holds, the socket closes or `until`
    /// passes. Returns `None` at once if another thread leads.
    /// Once done, `then` runs on the locked state (e.g. to take what was waited for) and
    /// its result is returned.
    pub(super) fn lead<R>(
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
    pub(super) fn lead_claimed<R>(
        &self,
        until: Option<std::time::Instant>,
        done: impl Fn(&Inner) -> bool,
        then: impl FnOnce(&mut Inner) -> R,
    ) -> R {
        self.lead_locked(self.lock(), until, done, then)
    }

    pub(super) fn lead_locked<'a, R>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        until: Option<std::time::Instant>,
        done: impl Fn(&Inner) -> bool,
        then: impl FnOnce(&mut Inner) -> R,
    ) -> R {
        let over = |inner: &Inner| {
            inner.is_closed()
                || done(inner)
                || until.is_some_and(|u| std::time::Instant::now() >= u)
        };
        self.start_leading(&mut inner); // this thread receives now
        loop {
            if over(&inner) {
                if let Some(lead) = inner.receiver.lead_mut() {
                    lead.until = None;
                }
                self.step_down(&mut inner);
                let r = then(&mut inner);
                self.release(inner);
                return r;
            }
            inner.receive_here();
            // Sleep in the transport's own receive call when there is one, unless this wait
            // spins first (which needs `poll`, but for io_uring's leader). Bulk data is
            // received in place, one datagram at a time: not by the waiter. The receive
            // call has no timeout: a deadline is the driver thread's to enforce (it wakes
            // the leader).
            let spin = self.spin.wanted();
            let in_ring =
                spin && self.receives_on_poster && !matches!(inner.receiver, Receiver::Loop { .. });
            if self.has_waiter && (!spin || in_ring) && !inner.intake.placing {
                let found;
                (inner, found) =
                    if in_ring { self.spin_in_ring(inner, &done) } else { (inner, false) };
                // The spin released the lock: whoever ended the wait meanwhile kicked a
                // leader that was not yet blocking, through the eventfd the waiter does not
                // see. Look again before sleeping: `blocking` is set under this same hold,
                // so later completions wake the leader through the waiter.
                if !found && !over(&inner) {
                    inner = self.wait_in_waiter(inner, until);
                    continue;
                }
            } else {
                inner.waiter_in_use(false); // this thread watches the readiness fd now
                self.release(inner);
                let (kicked, errored) = self.await_input(until, spin);
                inner = self.lock();
                if kicked {
                    clear(self.kick.as_raw_fd());
                }
                if errored {
                    inner.read_errors();
                }
            }
            self.turn(&mut inner, true);
            let now = inner.clock(self.now());
            inner.receive(now);
            inner.settle(true); // timers too, as after the waiter's receive
            self.turn(&mut inner, false);
        }
    }

    /// Spins ([`Spin`](super::spin::Spin)) with the lock released until datagrams wait
    /// or the leader's wait is over, looking at the transport itself: for io_uring its
    /// completion queue, with the eventfd off so that no completion signals it (each
    /// signal would cost a `read` to clear). Returns the lock and whether it found them.
    fn spin_in_ring<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        done: &impl Fn(&Inner) -> bool,
    ) -> (MutexGuard<'a, Inner>, bool) {
        inner.waiter_in_use(true);
        self.release(inner);
        let spun = self.spin.spin(|| {
            let mut inner = self.lock();
            inner.is_closed() || done(&inner) || inner.input_waiting()
        });
        (self.lock(), spun == Spun::Ready)
    }

    /// Marks the leader's turn (it holds the lock, between waits).
    pub(super) fn turn(&self, inner: &mut Inner, on: bool) {
        if let Some(lead) = inner.receiver.lead_mut() {
            lead.in_turn = on;
        }
    }

    /// One wait of the leader in the transport's waiter: the lock is released while it
    /// sleeps in the receive call; what arrives is handled, with the timers due.
    pub(super) fn wait_in_waiter<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        until: Option<std::time::Instant>,
    ) -> MutexGuard<'a, Inner> {
        // Unless an event loop watches it, the readiness fd goes unwatched until the driver
        // thread watches again, across calls in a loop.
        if !matches!(inner.receiver, Receiver::Loop { .. }) {
            inner.waiter_in_use(true);
        }
        let leader_until = until.map(|u| {
            let left = u.saturating_duration_since(std::time::Instant::now());
            inner.now.saturating_add(left.as_nanos().try_into().unwrap_or(u64::MAX))
        });
        if let Some(lead) = inner.receiver.lead_mut() {
            lead.blocking = true;
            if leader_until.is_some() {
                lead.until = leader_until;
            }
        }
        if leader_until.is_some() {
            let (next, now) = (inner.next_deadline(), inner.now);
            inner.alarm.arm(next, now);
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
        let mut inner = self.lock();
        if let Some(lead) = inner.receiver.lead_mut() {
            lead.blocking = false;
        }
        let Some((waiter, batch)) = w.as_mut() else { return inner };
        self.turn(&mut inner, true);
        if let Err(e) = result {
            inner.receive_failed(&e);
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
            if batch.is_full() || inner.intake.placing {
                inner.drain(now); // answer this batch before taking more
                inner.receive(now);
            }
        }
        drop(w);
        // The leader has just received, as the driver thread does before running timers:
        // it runs those due itself, so that a busy socket's timer ticks (each RPC arms one)
        // do not wake the driver thread every millisecond.
        inner.settle(true);
        self.turn(&mut inner, false);
        inner
    }

    /// Sleeps until the transport is readable or in error, the leader is kicked, or `until`
    /// passes; with `spin`, checks without sleeping for a while first ([`Spin`]). Returns
    /// whether it was kicked and whether the transport is in error.
    pub(super) fn await_input(
        &self,
        until: Option<std::time::Instant>,
        spin: bool,
    ) -> (bool, bool) {
        let mut fds = [
            libc::pollfd { fd: self.readiness, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.kick.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        let mut poll = |timeout_ms: i32| {
            // SAFETY: fds is a live array of the length given.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
        };
        let ready = spin && self.spin.spin(|| poll(0) != 0) == Spun::Ready;
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
    ) -> Result<Message> {
        let mut inner = self.lock();
        let now = inner.clock(self.now());
        // Claimed (and the driver thread off the transport) before sending, so a fast
        // answer cannot slip to the driver thread.
        let leading = self.claim(&mut inner);
        if leading {
            self.start_leading(&mut inner);
        }
        let started = inner.start_call(now, port, dest, message, timeout, true);
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
    ) -> Option<Result<Message>> {
        if claimed {
            self.lead_claimed(Some(until), |_| c.is_done(), |_| ());
        } else {
            self.lead(Some(until), |_| c.is_done(), |_| ());
        }
        c.wait_until(until)
    }

    /// Blocks until call `c` completes, leading if this thread `claimed` leadership or
    /// nobody leads.
    pub(crate) fn wait_call(&self, c: &Completion, claimed: bool) -> Result<Message> {
        if claimed {
            self.lead_claimed(None, |_| c.is_done(), |_| ());
        } else {
            self.lead(None, |_| c.is_done(), |_| ());
        }
        c.wait()
    }
}
