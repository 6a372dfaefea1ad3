//! The driving rule of `homa_core`, whoever drives: after any input, drain the endpoint's
//! packets (into the send batch) and events, run what is due, arm the alarm, send.

use homa_core::Instant;
use homa_core::time::Nanos;

use super::timer::{SLEEP_FLOOR, earlier};
use super::{BATCH, Inner, receive::RX_ROUNDS};
use crate::transport::Datagram;

/// Timer passes in one go before leaving the rest to the (already due) timerfd.
const TIMER_ROUNDS: usize = 8;
/// How long the endpoint's timers may wait while the socket queue is taken first. A driver
/// this far behind its input is overloaded: then lost packets are asked for anyway, late.
const TIMER_DEFER_LIMIT: Nanos = 50_000_000;

impl Inner {
    /// Step 1 of the driving rule: takes every ready packet (into the send batch, sent
    /// when full) and every event.
    pub(super) fn drain(&mut self, now: Nanos) {
        let now = Instant::from_nanos(now);
        if self.tx_runs && self.transport.as_ref().is_some_and(|t| t.sends_runs()) {
            while let Some(run) = self
                .endpoint
                .poll_transmit_run(now, self.tx.free_slots())
                .expect("send slots hold max_packet_len")
            {
                for len in run.lens(self.tx.slot_len()) {
                    let d = Datagram { addr: run.to, len, priority: run.priority, segment: 0 };
                    self.tx.push(d);
                }
                if self.tx.is_full() {
                    self.flush();
                }
            }
        } else {
            while let Some((t, tail)) = self
                .endpoint
                .poll_transmit_gather(now, self.tx.next_slot())
                .expect("send slots hold max_packet_len")
            {
                let d = Datagram { addr: t.to, len: t.len, priority: t.priority, segment: 0 };
                self.tx.push_gather(d, tail);
                if self.tx.is_full() {
                    self.flush();
                }
            }
        }
        while let Some(event) = self.endpoint.poll_event() {
            self.dispatch(event);
        }
    }

    /// Sends the send batch.
    pub(super) fn flush(&mut self) {
        if self.tx.is_empty() {
            return;
        }
        let Some(transport) = self.transport.as_mut() else {
            self.tx.clear(); // closed
            return;
        };
        if let Err(e) = transport.send(&mut self.tx) {
            tracing::error!("send failed: {e}");
            self.counters.send_errors += 1;
            self.tx.clear();
        }
    }

    /// Records the time at which the lock was taken (never going backwards).
    pub(crate) fn clock(&mut self, now: Nanos) -> Nanos {
        self.now = self.now.max(now);
        self.now
    }

    /// The earliest of the endpoint's deadline and the calls' deadlines: when timers are
    /// due.
    pub(super) fn timers_deadline(&mut self) -> Option<Nanos> {
        let endpoint = self.endpoint.poll_timeout().map(Instant::as_nanos);
        earlier(endpoint, self.calls.next_deadline())
    }

    /// The earliest of the timers' deadline, the receiver's (a grace period's end, an event
    /// loop's stall check) and the end of a blocked leader's wait.
    pub(super) fn next_deadline(&mut self) -> Option<Nanos> {
        let endpoint = self.endpoint.poll_timeout().map(Instant::as_nanos);
        self.next_deadline_after(endpoint)
    }

    /// [`next_deadline`](Self::next_deadline), given the endpoint's.
    fn next_deadline_after(&self, endpoint: Option<Nanos>) -> Option<Nanos> {
        let leader_until = self.receiver.lead().and_then(|l| l.until);
        let own = earlier(self.receiver.deadline(), leader_until);
        earlier(earlier(endpoint, self.calls.next_deadline()), own)
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
        let mut now = self.now;
        let mut rounds = 0;
        let (mut drained, mut deferred, mut behind) = (false, false, false);
        loop {
            self.drain(now);
            if self.calls.has_waiting() && self.send_waiting(now) {
                continue; // drain what went (the events drained may have made room)
            }
            if self.feed_unreachable() {
                continue;
            }
            // The endpoint due sooner than a sleep could end (the pacer's next slot on a fast
            // link is nanoseconds away): run it at that time now rather than sleep, which
            // would leave the link idle longer. The clock runs at most `SLEEP_FLOOR` ahead.
            // (Timer ticks, milliseconds away, are told apart without reading the clock.)
            let endpoint = self.endpoint.poll_timeout().map(Instant::as_nanos);
            let soon = endpoint.filter(|&d| {
                d > now
                    && d <= now.saturating_add(2 * SLEEP_FLOOR)
                    && d <= self.alarm.clock_now().saturating_add(SLEEP_FLOOR)
            });
            if let Some(d) = soon {
                (now, self.now) = (d, d);
                continue;
            }
            let next = self.next_deadline_after(endpoint);
            if timers && !deferred && next.is_some_and(|d| d <= now) && rounds < TIMER_ROUNDS {
                // Timers judge silence: first take whatever waits in the socket queue (a
                // leader or an event loop has read only what woke it), else data that has
                // arrived looks missing and draws RESENDs (and duplicate retransmissions).
                // Not while a leader sleeps in the waiter: its wake-up must reach it.
                if !drained && !self.receiver.leader_blocking() {
                    drained = true;
                    // (Bulk data comes a batch's worth per `receive`: take it all.)
                    let first = self.receive(now);
                    let got = first
                        + more_batches(first, || self.intake.placing.then(|| self.receive(now)));
                    // Stopped by the round limit, not by an empty queue: more waits.
                    behind = got >= RX_ROUNDS * BATCH;
                    if got > 0 {
                        continue;
                    }
                }
                rounds += 1;
                self.expire_calls(now); // wall-clock deadlines, whatever the queue holds
                let due = self.endpoint.poll_timeout().map(Instant::as_nanos);
                // More waited in the socket queue than one turn takes: what it holds may be
                // what the timers would judge missing. The next turn takes it first (the
                // readiness fd stays readable); the endpoint leaves the ticks its timers ran
                // late out of its silence count. Past `TIMER_DEFER_LIMIT` they run anyway.
                // (A packet that arrived since the queue was found empty is no backlog.)
                let overdue = due.is_some_and(|d| d.saturating_add(TIMER_DEFER_LIMIT) <= now);
                if due.is_some_and(|d| d <= now) && !overdue && behind {
                    deferred = true;
                } else {
                    let now = Instant::from_nanos(now);
                    if let Some(t) = &self.transport {
                        self.endpoint.note_input_drops(now, t.stats().rx_overflow);
                    }
                    self.endpoint.handle_timeout(now);
                }
                continue;
            }
            self.alarm.arm(next, self.now);
            if !self.corked {
                self.flush();
            }
            if self.feed_unreachable() {
                continue; // refused sends: the endpoint has more to say
            }
            return;
        }
    }
}

/// After a receive of bulk data (at most a batch per call) that took `first` datagrams:
/// receives on with `next` (`None` once bulk mode ends) while each call fills a batch, up
/// to `RX_ROUNDS` batches in all; how many more it took. A call that falls short of a
/// batch found the queue empty: the next would find nothing either.
pub(super) fn more_batches(first: usize, mut next: impl FnMut() -> Option<usize>) -> usize {
    let (mut got, mut last) = (first, first);
    while last >= BATCH && got < RX_ROUNDS * BATCH {
        let Some(n) = next() else { break };
        (got, last) = (got + n, n);
    }
    got - first
}
