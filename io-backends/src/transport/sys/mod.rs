//! The system calls the socket transports share: address conversion, per-packet TOS
//! control messages, `sendmmsg`/`recvmmsg`, and the socket error queue (ICMP errors).
//!
//! This file holds what the others share: socket address conversion, iovecs, the
//! `sendmmsg`/`recvmmsg` headers ([`MmsgScratch`]) and where results are reported
//! ([`Reports`]). The parts: [`cmsg`] (control messages and TOS), [`send`] and [`recv`]
//! (batched sending and receiving), [`errqueue`] (the error queue, ICMP errors),
//! [`sockopt`] (socket options) and [`ready`] (eventfd and poll readiness).

pub(super) mod cmsg;
mod errqueue;
mod ready;
mod recv;
mod send;
mod sockopt;

use std::collections::VecDeque;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::Range;
use std::ptr;

use super::{Batch, TransportStats, Unreachable};

pub(super) use cmsg::{CmsgBuf, DEFAULT_PRIORITY, set_cmsgs, set_default_tos};
pub(super) use errqueue::{drain_errors, is_unreachable, may_be_pending};
pub(crate) use ready::{clear, signal};
pub(super) use ready::{pending, readable};
pub(crate) use recv::MAX_RUN;
pub(super) use recv::{RecvMode, Run, peek, recv_batch, recv_split};
pub(crate) use send::gso_max_packets;
pub(super) use send::{refused, send_batch};
pub(super) use sockopt::{getsockopt_int, receive_drops, setsockopt_int};

/// Writes `addr` into `storage`; returns the length to pass to the kernel.
pub(super) fn write_sockaddr(addr: SocketAddr, storage: &mut libc::sockaddr_storage) -> u32 {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { ptr::write(ptr::from_mut(storage).cast::<libc::sockaddr_in>(), sin) };
            mem::size_of::<libc::sockaddr_in>() as u32
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { ptr::write(ptr::from_mut(storage).cast::<libc::sockaddr_in6>(), sin6) };
            mem::size_of::<libc::sockaddr_in6>() as u32
        }
    }
}

/// The address the kernel wrote into `storage`, if it is IPv4 or IPv6.
pub(super) fn read_sockaddr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(sin.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(SocketAddrV6::new(ip, port, sin6.sin6_flowinfo, sin6.sin6_scope_id).into())
        }
        _ => None,
    }
}

/// An iovec the kernel reads `bytes` from.
pub(super) fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec { iov_base: bytes.as_ptr().cast_mut().cast(), iov_len: bytes.len() }
}

/// Per-message headers for `sendmmsg`/`recvmmsg`, reused across calls. They hold raw
/// pointers into a batch only for the duration of one call.
pub(super) struct MmsgScratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<CmsgBuf>,
    /// Per message: the batch datagrams it carries (first, count).
    runs: Vec<(usize, usize)>,
    /// Receiving: the slots the headers point to (the first's address, the slots' length,
    /// the first's index and how many) and whether they take control data; and how many
    /// headers the last call may have changed (the rest are still set up).
    prepared: Option<(usize, usize, usize, usize, bool)>,
    touched: usize,
    /// Sending: the datagrams of the GSO runs of one call, each run in one piece, and
    /// which iovec points at which run.
    stage: Vec<u8>,
    staged: Vec<(usize, Range<usize>)>,
}

// SAFETY: the raw pointers inside are rewritten before every system call and never
// dereferenced outside one, so moving the scratch to another thread is harmless.
unsafe impl Send for MmsgScratch {}

impl MmsgScratch {
    /// Room for `n` messages (receiving) or `n` datagrams (sending: at most two iovecs
    /// each, the slot's bytes and the tail).
    pub(super) fn new(n: usize) -> MmsgScratch {
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let (hdr, iov, name) = unsafe { (mem::zeroed(), mem::zeroed(), mem::zeroed()) };
        MmsgScratch {
            hdrs: vec![hdr; n],
            iovs: vec![iov; 2 * n],
            names: vec![name; n],
            cmsgs: vec![CmsgBuf::ZERO; n],
            runs: vec![(0, 0); n],
            stage: Vec::new(),
            staged: Vec::new(),
            prepared: None,
            touched: 0,
        }
    }

    /// Points headers `..want` at slots `first..` of `batch`. Only the headers the last
    /// call touched are reset when nothing else changed (the kernel rewrites lengths and
    /// flags; a receive usually touches one or two of 32). "Nothing else" includes the
    /// slots' length: another batch may sit where a dropped one was, with other slots, and
    /// a header left pointing at the old ones would let the kernel write past the new.
    fn prepare_recv(&mut self, batch: &mut Batch, first: usize, want: usize, gro: bool) {
        let slot = batch.slot_mut(first);
        let key = (slot.as_ptr() as usize, slot.len(), first, want, gro);
        let count = if self.prepared == Some(key) { self.touched.min(want) } else { want };
        self.prepared = Some(key);
        for i in 0..count {
            let slot = batch.slot_mut(first + i);
            self.iovs[i] = libc::iovec { iov_base: slot.as_mut_ptr().cast(), iov_len: slot.len() };
            let msg = &mut self.hdrs[i].msg_hdr;
            msg.msg_name = ptr::from_mut(&mut self.names[i]).cast();
            msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as u32;
            msg.msg_iov = &raw mut self.iovs[i];
            msg.msg_iovlen = 1;
            (msg.msg_control, msg.msg_controllen) = match gro {
                true => (self.cmsgs[i].0.as_mut_ptr().cast(), mem::size_of::<CmsgBuf>()),
                false => (ptr::null_mut(), 0),
            };
            msg.msg_flags = 0;
        }
    }
}

/// Where the socket layer reports what happened to the packets.
pub(super) struct Reports<'a> {
    pub(super) stats: &'a mut TransportStats,
    pub(super) unreachable: &'a mut VecDeque<Unreachable>,
    /// Raw IP: ICMP port-unreachable names a Homa port (in the returned Homa header).
    pub(super) raw: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch where a dropped one was, with slots of another length (white-box: the same
    /// batch with its slot length changed), gets headers for its own slots, not the old.
    #[test]
    fn receive_headers_follow_the_slot_length() {
        for (before, after) in [(2048, 1024), (1024, 2048)] {
            let mut batch = Batch::new(4, before);
            let mut s = MmsgScratch::new(BATCH_SLOTS);
            s.prepare_recv(&mut batch, 0, 2, false);
            s.touched = 0; // as after a receive that changed no header
            batch.slot_len = after;
            s.prepare_recv(&mut batch, 0, 2, false);
            for i in 0..2 {
                let slot = batch.slot_mut(i);
                assert_eq!(s.iovs[i].iov_base, slot.as_mut_ptr().cast(), "slot {i}");
                assert_eq!(s.iovs[i].iov_len, after, "slot {i}: {before} -> {after}");
            }
        }
    }

    /// Scratch headers for the tests.
    const BATCH_SLOTS: usize = 32;
}
