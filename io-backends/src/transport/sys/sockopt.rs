//! Socket options: integer options read and set, and the receive drops `SO_MEMINFO` counts.

use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;

/// Datagrams the kernel dropped for want of room in the socket's receive buffer
/// (`SO_MEMINFO`'s `SK_MEMINFO_DROPS`, Linux 4.6+; 0 where it cannot be read).
pub(in crate::transport) fn receive_drops(fd: RawFd) -> u64 {
    const SO_MEMINFO: i32 = 55;
    const SK_MEMINFO_DROPS: usize = 8;
    let mut info = [0u32; 9];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` and `len` are live and `len` holds `info`'s size; the kernel writes at
    // most that many bytes.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, SO_MEMINFO, info.as_mut_ptr().cast(), &mut len)
    };
    if rc < 0 || (len as usize) < (SK_MEMINFO_DROPS + 1) * 4 {
        return 0;
    }
    u64::from(info[SK_MEMINFO_DROPS])
}

/// Reads an integer socket option.
pub(in crate::transport) fn getsockopt_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are live and len holds value's size.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, ptr::from_mut(&mut value).cast(), &mut len) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(value) }
}

/// Sets an integer socket option.
pub(in crate::transport) fn setsockopt_int(
    fd: RawFd,
    level: i32,
    name: i32,
    value: i32,
) -> io::Result<()> {
    // SAFETY: the option value is a live int of the length given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}
