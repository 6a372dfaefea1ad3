//! Two network namespaces joined by a veth pair (created here, always removed). Raw IP: the
//! frames on the wire are IP protocol 146 carrying valid Homa packets, with the TOS /
//! traffic class of each packet's intended priority. Every transport: a link whose MTU is
//! below the socket's still carries its messages. Needs root; skipped (with a printed
//! reason) otherwise.

mod common;

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;

use homa_core::wire::{self, tos_for_priority};
use homa_io::{Socket, TransportKind};

const CLIENT_V4: &str = "198.18.0.1";
const SERVER_V4: &str = "198.18.0.2";
const CLIENT_V6: &str = "2001:2::1";
const SERVER_V6: &str = "2001:2::2";

/// Two namespaces, `a` (client) and `b` (server), joined by veth `va` <-> `vb`; deleted
/// on drop (which also deletes the veth pair).
struct Netns {
    a: String,
    b: String,
    va: String,
    vb: String,
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(io::Error::other(format!("ip {}: {}", args.join(" "), err.trim())))
    }
}

impl Netns {
    /// Namespaces and veths named after this process and `tag` (one per test).
    fn create(tag: char) -> io::Result<Netns> {
        let id = format!("hio{}{tag}", std::process::id());
        let n = Netns {
            a: format!("{id}a"),
            b: format!("{id}b"),
            va: format!("{id}va"),
            vb: format!("{id}vb"),
        };
        ip(&["netns", "add", &n.a])?;
        ip(&["netns", "add", &n.b])?;
        ip(&[
            "link", "add", &n.va, "netns", &n.a, "type", "veth", "peer", "name", &n.vb, "netns",
            &n.b,
        ])?;
        for (ns, dev, v4, v6) in
            [(&n.a, &n.va, CLIENT_V4, CLIENT_V6), (&n.b, &n.vb, SERVER_V4, SERVER_V6)]
        {
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev])?;
            ip(&["-n", ns, "addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        // Until the kernel's link watcher marks the veths up, their queues drop every
        // frame (the first ARP request included): wait for that state, not for a time.
        for (ns, dev) in [(&n.a, &n.va), (&n.b, &n.vb)] {
            let start = std::time::Instant::now();
            while !link_is_up(ns, dev)? {
                if start.elapsed() > std::time::Duration::from_secs(20) {
                    return Err(io::Error::other(format!("{dev} in {ns} never came up")));
                }
                std::thread::yield_now();
            }
        }
        Ok(n)
    }

    /// Runs `f` on a thread inside namespace `ns`; sockets it opens stay there.
    fn run_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let file = File::open(format!("/var/run/netns/{ns}")).unwrap();
        std::thread::spawn(move || {
            // SAFETY: setns on an open namespace file; affects only this thread.
            assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            f()
        })
        .join()
        .unwrap()
    }
}

fn link_is_up(ns: &str, dev: &str) -> io::Result<bool> {
    let out = Command::new("ip").args(["-n", ns, "-o", "link", "show", dev]).output()?;
    Ok(String::from_utf8_lossy(&out.stdout).contains("state UP"))
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// An AF_PACKET socket seeing every frame on one interface, both directions.
fn capture(ifname: &str) -> OwnedFd {
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: plain system calls; the sockaddr_ll is fully initialised.
    unsafe {
        let index = libc::if_nametoindex(name.as_ptr());
        assert!(index > 0, "no interface {ifname}");
        let proto = (libc::ETH_P_ALL as u16).to_be();
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, proto.into());
        assert!(fd >= 0, "AF_PACKET: {}", io::Error::last_os_error());
        let fd = OwnedFd::from_raw_fd(fd);
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        let len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        let rc = libc::bind(fd.as_raw_fd(), (&raw const sll).cast(), len);
        assert_eq!(rc, 0, "bind AF_PACKET: {}", io::Error::last_os_error());
        fd
    }
}

/// Every frame captured so far.
fn frames(fd: &OwnedFd) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_000];
    loop {
        // SAFETY: receives into a live buffer of the length given.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return out;
        }
        out.push(buf[..n as usize].to_vec());
    }
}

/// An IP packet seen in an Ethernet frame.
struct IpPacket<'a> {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    /// TOS (IPv4) or traffic class (IPv6).
    tos: u8,
    /// IPv4 only: the identification field and the flags with the fragment offset.
    id_and_fragment: Option<(u16, u16)>,
    payload: &'a [u8],
}

fn ip_packet(frame: &[u8]) -> Option<IpPacket<'_>> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(14..)?;
    match ethertype {
        0x0800 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let addr = |at: usize| IpAddr::from(<[u8; 4]>::try_from(&ip[at..at + 4]).unwrap());
            let (src, dst) = (addr(12), addr(16));
            let field = |at: usize| u16::from_be_bytes([ip[at], ip[at + 1]]);
            let id_and_fragment = Some((field(4), field(6)));
            let payload = ip.get(ihl..total)?;
            Some(IpPacket { src, dst, protocol: ip[9], tos: ip[1], id_and_fragment, payload })
        }
        0x86dd => {
            let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let addr = |at: usize| IpAddr::from(<[u8; 16]>::try_from(&ip[at..at + 16]).unwrap());
            let (src, dst) = (addr(8), addr(24));
            let tos = (ip[0] << 4) | (ip[1] >> 4);
            let payload = ip.get(40..40 + len)?;
            Some(IpPacket { src, dst, protocol: ip[6], tos, id_and_fragment: None, payload })
        }
        _ => None,
    }
}

fn one_rpc_on_the_wire(net: &Netns, kind: TransportKind, client_ip: &str, server_ip: &str) {
    let server_addr = SocketAddr::new(server_ip.parse().unwrap(), 7);
    let server = Netns::run_in(&net.b, move || {
        Socket::builder().transport(kind).bind(server_addr).map(Arc::new)
    })
    .unwrap();
    let echoer = common::echo(&server);
    let (va, client_ip): (String, IpAddr) = (net.va.clone(), client_ip.parse().unwrap());
    let (tap, client) = Netns::run_in(&net.a, move || {
        (capture(&va), Socket::builder().transport(kind).client(client_ip))
    });
    let client = client.unwrap();
    let message = common::pattern(100, 3);
    let r = client.call(server_addr, message.clone(), None);
    if r.is_err() {
        for f in frames(&tap) {
            eprintln!("{:02x?}", &f[..f.len().min(80)]);
        }
        eprintln!("{:?}\n{:?}", client.metrics().transport, server.metrics().transport);
    }
    assert_eq!(r.unwrap(), message);

    // The request and the response had crossed the veth before the call returned.
    let mut data = 0;
    for frame in frames(&tap) {
        let Some(IpPacket { src, dst, protocol, tos, id_and_fragment, payload }) =
            ip_packet(&frame)
        else {
            continue; // ARP
        };
        let ours = [client_ip, server_addr.ip()];
        if !(ours.contains(&src) && ours.contains(&dst)) {
            continue; // IPv6 multicast housekeeping
        }
        if protocol == 58 && (133..=137).contains(&payload[0]) {
            continue; // IPv6 neighbour discovery
        }
        assert_eq!(protocol, 146, "{kind}: only Homa passes between the two, got {protocol}");
        if let Some((id, fragment)) = id_and_fragment {
            // As the module's packets (ip_queue_xmit on an unconnected socket): don't
            // fragment, IP ID 0.
            assert_eq!((id, fragment), (0, 0x4000), "{kind}: IPv4 ID and DF/fragment offset");
        }
        let packet = wire::Repr::parse(payload).unwrap_or_else(|e| panic!("{kind}: not Homa: {e}"));
        // First contact: data goes one level below control packets (no CUTOFFS seen yet
        // when it was sent), and so does data resent on request (at its original's
        // level); control packets at the top level.
        let (expected, what) = match packet.body {
            wire::Body::Data { .. } => (6, "DATA"),
            _ => (7, "control"),
        };
        assert_eq!(tos, tos_for_priority(expected), "{kind}: {what} packet {packet:?}");
        if let wire::Body::Data { payload, .. } = packet.body {
            assert_eq!(payload, &message[..]);
            data += 1;
        }
    }
    assert!(data >= 2, "{kind}: expected the request and the response, saw {data} DATA");
    server.shutdown();
    echoer.join().unwrap();
}

/// A pair of namespaces for `test`, or `None` (the test says why it skips) when not root
/// or they cannot be made.
fn lab(test: &str, tag: char) -> Option<Netns> {
    if !common::is_root() {
        eprintln!("skipping {test}: not root (needs network namespaces and CAP_NET_RAW)");
        return None;
    }
    Netns::create(tag).map_err(|e| eprintln!("skipping {test}: cannot create namespaces: {e}")).ok()
}

#[test]
fn raw_ip_frames_are_protocol_146_with_their_priority() {
    let Some(net) = lab("raw_ip_frames_are_protocol_146_with_their_priority", 'p') else {
        return;
    };
    for kind in [TransportKind::Ip, TransportKind::UringIp] {
        one_rpc_on_the_wire(&net, kind, CLIENT_V4, SERVER_V4);
        one_rpc_on_the_wire(&net, kind, CLIENT_V6, SERVER_V6);
        unreachable_peers(&net, kind);
    }
}

/// With no Homa socket in the server's namespace its kernel answers ICMP protocol
/// unreachable; an address without a route fails the send. Both are `Error::Unreachable`.
/// (IPv6's protocol unreachable is a parameter problem, "unrecognized next header".)
fn unreachable_peers(net: &Netns, kind: TransportKind) {
    let families =
        [(CLIENT_V4, SERVER_V4, "198.19.0.1:7"), (CLIENT_V6, SERVER_V6, "[2001:3::1]:7")];
    for (client_ip, server_ip, unrouted) in families {
        let client_ip: IpAddr = client_ip.parse().unwrap();
        let client =
            Netns::run_in(&net.a, move || Socket::builder().transport(kind).client(client_ip))
                .unwrap();
        for dest in [SocketAddr::new(server_ip.parse().unwrap(), 7), unrouted.parse().unwrap()] {
            let r =
                client.call(dest, b"anyone?".to_vec(), Some(std::time::Duration::from_secs(30)));
            assert!(
                matches!(r, Err(homa_io::Error::Unreachable(a)) if a == dest),
                "{kind} {dest}: {r:?}"
            );
        }
    }
}

/// The veth's MTU (1,400) is below the sockets' (1,500, given): the kernel refuses
/// the full-size packets, and the socket goes back to letting it fragment them.
#[test]
fn a_link_mtu_below_the_sockets_is_fragmented_into() {
    let Some(net) = lab("a_link_mtu_below_the_sockets_is_fragmented_into", 'm') else {
        return;
    };
    ip(&["-n", &net.a, "link", "set", &net.va, "mtu", "1400"]).unwrap();
    ip(&["-n", &net.b, "link", "set", &net.vb, "mtu", "1400"]).unwrap();
    let kinds = [TransportKind::Udp, TransportKind::Ip, TransportKind::UringUdp];
    for (kind, (client_ip, server_ip)) in
        kinds.into_iter().flat_map(|k| [(k, (CLIENT_V4, SERVER_V4)), (k, (CLIENT_V6, SERVER_V6))])
    {
        // Port 8: raw-IP Homa ports are unique within the process, and the other test here
        // serves on 7 at the same time.
        let server_addr = SocketAddr::new(server_ip.parse().unwrap(), 8);
        let server = Netns::run_in(&net.b, move || {
            Socket::builder().transport(kind).mtu(1500).bind(server_addr).map(Arc::new)
        })
        .unwrap();
        let echoer = common::echo(&server);
        let client_ip: IpAddr = client_ip.parse().unwrap();
        let client = Netns::run_in(&net.a, move || {
            Socket::builder().transport(kind).mtu(1500).client(client_ip)
        })
        .unwrap();
        let message = common::pattern(20_000, 5);
        let r = client.call(server_addr, message.clone(), Some(std::time::Duration::from_secs(30)));
        assert_eq!(r.unwrap_or_else(|e| panic!("{kind} {server_addr}: {e}")), message);
        server.shutdown();
        echoer.join().unwrap();
    }
}

/// Sockets given no MTU or link rate take the veth's (its MTU, and the 10 Gbit/s its driver
/// reports) from their address; with an unspecified one the MTU of the only interface up
/// and the module's 25 Gbit/s; loopback's inside the namespace; given values win.
#[test]
fn sockets_take_mtu_and_link_rate_from_their_interface() {
    let Some(net) = lab("sockets_take_mtu_and_link_rate_from_their_interface", 'd') else {
        return;
    };
    ip(&["-n", &net.a, "link", "set", &net.va, "mtu", "9000"]).unwrap();
    let opened = Netns::run_in(&net.a, || {
        let ips = [CLIENT_V4, CLIENT_V6, "0.0.0.0", "::", "127.0.0.1"];
        let mut got: Vec<(u32, u32)> = ips
            .iter()
            .map(|ip| Socket::client(ip.parse::<IpAddr>().unwrap()).unwrap())
            .map(|s| (s.mtu(), s.link_mbps()))
            .collect();
        let given = Socket::builder()
            .mtu(1500)
            .link_mbps(1000)
            .client(CLIENT_V4.parse::<IpAddr>().unwrap());
        let given = given.unwrap();
        got.push((given.mtu(), given.link_mbps()));
        got
    });
    // An unspecified address takes the only interface's MTU, but no one interface's speed.
    let (veth, any) = ((9000, 10_000), (9000, 25_000));
    assert_eq!(opened, [veth, veth, any, any, (65_535, 1_000_000), (1500, 1000)]);
}
