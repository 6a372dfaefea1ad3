//! Control messages and TOS: the buffer for a datagram's control data, the TOS / traffic
//! class of each packet (and the socket's default), the UDP GSO segment size sent and the
//! UDP GRO segment size received.

use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;

use homa_core::wire::tos_for_priority;

use super::setsockopt_int;

/// Room for the control messages of one datagram: TOS / traffic class and the UDP segment
/// size (CMSG_SPACE of an int and of a u16: 24 bytes each on 64-bit Linux).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(in crate::transport) struct CmsgBuf(pub(in crate::transport) [u8; 64]);

impl CmsgBuf {
    pub(in crate::transport) const ZERO: CmsgBuf = CmsgBuf([0; 64]);
}

/// The priority whose TOS / traffic class sockets carry by default ([`set_default_tos`]):
/// the highest, that of control packets and the shortest messages. Packets at this level
/// need no control message (the kernel parses each one; that is measurable per packet).
pub(in crate::transport) const DEFAULT_PRIORITY: u8 = 7;

/// Sets the socket's TOS (IPv4) or traffic class (IPv6) to that of [`DEFAULT_PRIORITY`].
pub(in crate::transport) fn set_default_tos(fd: RawFd, v6: bool) -> io::Result<()> {
    let tos = i32::from(tos_for_priority(DEFAULT_PRIORITY));
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, tos)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TOS, tos)
    }
}

/// Fills `msg`'s control buffer with the TOS (IPv4) or traffic class (IPv6) for Homa
/// `priority` (unless it is the socket's default, [`DEFAULT_PRIORITY`]) and, if given, the
/// UDP GSO segment size. Without either, `msg` carries no control data.
///
/// # Safety
/// `msg.msg_control` must point to a [`CmsgBuf`] that outlives the use of `msg`.
pub(in crate::transport) unsafe fn set_cmsgs(
    msg: &mut libc::msghdr,
    v6: bool,
    priority: u8,
    segment: Option<u16>,
) {
    let tos = priority != DEFAULT_PRIORITY;
    // SAFETY: pure arithmetic macros.
    let (int_space, u16_space) =
        unsafe { (libc::CMSG_SPACE(mem::size_of::<libc::c_int>() as u32), libc::CMSG_SPACE(2)) };
    msg.msg_controllen =
        (if tos { int_space } else { 0 } + if segment.is_some() { u16_space } else { 0 }) as usize;
    if msg.msg_controllen == 0 {
        msg.msg_control = ptr::null_mut();
        return;
    }
    // SAFETY: msg_control points to a CmsgBuf (64 bytes, 8-aligned: the caller's
    // contract), which holds both messages; the CMSG macros stay inside msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        if tos {
            (*c).cmsg_level = if v6 { libc::IPPROTO_IPV6 } else { libc::IPPROTO_IP };
            (*c).cmsg_type = if v6 { libc::IPV6_TCLASS } else { libc::IP_TOS };
            (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<libc::c_int>() as u32) as usize;
            let tos = libc::c_int::from(tos_for_priority(priority));
            ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), tos);
            c = libc::CMSG_NXTHDR(msg, c);
        }
        if let Some(size) = segment {
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
            ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
        }
    }
}

/// The UDP GRO segment size in a received message's control data, or 0.
///
/// # Safety
/// `msg` must describe a message the kernel just filled, control buffer included.
pub(super) unsafe fn gro_segment(msg: &libc::msghdr) -> usize {
    // SAFETY: the CMSG macros stay within msg_controllen bytes the kernel wrote.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: c points to a complete cmsghdr inside the buffer (see above).
        unsafe {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let size = ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(size).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    0
}
