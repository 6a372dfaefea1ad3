//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::thread::JoinHandle;

use homa_io::{Builder, Error, Socket, TransportKind};

/// Whether the tests run as root (raw IP, network namespaces).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The transports to test here: raw IP ones only as root (with a printed reason otherwise).
pub fn transports() -> Vec<TransportKind> {
    let mut kinds = vec![TransportKind::Udp, TransportKind::UringUdp];
    if is_root() {
        kinds.extend([TransportKind::Ip, TransportKind::UringIp]);
    } else {
        eprintln!("skipping raw IP transports: not root (they need CAP_NET_RAW)");
    }
    kinds
}

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);
static NEXT_HOST: AtomicU16 = AtomicU16::new(1);

/// A loopback address no other socket of this test process uses: a raw IP socket bound
/// to it sees only its own traffic, not that of tests running in parallel.
pub fn loopback_v4() -> IpAddr {
    let n = NEXT_HOST.fetch_add(1, Ordering::Relaxed);
    IpAddr::V4(std::net::Ipv4Addr::new(127, 1, (n >> 8) as u8, n as u8))
}

/// A server port candidate (1..=32767), different on each call and for each process.
pub fn candidate_port() -> u16 {
    let base = 10_000 + (std::process::id() % 1000) as u16 * 20;
    base + NEXT_PORT.fetch_add(1, Ordering::Relaxed) % 2000
}

/// Binds a server on `ip` at the first free port.
pub fn bind_server(builder: Builder, ip: IpAddr) -> Socket {
    for _ in 0..200 {
        match builder.clone().bind(SocketAddr::new(ip, candidate_port())) {
            Ok(s) => return s,
            Err(Error::Api(homa_io::ApiError::PortInUse(_))) => continue,
            Err(e) => panic!("cannot bind a server: {e}"),
        }
    }
    panic!("no free server port");
}

/// A thread answering every request with its own bytes until the socket shuts down.
pub fn echo(server: &std::sync::Arc<Socket>) -> JoinHandle<()> {
    let server = std::sync::Arc::clone(server);
    std::thread::spawn(move || {
        while let Ok(mut request) = server.recv_request() {
            let message = request.take_message();
            request.reply(message).unwrap();
        }
    })
}

/// `len` bytes that differ from position to position.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}
