//! RPCs over loopback on every transport: sizes around the packet boundaries, up to the
//! largest message, and 1,000 calls in flight at once.

mod common;

use std::net::{IpAddr, Ipv6Addr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{bind_server, echo, loopback_v4, pattern, transports};
use homa_io::{Config, Socket, TransportKind};

/// Around the packet boundaries at MTU 1500 (the sockets' MTU below), and up to the largest.
const SIZES: [usize; 6] = [1, 1_423, 1_424, 1_425, 100_000, 1_000_000];

fn echo_sizes(kind: TransportKind, server_ip: IpAddr, client_ip: IpAddr) {
    let builder = Socket::builder().transport(kind).config(patient()).mtu(1500);
    let server = Arc::new(bind_server(builder.clone(), server_ip));
    let echoer = echo(&server);
    let client = builder.client(client_ip).unwrap();
    for (i, size) in SIZES.into_iter().enumerate() {
        let message = pattern(size, i as u8);
        let response = client.call(server.local_addr(), message.clone(), None);
        let response = response.unwrap_or_else(|e| panic!("{kind} {size} B: {e}"));
        assert!(response == message, "{kind}: {size}-byte echo differs");
    }
    let m = client.metrics();
    assert_eq!(m.core.responses_received, SIZES.len() as u64);
    server.shutdown();
    echoer.join().unwrap();
}

#[test]
fn every_size_on_every_transport_ipv4() {
    for kind in transports() {
        echo_sizes(kind, loopback_v4(), loopback_v4());
    }
}

#[test]
fn every_size_on_every_transport_ipv6() {
    for kind in transports() {
        let ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
        echo_sizes(kind, ip, ip);
    }
}

#[test]
fn a_raised_message_limit_carries_longer_messages() {
    let config = Config { max_message_length: 3_000_000, ..patient() };
    let builder = Socket::builder().config(config);
    let server = Arc::new(bind_server(builder.clone(), loopback_v4()));
    let echoer = echo(&server);
    let client = builder.client(loopback_v4()).unwrap();
    let message = pattern(2_500_000, 9);
    let response = client.call(server.local_addr(), message.clone(), None).unwrap();
    assert!(response == message, "2,500,000-byte echo differs");
    server.shutdown();
    echoer.join().unwrap();
}

/// A large message's packets after its first are received straight into the message (UDP
/// only), on both ends, several messages at once, and arrive intact: with 64 KB datagrams
/// (loopback's MTU) one by one, and at MTU 1500 as the runs GRO delivers (a GSO sender's
/// packets of one message, together).
#[test]
fn large_datagrams_and_runs_are_received_in_place() {
    for (ip, mtu) in [
        (loopback_v4(), 65_535),
        (IpAddr::V6(Ipv6Addr::LOCALHOST), 65_535),
        (loopback_v4(), 1_500),
        (IpAddr::V6(Ipv6Addr::LOCALHOST), 1_500),
    ] {
        let builder = Socket::builder().config(Config { mtu, ..patient() });
        let server = Arc::new(bind_server(builder.clone(), ip));
        let echoer = echo(&server);
        let client = builder.client(ip).unwrap();
        let sizes: Vec<usize> = (0..4).map(|i| 1_000_000 - i * 70_001).collect();
        let calls: Vec<_> = sizes
            .iter()
            .zip(0u8..)
            .map(|(&size, i)| {
                let message = pattern(size, i);
                let call = client.call_async(server.local_addr(), message.clone(), None).unwrap();
                (message, call)
            })
            .collect();
        for (message, call) in calls {
            assert!(pollster::block_on(call).unwrap() == message, "{ip} {mtu}: echo differs");
        }
        let (c, s) = (client.metrics(), server.metrics());
        let sent = sizes.iter().sum::<usize>() as u64;
        for (end, m) in [("client", &c), ("server", &s)] {
            assert!(
                m.transport.rx_in_place > 0 && m.bytes_in_place > sent / 2,
                "{ip} {mtu} {end}: {} of {sent} bytes in place, {:?}",
                m.bytes_in_place,
                m.transport
            );
        }
        server.shutdown();
        echoer.join().unwrap();
    }
}

/// At MTU 1500 a megabyte goes in GSO runs as long as the kernel takes (44 packets of
/// 1,472 bytes: 64 KB), not cut short by the send batch: each run costs the kernel and the
/// receiver about as much whatever its length.
#[test]
fn a_megabyte_goes_in_the_longest_gso_runs() {
    let ip = loopback_v4();
    let builder = Socket::builder().config(patient()).mtu(1_500);
    let server = Arc::new(bind_server(builder.clone(), ip));
    let echoer = echo(&server);
    let client = builder.client(ip).unwrap();
    let message = pattern(1_000_000, 3);
    assert!(client.call(server.local_addr(), message.clone(), None).unwrap() == message);
    for (end, m) in [("client", client.metrics()), ("server", server.metrics())] {
        let t = m.transport;
        let per_call = t.tx_datagrams as f64 / t.tx_calls as f64;
        assert!(per_call >= 36.0, "{end}: {per_call:.1} datagrams per send call, {t:?}");
    }
    server.shutdown();
    echoer.join().unwrap();
}

/// Empty datagrams (a peer may send them; they hold no packet) arriving among the runs of a
/// bulk transfer are dropped, and the transfer goes on. (They once stopped the driver: the
/// receive in place divided by their length.)
#[test]
fn empty_datagrams_amid_bulk_data_are_dropped() {
    let ip = loopback_v4();
    let builder = Socket::builder().config(Config { mtu: 1_500, ..patient() });
    let server = Arc::new(bind_server(builder.clone(), ip));
    let echoer = echo(&server);
    let client = builder.client(ip).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let junk = {
        let (to, stop) = (server.local_addr(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let socket = UdpSocket::bind((ip, 0)).unwrap();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                socket.send_to(&[], to).unwrap();
                sent += 1;
            }
            sent
        })
    };
    for i in 0..4 {
        let message = pattern(1_000_000, i);
        let echoed =
            client.call(server.local_addr(), message.clone(), Some(Duration::from_secs(20)));
        assert!(echoed.unwrap() == message, "call {i}: echo differs");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(junk.join().unwrap() > 0);
    server.shutdown();
    echoer.join().unwrap();
}

/// A socket on loopback, given no MTU or link rate, sends packets as large as the loopback
/// device takes (64 KB) and is not paced; explicit values win over the path's.
#[test]
fn loopback_sockets_default_to_64_kb_packets_unpaced() {
    for ip in [loopback_v4(), IpAddr::V6(Ipv6Addr::LOCALHOST)] {
        let socket = Socket::client(ip).unwrap();
        assert_eq!((socket.mtu(), socket.link_mbps()), (65_535, 1_000_000), "{ip}");
        let set = Socket::builder().mtu(9000).link_mbps(10_000).client(ip).unwrap();
        assert_eq!((set.mtu(), set.link_mbps()), (9000, 10_000), "{ip}");
        let config = Config { mtu: 4000, ..Config::default() };
        let socket = Socket::builder().config(config).client(ip).unwrap();
        assert_eq!((socket.mtu(), socket.link_mbps()), (4000, 1_000_000), "{ip}");
    }
    // Packets that large carry every size, the packet boundaries of MTU 1500 included.
    let server = Arc::new(bind_server(Socket::builder().config(patient()), loopback_v4()));
    let echoer = echo(&server);
    let client = Socket::builder().config(patient()).client(loopback_v4()).unwrap();
    // A DATA packet of 65,535 bytes over UDP/IPv4 carries 65,535 - 28 - 56 = 65,451.
    for (i, size) in SIZES.into_iter().chain([65_450, 65_451, 65_452]).enumerate() {
        let message = pattern(size, i as u8);
        let response = client.call(server.local_addr(), message.clone(), None).unwrap();
        assert!(response == message, "{size}-byte echo differs");
    }
    let sent: u64 = client.metrics().core.packets_out_by_type.iter().sum();
    server.shutdown();
    echoer.join().unwrap();
    assert!(sent < 100, "{sent} packets for 1.3 MB: 64 KB packets would take about 40");
}

/// Blocked callers busy-poll by default (the module's 50 µs), and never with a zero window;
/// both ends count the waits that did.
#[test]
fn blocked_callers_busy_poll_unless_told_not_to() {
    for (builder, polls) in [
        (Socket::builder().config(patient()), true),
        (Socket::builder().config(patient()).busy_poll(std::time::Duration::ZERO), false),
    ] {
        let server = Arc::new(bind_server(builder.clone(), loopback_v4()));
        let echoer = echo(&server);
        let client = builder.client(loopback_v4()).unwrap();
        for i in 0..200u32 {
            let message = i.to_le_bytes().to_vec();
            let response = client.call(server.local_addr(), message.clone(), None).unwrap();
            assert_eq!(response, message);
        }
        let (c, s) = (client.metrics(), server.metrics());
        server.shutdown();
        echoer.join().unwrap();
        assert!(c.busy_polls_paid <= c.busy_polls, "{c:?}");
        let spun = c.busy_polls + s.busy_polls;
        assert_eq!(spun > 0, polls, "busy polls: client {}, server {}", c.busy_polls, s.busy_polls);
    }
}

/// Homa's defaults give up on a peer after 100 ms of silence. A debug build on two shared
/// cores can leave a thread unscheduled that long while 1,000 RPCs are in flight; these
/// tests are about correctness, so they allow 2 s.
fn patient() -> Config {
    Config { timeout_ticks: 2000, ..Config::default() }
}

#[test]
fn a_thousand_concurrent_calls() {
    for kind in transports() {
        let builder = Socket::builder().transport(kind).config(patient());
        let server = Arc::new(bind_server(builder.clone(), loopback_v4()));
        let echoer = echo(&server);
        let client = builder.client(loopback_v4()).unwrap();
        let calls: Vec<_> = (0..1000)
            .map(|i| {
                let message = pattern(1 + i * 7 % 3000, i as u8);
                let call = client.call_async(server.local_addr(), message.clone(), None).unwrap();
                (message, call)
            })
            .collect();
        for (message, call) in calls {
            let response = pollster::block_on(call).unwrap_or_else(|e| {
                panic!(
                    "{kind}: {e}\nclient {:#?}\nserver {:#?}",
                    client.metrics(),
                    server.metrics()
                )
            });
            assert!(response == message, "{kind}: echo differs");
        }
        assert_eq!(server.metrics().core.requests_received, 1000);
        server.shutdown();
        echoer.join().unwrap();
    }
}

/// Each socket numbers its RPCs from its own random even start, so a new socket that reuses
/// an old one's port is not taken for it by a server still holding its RPCs.
#[test]
fn each_socket_numbers_its_rpcs_from_a_random_start() {
    let server = bind_server(Socket::builder(), loopback_v4());
    let first_id = || {
        let client = Socket::client(loopback_v4()).unwrap();
        let call = client.call_async(server.local_addr(), b"?".to_vec(), None).unwrap();
        let request = server.recv_request().unwrap();
        let id = request.id();
        request.reply(b"!".to_vec()).unwrap();
        pollster::block_on(call).unwrap();
        id
    };
    let (a, b) = (first_id(), first_id());
    assert_eq!((a % 2, b % 2), (1, 1), "server ids are odd");
    assert_ne!(a, b, "two sockets started from the same id");
}

#[test]
fn async_server_and_client() {
    let server = bind_server(Socket::builder(), loopback_v4());
    let client = Socket::client(loopback_v4()).unwrap();
    let call = client.call_async(server.local_addr(), b"question".to_vec(), None).unwrap();
    pollster::block_on(async {
        let request = server.recv_request_async().await.unwrap();
        assert_eq!(request.message(), b"question");
        assert_eq!(request.peer(), client.local_addr());
        request.reply(b"answer".to_vec()).unwrap();
        assert_eq!(call.await.unwrap(), b"answer");
    });
}

#[test]
fn many_threads_call_and_serve_at_once() {
    for kind in transports() {
        many_threads_call_and_serve(kind);
    }
}

/// Several blocked callers and several blocked receivers: one of each leads (receives for
/// the socket itself: in the socket's receive call, in the ring, or in `poll`), the others
/// sleep and are served by the leader or the driver thread.
fn many_threads_call_and_serve(kind: TransportKind) {
    let builder = Socket::builder().transport(kind).config(patient());
    let server = Arc::new(bind_server(builder.clone(), loopback_v4()));
    let echoers: Vec<_> = (0..3).map(|_| echo(&server)).collect();
    let client = Arc::new(builder.client(loopback_v4()).unwrap());
    let callers: Vec<_> = (0..8u8)
        .map(|t| {
            let (client, to) = (Arc::clone(&client), server.local_addr());
            std::thread::spawn(move || {
                for i in 0..50 {
                    let message = pattern(1 + (i * 97) % 5000, t);
                    let response = client.call(to, message.clone(), None);
                    assert!(response.unwrap() == message, "{kind}: echo differs");
                }
            })
        })
        .collect();
    // Futures on the same socket meanwhile.
    let futures: Vec<_> = (0..20)
        .map(|i| client.call_async(server.local_addr(), vec![i; 10], None).unwrap())
        .collect();
    for (i, f) in futures.into_iter().enumerate() {
        assert_eq!(pollster::block_on(f).unwrap(), vec![i as u8; 10], "{kind}");
    }
    for c in callers {
        c.join().unwrap();
    }
    assert_eq!(server.metrics().core.requests_received, 8 * 50 + 20, "{kind}");
    server.shutdown();
    for e in echoers {
        e.join().unwrap();
    }
}

#[test]
fn each_side_tells_where_an_unanswered_call_stands() {
    let ip = loopback_v4();
    let server = bind_server(Socket::builder(), ip);
    let client = Socket::client(ip).unwrap();
    let call = client.call_async(server.local_addr(), vec![7; 200_000], None).unwrap();
    let held = server.recv_request().unwrap(); // and not answered
    let (theirs, ours) = (server.rpcs(), client.rpcs());
    assert_eq!((theirs.len(), ours.len()), (1, 1));
    let (s, c) = (&theirs[0], &ours[0]);
    assert_eq!((s.id, s.client, s.phase), (c.id, false, homa_io::Phase::InService));
    assert_eq!((c.client, c.phase), (true, homa_io::Phase::AwaitingResponse));
    assert_eq!(c.peer, server.local_addr());
    let line = format!("{c}");
    assert!(line.contains("awaiting the response; request 200,000 B, all sent"), "{line}");
    let expected =
        format!("server RPC {} with {}: with the application", c.id, client.local_addr());
    assert_eq!(format!("{s}"), expected);
    drop((held, call));
}

/// Received messages are lent: while the application holds them they count against
/// `max_rx_bytes`, and a response that does not fit beside them waits, for longer than
/// Homa's timeout, until one is dropped; then it arrives.
#[test]
fn held_responses_make_the_next_wait_until_one_is_dropped() {
    let config = Config { max_rx_bytes: 2_500_000, ..Config::default() };
    let timeout = Duration::from_micros(u64::from(config.timeout_ticks * config.tick_usecs));
    let builder = Socket::builder().config(config);
    let server = Arc::new(bind_server(builder.clone(), loopback_v4()));
    let echoer = echo(&server);
    let client = builder.client(loopback_v4()).unwrap();
    let mut held: Vec<_> = (0..2u8)
        .map(|i| client.call(server.local_addr(), pattern(1_000_000, i), None).unwrap())
        .collect();
    assert_eq!(client.metrics().lent_bytes, 2_000_000);
    let mut call = client.call_async(server.local_addr(), pattern(1_000_000, 2), None).unwrap();
    assert!(call.wait_timeout(3 * timeout).is_none(), "done beside 2 MB held");
    assert!(client.metrics().core.drops.rx_memory > 0);
    drop(held.pop());
    let last = call.wait().unwrap();
    assert!(last == pattern(1_000_000, 2));
    drop(held);
    assert_eq!(client.metrics().lent_bytes, 1_000_000, "the last response is still held");
    drop(last);
    assert_eq!(client.metrics().lent_bytes, 0);
    server.shutdown();
    echoer.join().unwrap();
}
