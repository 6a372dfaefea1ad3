//! The io_uring baseline of `homa bench rtt`: plain UDP datagrams through a ring, as cheaply
//! as a ping-pong can use one (each exchange is one `io_uring_enter` that submits the send,
//! posts the receive and waits for it; a send that succeeds posts no completion). What
//! io_uring itself costs a round trip here, for homa/uring to be read against.

use std::io;
use std::mem;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use io_uring::{IoUring, opcode, squeue, types};

use super::UdpEcho;

const RECV: u64 = 1;
const SEND: u64 = 2;

/// A UDP socket on loopback driven through a ring of its own.
pub(super) struct UringUdp {
    ring: IoUring,
    socket: UdpSocket,
}

impl UringUdp {
    pub(super) fn bind() -> io::Result<UringUdp> {
        // As homa-io's rings: completions wait for the thread's next system call.
        let ring = IoUring::builder().setup_coop_taskrun().build(8)?;
        Ok(UringUdp { ring, socket: UdpSocket::bind("127.0.0.1:0")? })
    }

    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends `out` (if any) and receives the next datagram into `buf`, in one system call;
    /// its length and source.
    pub(super) fn exchange(
        &mut self,
        out: Option<(&[u8], SocketAddrV4)>,
        buf: &mut [u8],
    ) -> io::Result<(usize, SocketAddrV4)> {
        let fd = types::Fd(self.socket.as_raw_fd());
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let (mut to, mut from): (libc::sockaddr_in, libc::sockaddr_in) =
            unsafe { (mem::zeroed(), mem::zeroed()) };
        let mut send_iov: libc::iovec;
        // SAFETY: as above.
        let (mut send, mut recv): (libc::msghdr, libc::msghdr) =
            unsafe { (mem::zeroed(), mem::zeroed()) };
        if let Some((bytes, dest)) = out {
            to.sin_family = libc::AF_INET as libc::sa_family_t;
            to.sin_port = dest.port().to_be();
            to.sin_addr.s_addr = u32::from_ne_bytes(dest.ip().octets());
            send_iov = libc::iovec { iov_base: bytes.as_ptr() as *mut _, iov_len: bytes.len() };
            send.msg_name = (&raw mut to).cast();
            send.msg_namelen = mem::size_of::<libc::sockaddr_in>() as u32;
            send.msg_iov = &raw mut send_iov;
            send.msg_iovlen = 1;
            let entry = opcode::SendMsg::new(fd, &raw const send)
                .flags(libc::MSG_DONTWAIT as u32)
                .build()
                .flags(squeue::Flags::SKIP_SUCCESS)
                .user_data(SEND);
            // SAFETY: the entry's buffers live until the submission below has run it (a
            // non-blocking send completes during the submission).
            unsafe { self.ring.submission().push(&entry) }.map_err(io::Error::other)?;
        }
        let mut recv_iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        recv.msg_name = (&raw mut from).cast();
        recv.msg_namelen = mem::size_of::<libc::sockaddr_in>() as u32;
        recv.msg_iov = &raw mut recv_iov;
        recv.msg_iovlen = 1;
        let entry = opcode::RecvMsg::new(fd, &raw mut recv).build().user_data(RECV);
        // SAFETY: the receive's buffers live until its completion, which this call waits for.
        unsafe { self.ring.submission().push(&entry) }.map_err(io::Error::other)?;
        loop {
            self.ring.submit_and_wait(1)?;
            let mut received = None;
            for c in self.ring.completion() {
                if c.result() < 0 {
                    return Err(io::Error::from_raw_os_error(-c.result()));
                }
                if c.user_data() == RECV {
                    received = Some(c.result() as usize);
                }
            }
            if let Some(n) = received {
                let ip = u32::from_be(from.sin_addr.s_addr).into();
                return Ok((n, SocketAddrV4::new(ip, u16::from_be(from.sin_port))));
            }
        }
    }
}

/// An echo server on a ring of its own; like [`UdpEcho`]'s, an empty datagram stops it.
pub(super) fn start_echo() -> io::Result<UdpEcho> {
    let mut server = UringUdp::bind()?;
    let addr = server.local_addr()?;
    let thread =
        std::thread::Builder::new().name("bench-uring-server".into()).spawn(move || {
            let mut buf = vec![0u8; 65_536];
            // The last request, echoed with the next receive.
            let (mut reply, mut reply_to) = (Vec::new(), None);
            while let Ok((n, from)) = server.exchange(reply_to.map(|to| (&reply[..], to)), &mut buf)
            {
                if n == 0 {
                    break;
                }
                reply.clear();
                reply.extend_from_slice(&buf[..n]);
                reply_to = Some(from);
            }
        })?;
    Ok(UdpEcho { addr, thread: Some(thread) })
}
