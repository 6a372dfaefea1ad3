//! The socket error queue: which errors may have left an ICMP error pending, reading the
//! queue (unreachable destinations, "message too long"), and letting the kernel fragment.

use std::mem;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

use super::cmsg::{control_messages, extended_error, received};
use super::{Reports, getsockopt_int, read_sockaddr, setsockopt_int};
use crate::transport::{self, Unreachable};

/// Whether a failed send or receive may have reported a socket error pending from an ICMP
/// error (with IP_RECVERR every one is also queued, with its details, on the error queue):
/// anything but "try again" and errors about our own descriptor or buffers. The queue must
/// then be read: while it holds anything the socket polls as in error, and an event loop on
/// it would spin.
pub(in crate::transport) fn may_be_pending(errno: i32) -> bool {
    !matches!(errno, libc::EAGAIN | libc::EINTR | libc::EBADF | libc::ENOTSOCK | libc::EFAULT)
}

/// Errors that mean "this destination cannot be reached".
pub(in crate::transport) fn is_unreachable(errno: i32) -> bool {
    matches!(
        errno,
        libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EADDRNOTAVAIL
    )
}

/// Reads the socket's error queue (enabled with IP_RECVERR / IPV6_RECVERR), reports the
/// destinations of ICMP "unreachable" errors and, on a "message too long", lets the kernel
/// fragment from then on (`allow_fragments`). The data read is the start of the packet the
/// error is about (from the Homa header on, for raw IP and UDP alike).
pub(in crate::transport) fn drain_errors(fd: RawFd, r: &mut Reports<'_>) -> bool {
    let mut data = [0u8; 256];
    let mut control = [0u64; 64];
    let mut drained = false;
    loop {
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let mut name: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_name = ptr::from_mut(&mut name).cast();
        msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = mem::size_of_val(&control);
        // SAFETY: msg points to live buffers of the lengths given.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            return drained;
        }
        drained = true;
        let Some(dest) = read_sockaddr(&name).map(|a| transport::transport_addr(a, r.raw)) else {
            continue;
        };
        // SAFETY: the kernel wrote msg_controllen bytes of `control`.
        for e in control_messages(unsafe { received(&msg) }).filter_map(extended_error) {
            // Only "destination unreachable" says the peer cannot be reached (the
            // kernel also reports "time exceeded", a transient routing loop, as
            // EHOSTUNREACH), and IPv6's "unrecognized next header", its protocol
            // unreachable: a raw-IP peer without Homa. And of those only the final
            // ones: the peer's host says no Homa listens there (protocol or port
            // unreachable), or a firewall forbids the path. "Host" or "network
            // unreachable" are not: a router, or this host itself when a neighbour
            // did not answer ARP or neighbour discovery in time (its replies lost in a
            // flooded queue while the peer lives), says them of a path that comes
            // back. As TCP's connections do, the RPCs go on; a peer truly gone is
            // silent, and they time out.
            let (v4, v6) =
                (e.origin == libc::SO_EE_ORIGIN_ICMP, e.origin == libc::SO_EE_ORIGIN_ICMP6);
            let (icmp_type, code) = e.icmp;
            let no_homa = v6 && (icmp_type, code) == (4, 1);
            let unreachable = (v4 && icmp_type == 3) || (v6 && icmp_type == 1);
            let final_code =
                if v4 { matches!(code, 2 | 3 | 9 | 10 | 13) } else { matches!(code, 1 | 4) };
            let errno = e.errno;
            if errno == libc::EMSGSIZE {
                // Refused here (too big for the interface) or by a router (ICMP).
                allow_fragments(fd, e.v6, dest, e.info);
            }
            if no_homa || (unreachable && final_code && is_unreachable(errno)) {
                // With UDP the port is part of `dest` already.
                let port = (r.raw && errno == libc::ECONNREFUSED && n >= 4)
                    .then(|| u16::from_be_bytes([data[2], data[3]]));
                tracing::info!(%dest, ?port, icmp_type, code, errno, "ICMP: unreachable");
                r.stats.unreachable += 1;
                r.unreachable.push_back(Unreachable { peer: dest, port });
            } else if unreachable {
                tracing::info!(%dest, icmp_type, code, errno, "ICMP: unreachable for now");
            }
        }
    }
}

/// Packets too big for the path (`mtu`, as the kernel reports it) were refused: the socket
/// stops sending with don't-fragment regardless (`*_PMTUDISC_PROBE`, set when it was opened)
/// and lets the kernel fragment what does not fit, as by default; once per socket, with a
/// warning. Slower, but a default `mtu` of 1500 keeps working over smaller-MTU links.
fn allow_fragments(fd: RawFd, v6: bool, to: SocketAddr, mtu: u32) {
    let (level, name, probe, want) = if v6 {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_PROBE,
            libc::IPV6_PMTUDISC_WANT,
        )
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE, libc::IP_PMTUDISC_WANT)
    };
    if getsockopt_int(fd, level, name).ok() == Some(probe)
        && setsockopt_int(fd, level, name, want).is_ok()
    {
        tracing::warn!(
            %to,
            "packets are larger than the path's MTU ({mtu}): the kernel fragments them from \
             now on, which is slower; set the socket's mtu (Builder::mtu) to at most {mtu}"
        );
    }
}
