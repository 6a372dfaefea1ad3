//! An event loop driving sockets itself (`Socket::poller`), `Call::wait_timeout`, and
//! shutdown releasing the port while requests, calls and pollers still live.

mod common;

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;
use std::time::Duration;

use common::{bind_server, candidate_port, echo, loopback_v4, pattern};
use homa_io::{Config, Error, Poller, Socket, TransportKind};

/// A waker that records the threads it was woken on.
#[derive(Default)]
struct Recorder {
    threads: Mutex<Vec<ThreadId>>,
    count: AtomicUsize,
}

impl Wake for Recorder {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.threads.lock().unwrap().push(std::thread::current().id());
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits (in `poll`, as an event loop would in epoll) until one of `pollers` is readable,
/// then drives each. Returns the datagrams they received.
fn turn(pollers: &[&Poller]) -> usize {
    let mut fds: Vec<libc::pollfd> = pollers
        .iter()
        .map(|p| libc::pollfd { fd: p.fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    // SAFETY: fds is a live array of the length given. (The timeout only bounds a
    // wait for a timer the loop would also run; nothing depends on it.)
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
    pollers.iter().map(|p| p.drive()).sum()
}

fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

#[test]
fn an_event_loop_completes_calls_and_requests_on_its_own_thread() {
    for kind in common::transports() {
        let builder = Socket::builder().transport(kind).config(loop_only());
        let server = bind_server(builder.clone(), loopback_v4());
        let client = builder.client(loopback_v4()).unwrap();
        let (sp, cp) = (server.poller().unwrap(), client.poller().unwrap());
        let recorder = Arc::new(Recorder::default());
        let waker = Waker::from(Arc::clone(&recorder));
        for size in [1, 1_500, 100_000] {
            let message = pattern(size, 7);
            let mut call = client.call_async(server.local_addr(), message.clone(), None).unwrap();
            assert!(poll_once(&mut call, &waker).is_pending());
            let mut recv = server.recv_request_async();
            let mut answered = false;
            let response = loop {
                turn(&[&sp, &cp]);
                if !answered && let Poll::Ready(r) = poll_once(&mut recv, &waker) {
                    let mut request = r.unwrap();
                    let m = request.take_message();
                    request.reply(m).unwrap();
                    answered = true;
                }
                if let Poll::Ready(r) = poll_once(&mut call, &waker) {
                    break r.unwrap();
                }
            };
            assert_eq!(response, message, "{kind}, {size} bytes");
        }
        // Every completion woke its task here, on the loop's thread.
        let me = std::thread::current().id();
        let threads = recorder.threads.lock().unwrap().clone();
        assert!(!threads.is_empty());
        assert!(threads.iter().all(|t| *t == me), "{kind}: woken on {threads:?}");
        assert!(matches!(server.poller(), Err(Error::PollerExists)));
    }
}

/// The loop's own thread may still block in a call: it then leads, receiving for the socket
/// until its response is in (through io_uring, asleep in the ring while the readiness fd
/// stays the loop's).
#[test]
fn the_loop_thread_can_block_in_a_call() {
    for kind in common::transports() {
        let builder = Socket::builder().transport(kind);
        let server = Arc::new(bind_server(builder.clone(), loopback_v4()));
        let echoer = echo(&server);
        let client = builder.client(loopback_v4()).unwrap();
        let poller = client.poller().unwrap();
        for size in [1, 100_000, 1_000_000] {
            let message = pattern(size, 3);
            let deadline = Some(Duration::from_secs(30));
            let response = client.call(server.local_addr(), message.clone(), deadline);
            let response = response.unwrap_or_else(|e| panic!("{kind}, {size} bytes: {e}"));
            assert!(response == message, "{kind}, {size} bytes: echo differs");
        }
        drop(poller);
        server.shutdown();
        echoer.join().unwrap();
    }
}

/// One-minute timer ticks and a pacer that never holds data back (1 Tbit/s): the driver
/// thread wakes for no deadline during the test, so only the loop receives (a deadline lets
/// the driver thread drain the socket first; on a loaded machine that happened with
/// one-second ticks, and with the default pacer's slots for the 100 KB messages).
fn loop_only() -> Config {
    Config { tick_usecs: 60_000_000, link_mbps: 1_000_000, ..Config::default() }
}

/// While corked, a socket sends nothing; uncorked, what waited leaves together: the three
/// equal-sized requests in one system call (one UDP GSO send).
#[test]
fn corked_sends_leave_together() {
    let builder = Socket::builder().config(loop_only());
    let server = bind_server(builder.clone(), loopback_v4());
    let client = builder.client(loopback_v4()).unwrap();
    let (sp, cp) = (server.poller().unwrap(), client.poller().unwrap());
    let sent = |s: &Socket| s.metrics().transport.tx_calls;
    let before = sent(&client);
    cp.cork();
    let calls: Vec<_> = (0..3u8)
        .map(|i| client.call_async(server.local_addr(), vec![i; 100], None).unwrap())
        .collect();
    assert_eq!(sent(&client), before, "sent while corked");
    let mut fd = libc::pollfd { fd: sp.fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd; nothing may arrive.
    unsafe { libc::poll(&mut fd, 1, 50) };
    assert_eq!(fd.revents, 0, "the server received while the client was corked");
    cp.uncork();
    assert_eq!(sent(&client), before + 1, "three equal-sized requests, one system call");
    let mut requests = Vec::new();
    while requests.len() < 3 {
        turn(&[&sp]);
        while let Some(r) = server.try_recv_request().unwrap() {
            requests.push(r.message().to_vec());
        }
    }
    requests.sort();
    assert_eq!(requests, [vec![0; 100], vec![1; 100], vec![2; 100]]);
    drop(calls);
    // A loop that goes away corked leaves nothing held back.
    cp.cork();
    let call = client.call_async(server.local_addr(), vec![3; 100], None).unwrap();
    let held = sent(&client);
    drop(cp);
    assert_eq!(sent(&client), held + 1, "dropping the corked poller sent nothing");
    drop(call);
}

/// A refused datagram leaves an error condition on the socket (POLLERR, which an event loop
/// sees instead of readability); `read_errors` takes it and fails the call to that peer.
/// The driver thread, which also watches for input while the loop keeps up, leaves it.
#[test]
fn the_loop_reads_errors_off_the_socket() {
    let client = Socket::builder().config(loop_only()).client(loopback_v4()).unwrap();
    let poller = client.poller().unwrap();
    let closed = SocketAddr::new(loopback_v4(), candidate_port());
    let mut call = client.call_async(closed, b"anyone?".to_vec(), None).unwrap();
    let waker = Waker::from(Arc::new(Recorder::default()));
    let mut fd = libc::pollfd { fd: poller.fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd. (Loopback answers at once; the timeout only bounds a
    // failure.)
    unsafe { libc::poll(&mut fd, 1, 5_000) };
    assert_ne!(fd.revents & libc::POLLERR, 0, "no error condition: revents {}", fd.revents);
    assert!(poll_once(&mut call, &waker).is_pending());
    poller.read_errors();
    assert!(
        matches!(poll_once(&mut call, &waker), Poll::Ready(Err(Error::Unreachable(a))) if a == closed)
    );
    fd.revents = 0;
    // SAFETY: as above; the condition is gone.
    unsafe { libc::poll(&mut fd, 1, 0) };
    assert_eq!(fd.revents & libc::POLLERR, 0);
}

/// A loop that does not turn leaves no error condition unread: the driver thread reads it
/// (at a stall check or when its timers receive), and the call to the refusing peer fails
/// at once rather than timing out.
#[test]
fn a_stalled_loop_has_the_driver_thread_read_errors() {
    let client = Arc::new(Socket::client(loopback_v4()).unwrap());
    let _poller = client.poller().unwrap(); // attached on this thread, never driven
    let closed = SocketAddr::new(loopback_v4(), candidate_port());
    let caller = Arc::clone(&client);
    let called = std::thread::spawn(move || caller.call(closed, b"anyone?".to_vec(), None));
    let result = called.join().unwrap();
    assert!(matches!(result, Err(Error::Unreachable(a)) if a == closed), "{result:?}");
}

#[test]
fn try_recv_request_does_not_wait() {
    let server = bind_server(Socket::builder(), loopback_v4());
    let client = Socket::client(loopback_v4()).unwrap();
    assert!(server.try_recv_request().unwrap().is_none());
    let poller = server.poller().unwrap();
    let call = client.call_async(server.local_addr(), b"hi".to_vec(), None).unwrap();
    let request = loop {
        turn(&[&poller]);
        if let Some(r) = server.try_recv_request().unwrap() {
            break r;
        }
    };
    assert_eq!(request.message(), b"hi");
    request.reply(b"ho".to_vec()).unwrap();
    drop(poller); // the driver thread takes over
    assert_eq!(call.wait().unwrap(), b"ho");
    server.shutdown();
    assert!(matches!(server.try_recv_request(), Err(Error::Shutdown)));
    assert!(matches!(server.poller(), Err(Error::Shutdown)));
}

#[test]
fn without_the_loop_the_driver_thread_still_receives_and_runs_timers() {
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let echoer = echo(&server);
    let silent = (0..)
        .find_map(|_| UdpSocket::bind(SocketAddr::new(loopback_v4(), candidate_port())).ok())
        .unwrap();
    let config = Config { timeout_ticks: 20, ..Config::default() };
    let client = Arc::new(Socket::builder().config(config).client(loopback_v4()).unwrap());
    // This thread attaches a loop and never drives it: other threads wait meanwhile (they
    // must not lead), and the driver thread's timers complete their calls: the echo's
    // response is drained from the socket before the timers run, the silent peer's call
    // times out.
    let _poller = client.poller().unwrap();
    let waiter = |to: SocketAddr| {
        let client = Arc::clone(&client);
        std::thread::spawn(move || client.call(to, b"anyone?".to_vec(), None))
    };
    let (answered, unanswered) =
        (waiter(server.local_addr()), waiter(silent.local_addr().unwrap()));
    assert_eq!(answered.join().unwrap().unwrap(), b"anyone?");
    assert!(matches!(unanswered.join().unwrap(), Err(Error::PeerSilent(_))));
    server.shutdown();
    echoer.join().unwrap();
}

/// A server whose event loop computes in its handler (0.15 and 0.5 s per request, longer
/// than Homa's 100 ms timeout) loses no call, of 100 bytes or of a megabyte, with one or
/// several in flight: while its loop is busy, the driver thread receives for it, answers
/// the client's RESENDs with BUSY and grants the requests' bytes.
#[test]
fn a_server_whose_loop_blocks_in_its_handler_loses_no_call() {
    let mut kinds = vec![TransportKind::Udp, TransportKind::UringUdp];
    if common::is_root() {
        kinds.push(TransportKind::Ip);
    }
    for kind in kinds {
        let server = bind_server(Socket::builder().transport(kind), loopback_v4());
        let client = Arc::new(Socket::builder().transport(kind).client(loopback_v4()).unwrap());
        let poller = server.poller().unwrap();
        for (block, size, in_flight) in
            [(150, 100, 1), (500, 100, 1), (150, 100, 4), (500, 1_000_000, 2)]
        {
            let block = Duration::from_millis(block);
            let message = pattern(size, 5);
            let calls: Vec<_> = (0..in_flight)
                .map(|_| {
                    let (client, to, m) =
                        (Arc::clone(&client), server.local_addr(), message.clone());
                    std::thread::spawn(move || client.call(to, m, Some(Duration::from_secs(60))))
                })
                .collect();
            let mut served = 0;
            while served < in_flight {
                turn(&[&poller]);
                while let Some(mut request) = server.try_recv_request().unwrap() {
                    // The application's work, computing on the loop's thread (no system
                    // call: io_uring completes nothing on it meanwhile): nothing drives.
                    let end = std::time::Instant::now() + block;
                    while std::time::Instant::now() < end {
                        std::hint::spin_loop();
                    }
                    let m = request.take_message();
                    request.reply(m).unwrap();
                    served += 1;
                }
            }
            for call in calls {
                let response = call.join().unwrap();
                let response =
                    response.unwrap_or_else(|e| panic!("{kind}, {block:?}, {size} B: {e}"));
                assert!(response == message, "{kind}: the echo differs");
            }
        }
        let m = server.metrics();
        assert!(m.loop_stalls > 0, "{kind}: the driver thread never received for the loop");
        const BUSY: usize = 4; // index of PacketType::Busy in the per-type counts
        assert!(m.core.packets_out_by_type[BUSY] > 0, "{kind}: no BUSY answered a RESEND");
        assert_eq!(m.transport.rx_overflow, 0, "{kind}: the host dropped datagrams");
        assert_eq!(client.metrics().core.client_timeouts, 0, "{kind}");
    }
}

#[test]
fn wait_timeout_returns_none_until_the_response_is_there() {
    let server = bind_server(Socket::builder(), loopback_v4());
    let client = Socket::client(loopback_v4()).unwrap();
    let mut call = client.call_async(server.local_addr(), b"slow".to_vec(), None).unwrap();
    let request = server.recv_request().unwrap();
    // The server holds the request: nothing can answer meanwhile.
    assert!(call.wait_timeout(Duration::from_millis(5)).is_none());
    assert!(call.wait_timeout(Duration::ZERO).is_none());
    request.reply(b"done".to_vec()).unwrap();
    let r = loop {
        if let Some(r) = call.wait_timeout(Duration::from_millis(50)) {
            break r;
        }
    };
    assert_eq!(r.unwrap(), b"done");
    let again = call.wait_timeout(Duration::ZERO);
    assert!(matches!(again, Some(Err(Error::Api(_)))), "{again:?}");
}

#[test]
fn shutdown_frees_the_port_while_requests_calls_and_pollers_live() {
    for kind in [TransportKind::Udp, TransportKind::UringUdp] {
        let builder = Socket::builder().transport(kind);
        let server = Arc::new(bind_server(builder.clone(), loopback_v4()));
        // The client must not ask the closed server port for its responses (a RESEND after
        // 5 silent ticks, easily reached on a loaded machine, draws an ICMP error that fails
        // the calls as Unreachable before the shutdown this test is about).
        let patient = Config { resend_ticks: 10_000, timeout_ticks: 40_000, ..Config::default() };
        let client = builder.clone().config(patient).client(loopback_v4()).unwrap();
        let addr = server.local_addr();
        // A thread blocked in recv_request leads (with UDP: asleep in the receive call),
        // and keeps the requests it gets.
        let (got_one, first_held) = std::sync::mpsc::channel();
        let blocked = {
            let server = Arc::clone(&server);
            std::thread::spawn(move || {
                let mut held = Vec::new();
                loop {
                    match server.recv_request() {
                        Ok(r) => {
                            held.push(r);
                            let _ = got_one.send(());
                        }
                        Err(e) => return (held, e),
                    }
                }
            })
        };
        let held_call = client.call_async(addr, b"one".to_vec(), None).unwrap();
        let second = client.call_async(addr, b"two".to_vec(), None).unwrap();
        let poller = client.poller().unwrap();
        first_held.recv().unwrap(); // a request is held when the server shuts down
        server.shutdown();
        let (held_requests, after) = blocked.join().unwrap();
        assert!(matches!(after, Error::Shutdown), "{after:?}");
        // The server's port is free although requests and the socket live on.
        let again = builder.clone().bind(addr).expect("the port is free again");
        assert!(again.local_addr() == addr);
        for r in held_requests {
            assert!(matches!(r.reply(b"late".to_vec()), Err(Error::Shutdown)));
        }
        // And the client's UDP port, while its calls and its poller live.
        let client_addr = client.local_addr();
        client.shutdown();
        UdpSocket::bind(client_addr).expect("the client's port is free again");
        assert_eq!(poller.drive(), 0);
        let second = pollster::block_on(second);
        assert!(matches!(second, Err(Error::Shutdown)), "{second:?}");
        assert!(matches!(pollster::block_on(held_call), Err(Error::Shutdown)));
        assert_eq!(client.metrics().pending_calls, 0);
    }
}

#[test]
fn a_started_call_is_waited_for_in_slices() {
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let echoer = echo(&server);
    let client = Socket::client(loopback_v4()).unwrap();
    for i in 0..20u8 {
        let message = pattern(1 + usize::from(i) * 700, i);
        let mut call = client.start_call(server.local_addr(), message.clone(), None).unwrap();
        let r = loop {
            if let Some(r) = call.wait_timeout(Duration::from_millis(200)) {
                break r;
            }
        };
        assert_eq!(r.unwrap(), message);
    }
    // Started to be waited for, then polled as a future instead: the driver thread
    // receives for it.
    let call = client.start_call(server.local_addr(), b"future".to_vec(), None).unwrap();
    assert_eq!(pollster::block_on(call).unwrap(), b"future");
    // Or dropped: the RPC is aborted, leadership given up.
    drop(client.start_call(server.local_addr(), b"dropped".to_vec(), None).unwrap());
    assert_eq!(client.call(server.local_addr(), b"after".to_vec(), None).unwrap(), b"after");
    server.shutdown();
    echoer.join().unwrap();
}

/// A call started to be waited on later claims leadership, but until it is waited on the
/// driver thread keeps receiving: requests that arrive meanwhile reach a thread waiting in
/// `recv_request` on the same socket (which waits for the leader instead of leading).
/// Before, the socket went unread once the call's own response had been taken at a timer
/// tick, and such a thread waited until the call was waited on or dropped.
#[test]
fn a_started_call_not_yet_waited_on_leaves_receiving_to_the_driver_thread() {
    let echo_server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let echoer = echo(&echo_server);
    let socket = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    // A blocking call first: its leader leaves the driver thread off the transport for a
    // grace period, which the started call must end.
    assert_eq!(socket.call(echo_server.local_addr(), b"first".to_vec(), None).unwrap(), b"first");
    let call = socket.start_call(echo_server.local_addr(), b"later".to_vec(), None).unwrap();
    // Its response is in and no timer of this socket is left that would read the socket.
    let start = std::time::Instant::now();
    while socket.metrics().pending_calls > 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "the response never came in");
        std::thread::yield_now();
    }
    let to = socket.local_addr();
    let asker = std::thread::spawn(move || {
        let client = Socket::client(loopback_v4()).unwrap();
        client.call(to, b"meanwhile".to_vec(), None)
    });
    let request = socket.recv_request_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(request.message(), b"meanwhile");
    request.reply(b"answered".to_vec()).unwrap();
    assert_eq!(asker.join().unwrap().unwrap(), b"answered");
    assert_eq!(call.wait().unwrap(), b"later");
    echo_server.shutdown();
    echoer.join().unwrap();
}
