//! Control messages and TOS: the buffer for a datagram's control data, the TOS / traffic
//! class of each packet (and the socket's default), the UDP GSO segment size sent, and the
//! reading of received control data (the UDP GRO segment size, ICMP error reports).

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

/// One control message of a received datagram: its level, its type and its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cmsg<'a> {
    /// `cmsg_level`: the protocol (`SOL_UDP`, `IPPROTO_IP`, ...).
    pub level: i32,
    /// `cmsg_type`: which message of that protocol.
    pub kind: i32,
    /// The data after the header, as long as the header says.
    pub data: &'a [u8],
}

/// The bytes of a `cmsghdr` (on 64-bit Linux: a `size_t` length, a level, a type).
const HEADER: usize = mem::size_of::<libc::cmsghdr>();
/// Where a control message's data starts (`CMSG_LEN(0)`).
const DATA: usize = cmsg_align(HEADER);

/// Rounds up to the alignment of control messages, that of `size_t` (`CMSG_ALIGN`).
const fn cmsg_align(len: usize) -> usize {
    let a = mem::size_of::<usize>();
    (len + a - 1) & !(a - 1)
}

/// The control messages in `control` (a received message's control buffer, as long as the
/// kernel filled it), laid out as the kernel writes them: each a `cmsghdr` then its data,
/// the next at the aligned end. Read, not trusted: a message whose length is shorter than
/// its header or runs past the buffer (the kernel truncated the buffer: `MSG_CTRUNC`) ends
/// the walk. The CMSG macros would trust those lengths; this reads only inside `control`.
pub fn control_messages(control: &[u8]) -> impl Iterator<Item = Cmsg<'_>> {
    let mut rest = control;
    std::iter::from_fn(move || {
        let header = rest.get(..HEADER)?;
        // SAFETY: `header` holds a cmsghdr's bytes; its fields are integers, valid for any bits.
        let h = unsafe { ptr::read_unaligned(header.as_ptr().cast::<libc::cmsghdr>()) };
        #[allow(clippy::useless_conversion)] // a u32 on musl
        let len = usize::try_from(h.cmsg_len).ok().filter(|&l| l >= DATA && l <= rest.len())?;
        let data = &rest[DATA..len];
        rest = rest.get(cmsg_align(len)..).unwrap_or(&[]);
        Some(Cmsg { level: h.cmsg_level, kind: h.cmsg_type, data })
    })
}

/// The UDP GRO segment size in a received datagram's control data, or 0.
pub fn gro_segment(control: &[u8]) -> usize {
    control_messages(control)
        .find(|c| c.level == libc::SOL_UDP && c.kind == libc::UDP_GRO)
        .and_then(|c| Some(libc::c_int::from_ne_bytes(c.data.get(..4)?.try_into().ok()?)))
        .and_then(|size| usize::try_from(size).ok())
        .unwrap_or(0)
}

/// An error from the socket's error queue: the `sock_extended_err` of an `IP_RECVERR` or
/// `IPV6_RECVERR` control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendedError {
    /// It came as `IPV6_RECVERR`.
    pub v6: bool,
    /// `ee_errno`: the error (`ECONNREFUSED`, `EMSGSIZE`, ...).
    pub errno: i32,
    /// `ee_origin`: who reported it (`SO_EE_ORIGIN_ICMP`, `SO_EE_ORIGIN_ICMP6`, ...).
    pub origin: u8,
    /// `ee_type` and `ee_code`: the ICMP type and code.
    pub icmp: (u8, u8),
    /// `ee_info`: for "message too long", the path's MTU.
    pub info: u32,
}

/// The error `c` carries, if it is an extended error long enough to hold one.
pub fn extended_error(c: Cmsg<'_>) -> Option<ExtendedError> {
    let v6 = match (c.level, c.kind) {
        (libc::IPPROTO_IP, libc::IP_RECVERR) => false,
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR) => true,
        _ => return None,
    };
    // struct sock_extended_err { u32 errno; u8 origin, type, code, pad; u32 info, data; }
    let d = c.data.get(..mem::size_of::<libc::sock_extended_err>())?;
    let word = |at: usize| u32::from_ne_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
    Some(ExtendedError {
        v6,
        errno: word(0) as i32,
        origin: d[4],
        icmp: (d[5], d[6]),
        info: word(8),
    })
}

/// The control data the kernel wrote into a received message's buffer.
///
/// # Safety
/// `msg.msg_control`, if not null, must point to at least `msg.msg_controllen` readable
/// bytes (after a receive the kernel has lowered it to the length it wrote).
pub(super) unsafe fn received(msg: &libc::msghdr) -> &[u8] {
    if msg.msg_control.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(msg.msg_control.cast::<u8>(), msg.msg_controllen) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control data `set_cmsgs` writes with the CMSG macros (TOS and a segment size).
    fn written() -> (CmsgBuf, usize) {
        let mut buf = CmsgBuf::ZERO;
        // SAFETY: all-zero bytes are a valid msghdr.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_control = buf.0.as_mut_ptr().cast();
        // SAFETY: msg_control points to `buf`, which outlives `msg`'s use.
        unsafe { set_cmsgs(&mut msg, false, 3, Some(1400)) };
        let len = msg.msg_controllen;
        (buf, len)
    }

    #[test]
    fn reads_what_the_cmsg_macros_write() {
        let (buf, len) = written();
        let found: Vec<_> = control_messages(&buf.0[..len]).collect();
        let tos = libc::c_int::from(tos_for_priority(3)).to_ne_bytes();
        assert_eq!(found.len(), 2);
        assert_eq!(
            (found[0].level, found[0].kind, found[0].data),
            (libc::IPPROTO_IP, libc::IP_TOS, &tos[..])
        );
        assert_eq!((found[1].level, found[1].kind), (libc::SOL_UDP, libc::UDP_SEGMENT));
        assert_eq!(found[1].data, 1400u16.to_ne_bytes());
    }

    #[test]
    fn a_truncated_buffer_ends_the_walk_at_the_last_whole_message() {
        let (buf, len) = written();
        let whole = control_messages(&buf.0[..len]).count();
        assert_eq!(whole, 2);
        for cut in 0..len {
            // The messages are 20 and 18 bytes long, the second at 24.
            let n = control_messages(&buf.0[..cut]).count();
            assert_eq!(n, usize::from(cut >= 20) + usize::from(cut >= 42), "cut at {cut}");
        }
        // A length past the end, or shorter than a header, is not followed.
        let mut bad = buf;
        bad.0[..8].copy_from_slice(&(len as u64 + 1).to_ne_bytes());
        assert_eq!(control_messages(&bad.0[..len]).count(), 0);
        bad.0[..8].copy_from_slice(&3u64.to_ne_bytes());
        assert_eq!(control_messages(&bad.0[..len]).count(), 0);
    }

    #[test]
    fn gro_segment_needs_a_whole_int() {
        let mut buf = [0u8; 24];
        buf[..8].copy_from_slice(&20u64.to_ne_bytes());
        buf[8..12].copy_from_slice(&libc::SOL_UDP.to_ne_bytes());
        buf[12..16].copy_from_slice(&libc::UDP_GRO.to_ne_bytes());
        buf[16..20].copy_from_slice(&1416i32.to_ne_bytes());
        assert_eq!(gro_segment(&buf), 1416);
        buf[..8].copy_from_slice(&18u64.to_ne_bytes());
        assert_eq!(gro_segment(&buf), 0, "two bytes of an int");
        buf[..8].copy_from_slice(&20u64.to_ne_bytes());
        buf[16..20].copy_from_slice(&(-5i32).to_ne_bytes());
        assert_eq!(gro_segment(&buf), 0, "a negative size");
    }
}
