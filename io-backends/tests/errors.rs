//! Bad arguments, silent and unreachable peers, shutdown with calls pending, garbage
//! datagrams, the allow-list, and the missing-capability error.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use std::os::fd::AsRawFd;

use common::{bind_server, candidate_port, echo, is_root, loopback_v4};
use homa_io::transport::{Batch, Datagram, RECV_SLOT_LEN};
use homa_io::{ApiError, Error, Socket, TransportKind};

/// A bound UDP socket on a Homa server port that never answers.
fn silent_peer(ip: IpAddr) -> UdpSocket {
    loop {
        match UdpSocket::bind(SocketAddr::new(ip, candidate_port())) {
            Ok(s) => return s,
            Err(_) => continue,
        }
    }
}

/// A peer that receives but never answers, for `kind`: a UDP socket, or for raw IP a raw
/// socket of protocol 146 on an address of its own (so the kernel sends no ICMP
/// protocol unreachable either). Keep the first value alive while using the address.
fn silent_peer_for(kind: TransportKind) -> (socket2::Socket, SocketAddr) {
    if kind.is_ip() {
        let ip = loopback_v4();
        let raw = socket2::Domain::IPV4;
        let s = socket2::Socket::new(raw, socket2::Type::RAW, Some(146.into())).unwrap();
        s.bind(&SocketAddr::new(ip, 0).into()).unwrap();
        (s, SocketAddr::new(ip, 9))
    } else {
        let s = silent_peer(loopback_v4());
        let addr = s.local_addr().unwrap();
        (s.into(), addr)
    }
}

#[test]
fn server_ports_must_be_1_to_32767() {
    let ip = loopback_v4();
    for port in [0, 32768, 40000, 65535] {
        let r = Socket::bind(SocketAddr::new(ip, port));
        assert!(
            matches!(r, Err(Error::Api(ApiError::InvalidPort(p))) if p == port),
            "port {port}: {r:?}"
        );
    }
    let server = bind_server(Socket::builder(), ip);
    let again = Socket::bind(server.local_addr());
    assert!(
        matches!(again, Err(Error::Api(ApiError::PortInUse(p))) if p == server.port()),
        "{again:?}"
    );
}

#[test]
fn bad_call_arguments_are_typed_errors() {
    let server = bind_server(Socket::builder(), loopback_v4());
    let client = Socket::client(loopback_v4()).unwrap();
    let to = server.local_addr();
    let empty = client.call(to, Vec::new(), None);
    assert!(matches!(empty, Err(Error::Api(ApiError::MessageLength { len: 0, .. }))), "{empty:?}");
    let huge = client.call_async(to, vec![0; 1_000_001], None);
    assert!(
        matches!(huge, Err(Error::Api(ApiError::MessageLength { len: 1_000_001, max: 1_000_000 }))),
        "{huge:?}"
    );
    for port in [0, 32768] {
        let r = client.call(SocketAddr::new(to.ip(), port), vec![1], None);
        assert!(matches!(r, Err(Error::Api(ApiError::InvalidPort(p))) if p == port), "{r:?}");
    }
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 1000);
    let r = client.call(v6, vec![1], None);
    assert!(matches!(r, Err(Error::AddressFamily(a)) if a == v6), "{r:?}");
    let r = client.abort(12345678);
    assert!(matches!(r, Err(Error::Api(_))), "{r:?}");
    // Nothing above disturbed the socket.
    let server = Arc::new(server);
    let echoer = echo(&server);
    assert_eq!(client.call(to, b"still fine".to_vec(), None).unwrap(), b"still fine");
    server.shutdown();
    echoer.join().unwrap();
}

#[test]
fn a_silent_peer_times_out() {
    for kind in common::transports() {
        let (_peer, to) = silent_peer_for(kind);
        let client = Socket::builder().transport(kind).client(loopback_v4()).unwrap();
        // The caller's deadline...
        let r = client.call(to, b"anyone?".to_vec(), Some(Duration::from_millis(20)));
        assert!(matches!(r, Err(Error::TimedOut)), "{kind}: {r:?}");
        // ...or Homa's own: the peer never answers a RESEND either.
        let r = client.call(to, b"anyone?".to_vec(), None);
        assert!(matches!(r, Err(Error::PeerSilent(a)) if a == to), "{kind}: {r:?}");
        assert_eq!(client.metrics().core.client_timeouts, 1, "{kind}");
        assert_eq!(client.metrics().pending_calls, 0, "{kind}");
    }
}

#[test]
fn a_closed_port_is_unreachable() {
    // ICMP port unreachable comes back on loopback; IP_RECVERR reports it.
    let to = silent_peer(IpAddr::V4(Ipv4Addr::LOCALHOST)).local_addr().unwrap(); // closed now
    let client = Socket::client(Ipv4Addr::LOCALHOST).unwrap();
    let r = client.call(to, b"hello?".to_vec(), Some(Duration::from_secs(30)));
    assert!(matches!(r, Err(Error::Unreachable(a)) if a == to), "{r:?}");
    assert!(client.metrics().transport.unreachable >= 1);
}

#[test]
fn shutdown_fails_pending_calls() {
    for kind in common::transports() {
        shutdown_with_calls_pending(kind);
    }
}

fn shutdown_with_calls_pending(kind: TransportKind) {
    let (_peer, to) = silent_peer_for(kind);
    // Homa itself must not time the calls out first, however slow this machine is.
    let config = homa_io::Config { timeout_ticks: 100_000, ..Default::default() };
    let client = Socket::builder().transport(kind).config(config).client(loopback_v4());
    let client = Arc::new(client.unwrap());
    let calls: Vec<_> =
        (0..10).map(|_| client.call_async(to, b"wait".to_vec(), None).unwrap()).collect();
    let blocked = {
        let client = Arc::clone(&client);
        std::thread::spawn(move || client.call(to, b"wait".to_vec(), None))
    };
    let abort_me = client.call_async(to, b"abort".to_vec(), None).unwrap();
    client.abort(abort_me.id()).unwrap();
    assert!(matches!(abort_me.wait(), Err(Error::Aborted)));
    client.shutdown();
    for call in calls {
        let r = pollster::block_on(call);
        assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
    }
    // The blocked caller either was waiting (and is failed) or arrives after shutdown.
    assert!(matches!(blocked.join().unwrap(), Err(Error::Shutdown)));
    let late = client.call(to, b"late".to_vec(), None);
    assert!(matches!(late, Err(Error::Shutdown)), "{late:?}");
    assert!(matches!(client.recv_request(), Err(Error::Shutdown)));
}

#[test]
fn shutdown_wakes_a_waiting_server() {
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let waiting = {
        let server = Arc::clone(&server);
        std::thread::spawn(move || server.recv_request().map(|_| ()))
    };
    let r = server.recv_request_timeout(Duration::from_millis(1));
    assert!(matches!(r, Err(Error::TimedOut)), "{r:?}");
    server.shutdown();
    assert!(matches!(waiting.join().unwrap(), Err(Error::Shutdown)));
    let r = pollster::block_on(server.recv_request_async());
    assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
}

#[test]
fn garbage_is_dropped_and_counted_while_serving() {
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let echoer = echo(&server);
    let client = Socket::client(loopback_v4()).unwrap();
    let to = server.local_addr();
    let junk = UdpSocket::bind(SocketAddr::new(loopback_v4(), 0)).unwrap();
    let garbage: [&[u8]; 4] = [b"", b"x", &[0xff; 27], &[0x10; 2000]];
    for g in garbage {
        junk.send_to(g, to).unwrap();
    }
    // Each call proves the server still serves; stop once it has counted every datagram.
    // (The last one reads as DATA of a message far over max_message_length.)
    let counted = || {
        let d = server.metrics().core.drops;
        (d.malformed, d.too_long)
    };
    for i in 0..1000 {
        assert_eq!(client.call(to, vec![i as u8; 10], None).unwrap(), vec![i as u8; 10]);
        if counted() == (3, 1) {
            break;
        }
    }
    assert_eq!(counted(), (3, 1));
    server.shutdown();
    echoer.join().unwrap();
}

#[test]
fn the_allow_list_drops_and_counts_other_peers() {
    let allowed = loopback_v4();
    let server = Arc::new(bind_server(
        Socket::builder().allow([allowed.to_string().parse().unwrap()]),
        loopback_v4(),
    ));
    let echoer = echo(&server);
    let friend = Socket::client(allowed).unwrap();
    let stranger = Socket::client(loopback_v4()).unwrap();
    let to = server.local_addr();
    let r = stranger.call(to, b"let me in".to_vec(), Some(Duration::from_millis(50)));
    assert!(matches!(r, Err(Error::TimedOut)), "{r:?}");
    assert!(server.metrics().dropped_by_allow_list >= 1);
    assert_eq!(server.metrics().core.packets_in, 0);
    assert_eq!(friend.call(to, b"hi".to_vec(), None).unwrap(), b"hi");
    server.shutdown();
    echoer.join().unwrap();
}

#[test]
fn raw_ip_without_cap_net_raw_names_the_capability() {
    let attempt = || Socket::builder().transport(TransportKind::Ip).client(loopback_v4());
    if !is_root() {
        let r = attempt();
        assert!(
            matches!(r, Err(Error::MissingCapability { capability: "CAP_NET_RAW", .. })),
            "{r:?}"
        );
        return;
    }
    // Capabilities are per thread: drop CAP_NET_RAW in a thread of our own.
    let r = std::thread::spawn(move || {
        drop_cap_net_raw();
        attempt().map(|_| ())
    })
    .join()
    .unwrap();
    match r {
        Err(Error::MissingCapability { capability: "CAP_NET_RAW", .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// Removes CAP_NET_RAW from the calling thread's effective set.
fn drop_cap_net_raw() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_RAW: u32 = 13;
    let mut header = Header { version: VERSION_3, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data structs, as the ABI requires.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()), 0);
        data[0].effective &= !(1 << CAP_NET_RAW);
        assert_eq!(libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()), 0);
    }
}

/// An ICMP error outside the unreachable family (parameter problem: EPROTO) is read off
/// the socket's error queue too: left there it keeps the socket polling as in error, so the
/// driver thread (or a polling leader) would spin and its timers would wait for datagrams
/// that are not there. Whichever path meets the error reads it: a receive, a send, a peek,
/// or `read_errors` when only the queue is left (`SO_ERROR` took the pending error).
#[test]
fn other_icmp_errors_are_read_off_the_error_queue() {
    let Some((mut t, at, fd, mut batch)) =
        icmp_target("other_icmp_errors_are_read_off_the_error_queue")
    else {
        return;
    };

    icmp_parameter_problem(at);
    assert!(in_error(fd, 5000), "the ICMP error did not arrive");
    t.recv(&mut batch).unwrap();
    assert!(batch.is_empty());
    assert!(!in_error(fd, 0), "a receive left the error queued");

    icmp_parameter_problem(at);
    assert!(in_error(fd, 5000));
    let peer = UdpSocket::bind(SocketAddr::new(at.ip(), 0)).unwrap();
    batch.next_slot()[..5].copy_from_slice(b"hello");
    let to = peer.local_addr().unwrap();
    batch.push(Datagram { addr: to, len: 5, priority: 7, segment: 0 });
    t.send(&mut batch).unwrap();
    assert!(!in_error(fd, 0), "a send left the error queued");
    let mut got = [0u8; 16];
    assert_eq!(peer.recv(&mut got).unwrap(), 5, "the datagram was sent after all");

    icmp_parameter_problem(at);
    assert!(in_error(fd, 5000));
    assert_eq!(t.peek(&mut [0; 56]), None, "nothing waits");
    assert!(!in_error(fd, 0), "a peek (receive-in-place) left the error queued");

    icmp_parameter_problem(at);
    assert!(in_error(fd, 5000));
    let mut err = 0i32;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: reads an int option into a live int of the length given.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, (&raw mut err).cast(), &mut len)
    };
    assert_eq!((rc, err), (0, libc::EPROTO), "SO_ERROR takes the pending error");
    t.recv(&mut batch).unwrap();
    assert!(in_error(fd, 0), "only the queue is left, which a receive does not see");
    t.read_errors();
    assert!(!in_error(fd, 0), "read_errors left the error queued");
}

/// The kernel reports ICMP "time exceeded" (a routing loop) as EHOSTUNREACH, like an
/// unreachable host; only "destination unreachable" can mean the peer cannot be reached,
/// and only when the peer's host says so (port or protocol unreachable). "Host
/// unreachable" is what this host reports of itself when a neighbour's ARP replies are
/// lost for a few seconds (a flooded receive queue, as after a stall), peer alive: the
/// RPCs go on, and time out if the peer is truly gone.
#[test]
fn only_a_final_destination_unreachable_makes_a_peer_unreachable() {
    let Some((mut t, at, fd, mut batch)) =
        icmp_target("only_a_final_destination_unreachable_makes_a_peer_unreachable")
    else {
        return;
    };
    let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();

    icmp_error(at, 11, 0); // time exceeded in transit
    assert!(in_error(fd, 5000), "the ICMP error did not arrive");
    t.recv(&mut batch).unwrap();
    assert_eq!(t.poll_unreachable().map(|u| u.peer), None, "time exceeded");
    assert_eq!(t.stats().unreachable, 0);

    icmp_error(at, 3, 1); // host unreachable
    assert!(in_error(fd, 5000), "the ICMP error did not arrive");
    t.recv(&mut batch).unwrap();
    assert_eq!(t.poll_unreachable().map(|u| u.peer), None, "host unreachable");
    assert_eq!(t.stats().unreachable, 0);

    icmp_error(at, 3, 3); // port unreachable
    assert!(in_error(fd, 5000), "the ICMP error did not arrive");
    t.recv(&mut batch).unwrap();
    assert_eq!(t.poll_unreachable().map(|u| u.peer), Some(peer), "port unreachable");
    assert_eq!(t.stats().unreachable, 1);
}

/// A UDP datagram from source port 0 cannot be answered (a send to port 0 fails): it is
/// dropped and counted before the endpoint sees it, and the socket keeps serving.
#[test]
fn a_datagram_from_port_0_is_dropped_and_counted() {
    if !is_root() {
        eprintln!(
            "skipping a_datagram_from_port_0_is_dropped_and_counted: not root (it sends from a raw socket)"
        );
        return;
    }
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let echoer = echo(&server);
    let client = Socket::client(loopback_v4()).unwrap();
    let to = server.local_addr();
    // A UDP header by hand (source port 0, length, no checksum) and one byte; the kernel
    // adds the IP header.
    let mut udp = vec![0, 0];
    udp.extend_from_slice(&to.port().to_be_bytes());
    udp.extend_from_slice(&9u16.to_be_bytes());
    udp.extend_from_slice(&[0, 0, b'x']);
    let (v4, raw) = (socket2::Domain::IPV4, socket2::Type::RAW);
    let s = socket2::Socket::new(v4, raw, Some(socket2::Protocol::UDP)).unwrap();
    s.send_to(&udp, &SocketAddr::new(to.ip(), 0).into()).unwrap();
    // Each call proves the server still serves; stop once it has counted the datagram.
    for i in 0..1000 {
        assert_eq!(client.call(to, vec![i as u8; 10], None).unwrap(), vec![i as u8; 10]);
        if server.metrics().transport.rx_dropped == 1 {
            break;
        }
    }
    assert_eq!(server.metrics().transport.rx_dropped, 1);
    assert_eq!(server.metrics().core.drops.malformed, 0, "the endpoint never saw it");
    server.shutdown();
    echoer.join().unwrap();
}

/// A datagram the kernel refuses on its own (EINVAL: to port 0) is dropped and counted;
/// the rest of the batch still goes.
#[test]
fn a_refused_datagram_does_not_take_the_rest_of_the_batch() {
    let local = SocketAddr::new(loopback_v4(), 0);
    let mut t =
        homa_io::transport::open(TransportKind::Udp, local, /* reuse_port */ false).unwrap();
    let peer = UdpSocket::bind(SocketAddr::new(loopback_v4(), 0)).unwrap();
    let mut batch = Batch::new(4, RECV_SLOT_LEN);
    for to in [SocketAddr::new(loopback_v4(), 0), peer.local_addr().unwrap()] {
        batch.next_slot()[..5].copy_from_slice(b"hello");
        batch.push(Datagram { addr: to, len: 5, priority: 7, segment: 0 });
    }
    t.send(&mut batch).unwrap();
    let mut got = [0u8; 16];
    peer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(peer.recv(&mut got).unwrap(), 5, "the second datagram went");
    assert_eq!(t.stats().tx_dropped, 1);
}

/// A UDP transport on loopback for a test to aim ICMP errors at, with its address, its
/// readiness fd and a receive batch; `None` (the reason printed) unless root, since a raw
/// socket sends the ICMP.
fn icmp_target(
    test: &str,
) -> Option<(Box<dyn homa_io::Transport>, SocketAddr, std::os::fd::RawFd, Batch)> {
    if !is_root() {
        eprintln!("skipping {test}: not root (it sends ICMP from a raw socket)");
        return None;
    }
    let local = SocketAddr::new(loopback_v4(), 0);
    let t = homa_io::transport::open(TransportKind::Udp, local, /* reuse_port */ false).unwrap();
    let (at, fd) = (t.local_addr(), t.readiness_fd().as_raw_fd());
    Some((t, at, fd, Batch::new(4, RECV_SLOT_LEN)))
}

/// Whether `fd` polls as in error within `ms` milliseconds.
fn in_error(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 && p.revents & libc::POLLERR != 0 }
}

/// Sends the UDP socket at `about` an ICMP parameter problem about a datagram it sent to
/// 127.0.0.1:9 (a raw ICMP socket on loopback; needs root).
fn icmp_parameter_problem(about: SocketAddr) {
    icmp_error(about, 12, 0);
}

/// Sends the UDP socket at `about` an ICMP error of `kind` and `code` about a datagram it
/// sent to 127.0.0.1:9 (a raw ICMP socket on loopback; needs root).
fn icmp_error(about: SocketAddr, kind: u8, code: u8) {
    let IpAddr::V4(ip) = about.ip() else { panic!("IPv4 only") };
    let mut icmp = vec![kind, code, 0, 0, 0, 0, 0, 0];
    let mut inner = [0u8; 28];
    inner[0] = 0x45;
    inner[2..4].copy_from_slice(&28u16.to_be_bytes());
    inner[8] = 64;
    inner[9] = 17;
    inner[12..16].copy_from_slice(&ip.octets());
    inner[16..20].copy_from_slice(&Ipv4Addr::LOCALHOST.octets());
    let sum = internet_checksum(&inner[..20]);
    inner[10..12].copy_from_slice(&sum.to_be_bytes());
    inner[20..22].copy_from_slice(&about.port().to_be_bytes());
    inner[22..24].copy_from_slice(&9u16.to_be_bytes());
    inner[24..26].copy_from_slice(&8u16.to_be_bytes());
    icmp.extend_from_slice(&inner);
    let sum = internet_checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let (v4, raw) = (socket2::Domain::IPV4, socket2::Type::RAW);
    let s = socket2::Socket::new(v4, raw, Some(socket2::Protocol::ICMPV4)).unwrap();
    s.send_to(&icmp, &SocketAddr::new(about.ip(), 0).into()).unwrap();
}

fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 =
        bytes.chunks(2).map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
