//! The driver through a fake transport: datagrams in memory, the server played by a
//! `homa_core::Endpoint` in the test, receive and send errors on demand. No sockets.

use homa_core::Instant;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use homa_core::{Config, Endpoint, Event};

use super::receive::RX_ROUNDS;
use super::state::Receiver;
use super::transmit::more_batches;
use super::{BATCH, Shared, eventfd, lock};
use crate::error::Error;
use crate::transport::{
    Batch, Datagram, Transport, TransportKind, Unreachable, WaitHandle, Waiter, clear, signal,
};

const CLIENT: &str = "198.18.0.1:40000";
const SERVER: &str = "198.18.0.2:99";

/// The wire between the driver and the test.
#[derive(Debug, Default)]
struct Wire {
    /// Datagrams for the driver.
    inbox: VecDeque<(SocketAddr, Vec<u8>)>,
    /// Datagrams the driver sent.
    outbox: VecDeque<(SocketAddr, Vec<u8>)>,
    /// The next receive (the transport's or the waiter's) fails with this errno.
    recv_error: Option<i32>,
    /// The next send fails with this errno.
    send_error: Option<i32>,
    /// A wake-up for the waiter, not yet taken.
    woken: bool,
    /// Wake-ups the waiter returned for.
    wakeups: u64,
    shut: bool,
}

#[derive(Debug)]
struct Net {
    wire: Mutex<Wire>,
    changed: Condvar,
    /// Readable while the inbox holds datagrams.
    ready: OwnedFd,
    /// The transport was dropped (closed).
    dropped: AtomicBool,
}

impl Net {
    fn new() -> Arc<Net> {
        let ready = eventfd().unwrap();
        Arc::new(Net {
            wire: Mutex::new(Wire::default()),
            changed: Condvar::new(),
            ready,
            dropped: AtomicBool::new(false),
        })
    }

    fn wire(&self) -> std::sync::MutexGuard<'_, Wire> {
        lock(&self.wire)
    }

    /// Delivers a datagram to the driver.
    fn deliver(&self, from: SocketAddr, bytes: Vec<u8>) {
        self.wire().inbox.push_back((from, bytes));
        signal(self.ready.as_raw_fd());
        self.changed.notify_all();
    }

    /// Waits until the driver has sent something; takes it all.
    fn sent(&self, timeout: Duration) -> Vec<(SocketAddr, Vec<u8>)> {
        let end = std::time::Instant::now() + timeout;
        let mut w = self.wire();
        while w.outbox.is_empty() {
            let left = end.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "the driver sent nothing");
            w = self.changed.wait_timeout(w, left).unwrap().0;
        }
        w.outbox.drain(..).collect()
    }
}

/// Moves the inbox into `batch` (as much as fits); the caller holds the wire.
fn take(net: &Net, w: &mut Wire, batch: &mut Batch) -> std::io::Result<()> {
    if let Some(errno) = w.recv_error.take() {
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    while !batch.is_full()
        && let Some((from, bytes)) = w.inbox.pop_front()
    {
        batch.next_slot()[..bytes.len()].copy_from_slice(&bytes);
        batch.push(Datagram { addr: from, len: bytes.len(), priority: 0, segment: 0 });
    }
    if w.inbox.is_empty() {
        clear(net.ready.as_raw_fd());
    }
    Ok(())
}

/// A transport that is only what the trait requires, plus (optionally) a waiter.
#[derive(Debug)]
struct Fake {
    net: Arc<Net>,
    waiter: bool,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.net.dropped.store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Transport for Fake {
    fn kind(&self) -> TransportKind {
        TransportKind::Udp
    }

    fn local_addr(&self) -> SocketAddr {
        CLIENT.parse().unwrap()
    }

    fn readiness_fd(&self) -> BorrowedFd<'_> {
        self.net.ready.as_fd()
    }

    fn send(&mut self, batch: &mut Batch) -> std::io::Result<()> {
        let mut w = self.net.wire();
        if let Some(errno) = w.send_error.take() {
            batch.clear();
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        for i in 0..batch.len() {
            let (d, bytes) = batch.get(i);
            let mut datagram = bytes.to_vec();
            if let Some(tail) = batch.tail(i) {
                datagram.extend_from_slice(tail.as_slice());
            }
            w.outbox.push_back((d.addr, datagram));
        }
        batch.clear();
        self.net.changed.notify_all();
        Ok(())
    }

    fn recv(&mut self, batch: &mut Batch) -> std::io::Result<()> {
        let mut w = self.net.wire();
        take(&self.net, &mut w, batch)
    }

    fn waiter(&mut self) -> Option<WaitHandle> {
        if !self.waiter {
            return None;
        }
        let (wake, shut) = (Arc::clone(&self.net), Arc::clone(&self.net));
        Some(WaitHandle {
            waiter: Box::new(FakeWaiter { net: Arc::clone(&self.net) }),
            wake: Box::new(move || {
                wake.wire().woken = true;
                wake.changed.notify_all();
            }),
            shutdown: Box::new(move || {
                shut.wire().shut = true;
                shut.changed.notify_all();
            }),
        })
    }
}

/// Blocks until datagrams, a wake-up or the shutdown come.
#[derive(Debug)]
struct FakeWaiter {
    net: Arc<Net>,
}

impl Waiter for FakeWaiter {
    fn wait(&mut self, batch: &mut Batch) -> std::io::Result<()> {
        let mut w = self.net.wire();
        loop {
            if w.shut {
                return Ok(());
            }
            if w.woken {
                w.woken = false;
                w.wakeups += 1;
                return Ok(());
            }
            if !w.inbox.is_empty() || w.recv_error.is_some() {
                return take(&self.net, &mut w, batch);
            }
            w = self.net.changed.wait(w).unwrap();
        }
    }

    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        None
    }

    fn stats(&self) -> crate::TransportStats {
        crate::TransportStats::default()
    }
}

/// A client driver over a fake transport, and the server endpoint the test plays.
struct Setup {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    port: u16,
    net: Arc<Net>,
}

impl Setup {
    fn new(waiter: bool) -> Setup {
        Setup::with(Config::default(), waiter)
    }

    fn with(config: Config, waiter: bool) -> Setup {
        let mut endpoint = Endpoint::new(config).unwrap();
        let port = endpoint.bind_ephemeral().unwrap();
        let net = Net::new();
        let fake = Box::new(Fake { net: Arc::clone(&net), waiter });
        let (shared, thread) = Shared::start(endpoint, fake, vec![], Duration::ZERO).unwrap();
        Setup { shared, thread: Some(thread), port, net }
    }

    fn receiver(&self) -> Receiver {
        self.shared.lock().receiver
    }

    /// Starts a call the driver thread receives for (as a future does).
    fn start_call(&self, message: &[u8]) -> Arc<super::Completion> {
        let server: SocketAddr = SERVER.parse().unwrap();
        let port = self.port;
        self.shared.with(|inner, now| {
            self.shared.need_driver(inner);
            let started = inner.start_call(now, port, server, message.to_vec().into(), None, true);
            inner.settle(false);
            started.unwrap().1
        })
    }

    /// A blocking call on another thread.
    fn call_in_thread(
        &self,
        timeout: Option<Duration>,
    ) -> JoinHandle<crate::Result<crate::Message>> {
        let (shared, port) = (Arc::clone(&self.shared), self.port);
        std::thread::spawn(move || {
            shared.call(port, SERVER.parse().unwrap(), b"ping".to_vec().into(), timeout)
        })
    }

    /// Plays the server for one request: takes what the client sent, answers it (echo),
    /// and delivers the answer, optionally with a receive error first.
    fn answer(&self, server: &mut Endpoint, recv_error: Option<i32>) {
        let client: SocketAddr = CLIENT.parse().unwrap();
        let mut buf = vec![0; server.config().max_packet_len()];
        loop {
            for (_, bytes) in self.net.sent(Duration::from_secs(10)) {
                server.handle_packet(Instant::ZERO, client, &bytes).unwrap();
            }
            if let Some(Event::RequestReceived { rpc, message, .. }) = server.poll_event() {
                server.send_response(Instant::ZERO, rpc, message).unwrap();
                break;
            }
        }
        self.net.wire().recv_error = recv_error;
        while let Some(t) = server.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
            self.net.deliver(SERVER.parse().unwrap(), buf[..t.len].to_vec());
        }
    }

    fn counters(&self) -> super::DriverCounters {
        self.shared.lock().counters
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.shared.close();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn server() -> Endpoint {
    let mut s = Endpoint::new(Config::default()).unwrap();
    s.bind(99).unwrap();
    s
}

/// Waits (without sleeping a fixed time) until `f` holds; panics after 10 s.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(std::time::Instant::now() < end, "never: {what}");
        std::thread::yield_now();
    }
}

#[test]
fn a_blocking_call_leads_and_leaves_a_grace_period() {
    for waiter in [false, true] {
        let s = Setup::new(waiter);
        let call = s.call_in_thread(None);
        until("the caller leads", || matches!(s.receiver(), Receiver::Leading(_)));
        s.answer(&mut server(), None);
        assert_eq!(call.join().unwrap().unwrap(), b"ping");
        // Nobody else waits: the driver thread stays off the transport for a while.
        assert!(matches!(s.receiver(), Receiver::Grace { .. } | Receiver::Driver { .. }));
        until("the grace period ends", || s.receiver() == Receiver::Driver { claimed: false });
    }
}

#[test]
fn a_future_has_the_driver_thread_receive() {
    let s = Setup::new(true);
    let c = s.start_call(b"ping");
    assert_eq!(s.receiver(), Receiver::Driver { claimed: false });
    s.answer(&mut server(), None);
    until("the call completes", || c.is_done());
    assert_eq!(c.wait().unwrap(), b"ping");
}

#[test]
fn a_pacer_slot_sooner_than_a_sleep_is_not_slept_for() {
    // At 100 Gbit/s the pacer holds data back once 5 us of it wait, and its next slot is
    // a microsecond away: far sooner than the timerfd could wake the driver.
    let config = Config { link_mbps: 100_000, unsched_bytes: 200_000, ..Config::default() };
    let s = Setup::with(config, false);
    let _call = s.start_call(&[7; 200_000]);
    // Every packet went in the call's own settle, none after a sleep.
    let wire = s.net.wire();
    let payload: usize =
        wire.outbox.iter().map(|(_, bytes)| bytes.len() - homa_core::wire::data::HEADER_LEN).sum();
    assert_eq!(payload, 200_000);
}

#[test]
fn a_timer_run_late_is_counted() {
    let s = Setup::new(false);
    let _call = s.start_call(b"ping"); // unanswered: its RESEND timer is armed
    // Hold the socket past the alarm and the lateness that counts, as a thread that
    // holds it and loses its CPU would.
    let inner = s.shared.lock();
    let counts_at = inner.alarm.armed().expect("armed") + inner.late_limit();
    until("the timer is that late", || s.shared.now() >= counts_at);
    drop(inner);
    until("the late timer is counted", || s.counters().late_timers >= 1);
}

#[test]
fn a_leader_blocked_in_the_waiter_is_woken_when_its_deadline_passes() {
    let s = Setup::new(true);
    let call = s.call_in_thread(Some(Duration::from_millis(20)));
    until("the caller sleeps in the waiter", || s.receiver().leader_blocking());
    // Nothing answers: the driver thread fails the call at its deadline and wakes the
    // leader through the waiter, which has nothing else to return for.
    assert!(matches!(call.join().unwrap(), Err(Error::TimedOut)));
    assert!(s.net.wire().wakeups >= 1, "woken through the waiter");
}

#[test]
fn close_fails_pending_calls_and_releases_the_transport() {
    for waiter in [false, true] {
        let s = Setup::new(waiter);
        let blocking = s.call_in_thread(None);
        until("the caller leads", || matches!(s.receiver(), Receiver::Leading(_)));
        let future = s.start_call(b"pong");
        s.shared.close();
        assert!(matches!(blocking.join().unwrap(), Err(Error::Shutdown)));
        assert!(matches!(future.wait(), Err(Error::Shutdown)));
        assert!(s.receiver().is_closed());
        assert!(s.net.dropped.load(std::sync::atomic::Ordering::Acquire), "transport closed");
        let again = s.call_in_thread(None);
        assert!(matches!(again.join().unwrap(), Err(Error::Shutdown)));
    }
}

#[test]
fn a_receive_error_ends_the_round_and_is_survived_by_whoever_receives() {
    const EFAULT: Option<i32> = Some(libc::EFAULT);
    // The driver thread receives (a future waits).
    let s = Setup::new(false);
    let c = s.start_call(b"ping");
    s.answer(&mut server(), EFAULT);
    until("the call completes", || c.is_done());
    assert_eq!(c.wait().unwrap(), b"ping");
    assert_eq!(s.counters().receive_errors, 1);

    // A leader receives, polling or in the waiter.
    for waiter in [false, true] {
        let s = Setup::new(waiter);
        let call = s.call_in_thread(None);
        until("the caller leads", || matches!(s.receiver(), Receiver::Leading(_)));
        s.answer(&mut server(), EFAULT);
        assert_eq!(call.join().unwrap().unwrap(), b"ping");
        assert_eq!(s.counters().receive_errors, 1, "waiter {waiter}");
    }

    // An event loop receives.
    let s = Setup::new(true);
    let fd = s.shared.attach().unwrap();
    assert_eq!(fd, s.net.ready.as_raw_fd());
    let c = s.start_call(b"ping");
    assert!(matches!(s.receiver(), Receiver::Loop { .. }));
    s.answer(&mut server(), EFAULT);
    s.shared.drive();
    assert!(!c.is_done() && s.counters().receive_errors == 1, "the failed turn took nothing");
    s.shared.drive();
    assert_eq!(c.wait().unwrap(), b"ping");
    s.shared.detach();
    assert_eq!(s.receiver(), Receiver::Driver { claimed: false });

    // Nobody receives (a grace period after a leader): what arrives then, with an error
    // first, is taken once the driver thread watches again.
    let s = Setup::new(false);
    let before = s.shared.lock().endpoint.metrics().packets_in;
    s.shared.with(|inner, _| {
        assert!(s.shared.claim(inner));
        s.shared.start_leading(inner);
        s.shared.step_down(inner);
        assert!(inner.receiver.grace().is_some());
        s.net.wire().recv_error = EFAULT;
        s.net.deliver(SERVER.parse().unwrap(), vec![0; 30]); // malformed: counted, dropped
    });
    until("the driver thread takes it", || {
        s.shared.lock().endpoint.metrics().packets_in == before + 1
    });
    assert_eq!(s.counters().receive_errors, 1);
    assert_eq!(s.receiver(), Receiver::Driver { claimed: false });
}

#[test]
fn a_failed_send_is_a_lost_packet() {
    let s = Setup::new(false);
    s.net.wire().send_error = Some(libc::EIO);
    let c = s.start_call(b"ping");
    assert_eq!(s.counters().send_errors, 1);
    // The request never left: the client's RESEND finds the server without it, which
    // answers RPC_UNKNOWN; the client sends the request again.
    let mut server = server();
    let client: SocketAddr = CLIENT.parse().unwrap();
    let mut buf = vec![0; server.config().max_packet_len()];
    while !c.is_done() {
        for (_, bytes) in s.net.sent(Duration::from_secs(10)) {
            server.handle_packet(Instant::ZERO, client, &bytes).unwrap();
        }
        while let Some(Event::RequestReceived { rpc, message, .. }) = server.poll_event() {
            server.send_response(Instant::ZERO, rpc, message).unwrap();
        }
        while let Some(t) = server.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
            s.net.deliver(SERVER.parse().unwrap(), buf[..t.len].to_vec());
        }
        if c.is_done() {
            break;
        }
    }
    assert_eq!(c.wait().unwrap(), b"ping");
    assert_eq!(s.shared.lock().endpoint.metrics().restarts, 1);
}

/// Bulk data is taken a batch per call while full batches come. A full batch followed by
/// an empty queue once made the driver thread call again forever, holding the lock (a
/// Python client with 8 megabyte calls in flight hung so, once in some tens of runs).
#[test]
fn bulk_receiving_stops_at_the_first_batch_that_is_not_full() {
    let more = |first: usize, takes: &[usize]| {
        let mut calls = 0;
        let mut takes = takes.iter().copied();
        let n = more_batches(first, || {
            calls += 1;
            takes.next()
        });
        (n, calls)
    };
    assert_eq!(more(BATCH, &[0, BATCH, BATCH]), (0, 1), "an empty queue ends it");
    assert_eq!(more(BATCH, &[BATCH, 5, BATCH]), (BATCH + 5, 2), "so does a short batch");
    assert_eq!(more(7, &[BATCH]), (0, 0), "a short first batch took all there was");
    assert_eq!(more(BATCH, &[BATCH]), (BATCH, 2), "bulk mode ended (None)");
    let endless = [BATCH; 2 * RX_ROUNDS];
    assert_eq!(more(BATCH, &endless), ((RX_ROUNDS - 1) * BATCH, RX_ROUNDS - 1), "the limit");
}
