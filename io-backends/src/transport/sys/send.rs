//! Sending a batch: `sendmmsg` (with UDP GSO runs where the kernel takes them), `sendto`
//! for a lone datagram, and the accounting of datagrams the kernel refused.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

use super::{
    DEFAULT_PRIORITY, MmsgScratch, Reports, drain_errors, iovec, is_unreachable, may_be_pending,
    set_cmsgs, write_sockaddr,
};
use crate::transport::{Batch, Unreachable};

/// Most segments in one UDP GSO send (the kernel's UDP_MAX_SEGMENTS is 64 or more).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes in one UDP GSO send (a UDP datagram holds at most 65,507).
const GSO_MAX_BYTES: usize = 65_000;

/// Sends `batch` with `sendmmsg` and clears it; a datagram sent alone is its slot's bytes
/// and its tail (two iovecs). With `gso`, runs of equal-sized datagrams to one peer at one
/// priority go as one UDP GSO message, copied into one buffer; if the kernel refuses that,
/// `gso` is turned off and they go one by one. A refused datagram is dropped and counted;
/// if its destination is unreachable it is reported. A pending socket error (an ICMP error
/// about an earlier packet) is read from the error queue and the message is retried once.
pub(in crate::transport) fn send_batch(
    fd: RawFd,
    v6: bool,
    gso: &mut bool,
    batch: &mut Batch,
    s: &mut MmsgScratch,
    r: &mut Reports<'_>,
) -> io::Result<()> {
    if batch.len() == 1 && send_lone(fd, batch, r) {
        batch.clear();
        return Ok(());
    }
    let mut next = 0;
    while next < batch.len() {
        next = send_some(fd, v6, gso, batch, next, s, r)?;
    }
    batch.clear();
    Ok(())
}

/// The round-trip case: a batch of one datagram in one piece at the socket's default
/// priority goes by `sendto` without the `sendmmsg` scratch. Returns whether it was sent;
/// if not, the general path sends it again and handles the error (a pending ICMP error this
/// call reported is read from the error queue first, as the general path would have).
fn send_lone(fd: RawFd, batch: &Batch, r: &mut Reports<'_>) -> bool {
    let (d, bytes) = batch.get(0);
    if batch.tail(0).is_some() || d.priority != DEFAULT_PRIORITY {
        return false;
    }
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut name: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let namelen = write_sockaddr(d.addr, &mut name);
    // SAFETY: `bytes` and `name` are live for the call; the kernel only reads them.
    let rc = unsafe {
        libc::sendto(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT,
            ptr::from_ref(&name).cast(),
            namelen,
        )
    };
    r.stats.tx_calls += 1;
    if rc >= 0 {
        r.stats.tx_datagrams += 1;
        return true;
    }
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if may_be_pending(errno) {
        drain_errors(fd, r);
    }
    false
}

/// How many datagrams from `first` on can go as one GSO message, and their segment size:
/// datagrams to one peer at one priority, each as long as the first (the last may be
/// shorter), e.g. the full-size packets of a message or the one-packet responses of many
/// RPCs to one client.
fn run_len(batch: &Batch, first: usize) -> (usize, usize) {
    let (head, _) = batch.get(first);
    let segment = batch.datagram_len(first);
    let max = gso_max_packets(segment);
    let mut n = 1;
    while first + n < batch.len() && n < max {
        let (d, _) = batch.get(first + n);
        let same = batch.datagram_len(first + n - 1) == segment;
        let fits = batch.datagram_len(first + n) <= segment;
        if !same || !fits || d.addr != head.addr || d.priority != head.priority {
            break;
        }
        n += 1;
    }
    (n, segment)
}

/// The most packets of `packet_len` bytes one GSO send carries.
pub(crate) fn gso_max_packets(packet_len: usize) -> usize {
    GSO_MAX_SEGMENTS.min(GSO_MAX_BYTES / packet_len.max(1)).max(1)
}

/// Sends up to a scratch-full of messages starting at datagram `first`; returns the first
/// datagram not yet handled.
fn send_some(
    fd: RawFd,
    v6: bool,
    gso: &mut bool,
    batch: &Batch,
    first: usize,
    s: &mut MmsgScratch,
    r: &mut Reports<'_>,
) -> io::Result<usize> {
    let (mut n, mut k, mut v) = (0, first, 0);
    s.stage.clear();
    s.staged.clear();
    while n < s.hdrs.len() && k < batch.len() {
        // A GSO run takes one iovec; a lone datagram at most two: its slot's bytes, and
        // its tail if it has one.
        let (count, segment) = if *gso { run_len(batch, k) } else { (1, 0) };
        let need = if count > 1 { 1 } else { 2 };
        if s.iovs.len() - v < need {
            break;
        }
        let first_iov = v;
        let whole = if count > 1 { batch.contiguous(k, count) } else { None };
        if let Some(run) = whole {
            // Written back to back, one packet per slot: the run is one buffer already.
            s.iovs[v] = iovec(run);
            v += 1;
        } else if count > 1 {
            // A GSO run goes as one buffer, copied here: the kernel copies one buffer for
            // less than two iovecs a segment (header, payload) cost it, by more than this
            // copy costs (homa bench throughput at MTU 1500: 8-10 % less CPU per byte).
            // Its iovec is set once the stage is complete: the stage may move as it grows.
            let start = s.stage.len();
            for j in k..k + count {
                s.stage.extend_from_slice(batch.get(j).1);
                if let Some(tail) = batch.tail(j) {
                    s.stage.extend_from_slice(tail.as_slice());
                }
            }
            s.staged.push((v, start..s.stage.len()));
            v += 1;
        } else {
            s.iovs[v] = iovec(batch.get(k).1);
            v += 1;
            if let Some(tail) = batch.tail(k) {
                s.iovs[v] = iovec(tail.as_slice());
                v += 1;
            }
        }
        let (d, _) = batch.get(k);
        let namelen = write_sockaddr(d.addr, &mut s.names[n]);
        let msg = &mut s.hdrs[n].msg_hdr;
        msg.msg_name = ptr::from_mut(&mut s.names[n]).cast();
        msg.msg_namelen = namelen;
        msg.msg_iov = &raw mut s.iovs[first_iov];
        msg.msg_iovlen = v - first_iov;
        msg.msg_control = s.cmsgs[n].0.as_mut_ptr().cast();
        msg.msg_flags = 0;
        let segment = (count > 1).then_some(segment as u16);
        // SAFETY: msg_control points to this message's own CmsgBuf, which lives in the
        // scratch for the whole call.
        unsafe { set_cmsgs(msg, v6, d.priority, segment) };
        s.runs[n] = (k, count);
        n += 1;
        k += count;
    }
    for (iov, range) in s.staged.drain(..) {
        s.iovs[iov] = iovec(&s.stage[range]);
    }
    let (mut i, mut retried) = (0, false);
    while i < n {
        // SAFETY: hdrs[i..n] point to live names, iovecs (into `batch`, its tails and the
        // stage, which is not touched again in this call) and control buffers set up
        // above; the kernel only reads them. One message goes with sendmsg (or sendto, in
        // one piece without control data), which cost the kernel less than a batch of one.
        let sent = unsafe {
            if n - i == 1 {
                let h = &s.hdrs[i].msg_hdr;
                let rc = if h.msg_controllen == 0 && h.msg_iovlen <= 1 {
                    let iov = &*h.msg_iov;
                    let name = h.msg_name.cast::<libc::sockaddr>();
                    libc::sendto(
                        fd,
                        iov.iov_base,
                        iov.iov_len,
                        libc::MSG_DONTWAIT,
                        name,
                        h.msg_namelen,
                    )
                } else {
                    libc::sendmsg(fd, h, libc::MSG_DONTWAIT)
                };
                if rc >= 0 { 1 } else { -1 }
            } else {
                libc::sendmmsg(fd, s.hdrs[i..].as_mut_ptr(), (n - i) as u32, libc::MSG_DONTWAIT)
            }
        };
        r.stats.tx_calls += 1;
        if sent > 0 {
            let sent = sent as usize;
            r.stats.tx_datagrams += s.runs[i..i + sent].iter().map(|&(_, c)| c as u64).sum::<u64>();
            (i, retried) = (i + sent, false);
            continue;
        }
        let err = io::Error::last_os_error();
        let errno = err.raw_os_error().unwrap_or(0);
        let (start, count) = s.runs[i];
        // Probably an ICMP error about an earlier packet, if the error queue held one: learn
        // which peer it was about, then try this message again.
        let pending = may_be_pending(errno) && drain_errors(fd, r);
        match errno {
            libc::EINTR => {}
            libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH if !retried => {
                retried = true;
            }
            _ if pending && !retried => retried = true,
            // (EINVAL for a datagram to port 0 is about that destination, not about GSO.)
            libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::ENOPROTOOPT | libc::EOPNOTSUPP
                if count > 1 && batch.get(start).0.addr.port() != 0 =>
            {
                *gso = false;
                tracing::info!("UDP GSO refused ({err}); sending datagrams one by one");
                return Ok(start);
            }
            // The socket is unusable. (EINVAL is about one datagram, e.g. to port 0: below.)
            libc::EBADF | libc::ENOTSOCK | libc::EFAULT => return Err(err),
            // Still the error of an ICMP message (another came meanwhile), which the error
            // queue has judged: the datagrams are lost, not refused for good.
            _ if pending => {
                r.stats.tx_dropped += count as u64;
                (i, retried) = (i + 1, false);
            }
            _ => {
                let (d, _) = batch.get(start);
                for _ in 0..count {
                    refused(d.addr, errno, r);
                }
                tracing::debug!(to = %d.addr, "send failed: {err}");
                (i, retried) = (i + 1, false);
            }
        }
    }
    Ok(k)
}

/// Counts a datagram the kernel refused with `errno`, reporting its peer if the error is
/// final for it. Transient refusals (a full buffer or queue, ENOBUFS / EAGAIN / ENOMEM, or
/// a firewall rule dropping the packet, EPERM) are a lost packet like any other: Homa's
/// RESENDs recover it.
pub(in crate::transport) fn refused(to: SocketAddr, errno: i32, r: &mut Reports<'_>) {
    if errno == libc::EINVAL {
        // No datagram to this address can be sent (UDP port 0, an IPv6 link-local address
        // without its interface): its calls fail now rather than time out.
        tracing::warn!(%to, "the kernel refuses to send to this address (EINVAL)");
    }
    if is_unreachable(errno) || matches!(errno, libc::EACCES | libc::EINVAL) {
        tracing::info!(%to, errno, "send refused: unreachable");
        r.stats.unreachable += 1;
        r.unreachable.push_back(Unreachable { peer: to, port: None });
    }
    r.stats.tx_dropped += 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Datagram;

    #[test]
    fn gso_runs_are_equal_sized_packets_to_one_peer_at_one_priority() {
        let (a, b): (SocketAddr, SocketAddr) =
            ("1.1.1.1:1".parse().unwrap(), "2.2.2.2:2".parse().unwrap());
        let mut batch = Batch::new(12, 100);
        // full a, full a, short a | full a | full b, full b | full b at another priority |
        // small a, small a, smaller a | small a: one-packet messages of many RPCs
        // (shorter than the slot) go together too
        for (addr, len, priority) in [
            (a, 100, 6),
            (a, 100, 6),
            (a, 40, 6),
            (a, 100, 6),
            (b, 100, 6),
            (b, 100, 6),
            (b, 100, 7),
            (a, 30, 6),
            (a, 30, 6),
            (a, 20, 6),
            (a, 30, 6),
        ] {
            batch.push(Datagram { addr, len, priority, segment: 0 });
        }
        assert_eq!(run_len(&batch, 0), (3, 100));
        assert_eq!(run_len(&batch, 3), (1, 100));
        assert_eq!(run_len(&batch, 4), (2, 100));
        assert_eq!(run_len(&batch, 6), (1, 100));
        assert_eq!(run_len(&batch, 7), (3, 30));
        assert_eq!(run_len(&batch, 10), (1, 30));
    }

    /// Gathered DATA (headers in the slot, message bytes in the tail) is full when slot and
    /// tail together fill `slot_len`.
    #[test]
    fn gso_runs_count_the_tails_of_gathered_datagrams() {
        let mut ep = homa_core::Endpoint::new(homa_core::Config::default()).unwrap();
        let to: SocketAddr = "198.18.0.1:1".parse().unwrap();
        let port = ep.bind_ephemeral().unwrap();
        // 2,847 bytes go first (SRPT) as 1,424 + 1,423, then 3,000 as 1,424 + 1,424 + 152.
        ep.send_request(homa_core::Instant::ZERO, port, to, 99, vec![1; 3000], 0).unwrap();
        ep.send_request(homa_core::Instant::ZERO, port, to, 99, vec![2; 2847], 1).unwrap();
        let mut batch = Batch::new(8, ep.config().max_packet_len());
        while let Some((t, tail)) =
            ep.poll_transmit_gather(homa_core::Instant::ZERO, batch.next_slot()).unwrap()
        {
            batch.push_gather(Datagram { addr: to, len: t.len, priority: 5, segment: 0 }, tail);
        }
        let lens: Vec<usize> = (0..batch.len()).map(|i| batch.datagram_len(i)).collect();
        assert_eq!(lens, [1480, 1479, 1480, 1480, 208]);
        assert_eq!(run_len(&batch, 0), (2, 1480), "a datagram one byte short ends its run");
        assert_eq!(run_len(&batch, 2), (3, 1480));
    }
}
