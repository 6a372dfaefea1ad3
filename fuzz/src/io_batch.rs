//! `io_batch`: homa-io's batched UDP I/O, the one place with `unsafe` code that talks to the
//! kernel (`sendmmsg` with UDP GSO runs and per-datagram control messages, `recvmmsg` with
//! GRO and its control messages, the peek and split receive of receive-in-place, or the
//! same sockets through io_uring: its posted receives into ring slots and its send
//! submissions), driven with fuzzer-chosen datagram sizes, counts, runs, priorities, batch
//! capacities, slot lengths and split points, over a real pair of loopback sockets.
//!
//! Checks: no panic and no memory error (run it under the address sanitizer: `cargo fuzz`
//! does by default); every datagram received is one that was sent, byte for byte, or its
//! first bytes when the receive buffer was shorter (then it says so by its length); a GRO
//! batch splits into packets whose concatenation is its bytes; nothing arrives twice.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use arbitrary::{Arbitrary, Unstructured};
use homa_io::TransportKind;
use homa_io::transport::{self, Batch, Datagram, Transport};

/// One step.
#[derive(Arbitrary, Debug)]
pub(crate) enum Op {
    /// Sends `count` datagrams of `len` bytes (`len % 2000 + 1`), the last `short` bytes
    /// shorter: equal ones to one peer at one priority go as a GSO run.
    Send { count: u8, len: u16, short: u16, priority: u8 },
    /// Receives into a batch of `capacity % 40 + 1` slots of `slot_len % 70_000 + 1` bytes.
    Recv { capacity: u8, slot_len: u32 },
    /// Peeks at the next datagram, then receives it split: `head % 64 + 1` bytes into each
    /// header, `segment`-byte packets (`segment % 3000 + 2`, or the peeked segment).
    Split { head: u8, segment: u16, use_peeked: bool },
}

/// The sending and receiving transports of one kind (made once: sockets are a scarce
/// resource under a fuzzer that runs millions of inputs).
struct Pair {
    tx: Box<dyn Transport>,
    rx: Box<dyn Transport>,
}

/// The pair of plain sockets, or of io_uring ones (plain ones where io_uring is refused).
fn pair(uring: bool) -> &'static Mutex<Pair> {
    static PAIRS: [OnceLock<Mutex<Pair>>; 2] = [OnceLock::new(), OnceLock::new()];
    PAIRS[usize::from(uring)].get_or_init(|| {
        let kind = if uring { TransportKind::UringUdp } else { TransportKind::Udp };
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        let open = || transport::open(kind, any, false).expect("a UDP socket");
        Mutex::new(Pair { tx: open(), rx: open() })
    })
}

/// The next datagram's serial, never reused: a datagram an earlier input left in flight
/// (an io_uring send or receive completes later) is known by a serial below this input's.
static SERIAL: AtomicU32 = AtomicU32::new(0);

/// Datagram contents: a 4-byte serial, then bytes derived from it.
fn contents(serial: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = serial
        .to_le_bytes()
        .into_iter()
        .chain((0..).map(|i: u32| (i.wrapping_mul(31) ^ serial) as u8))
        .take(len)
        .collect();
    v.truncate(len);
    v
}

/// The target: see the module docs.
pub fn io_batch(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let uring = bool::arbitrary(&mut u).unwrap_or(false);
    let mut pair = pair(uring).lock().unwrap_or_else(|e| e.into_inner());
    let Pair { tx, rx } = &mut *pair;
    drain(rx.as_mut());
    let to = rx.local_addr();
    let mut sent: HashMap<u32, Vec<u8>> = HashMap::new();
    let first_serial = SERIAL.load(Ordering::Relaxed);
    let mut out = Batch::new(64, 2048);
    // (An exhausted `Unstructured` still yields ops, of default values: stop there.)
    while !u.is_empty() {
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        match op {
            Op::Send { count, len, short, priority } => {
                out.clear();
                let (count, len) = (usize::from(count % 64) + 1, usize::from(len % 2000) + 4);
                for i in 0..count {
                    let len =
                        if i + 1 == count { len - usize::from(short) % (len - 3) } else { len };
                    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
                    let bytes = contents(serial, len);
                    out.next_slot()[..len].copy_from_slice(&bytes);
                    out.push(Datagram { addr: to, len, priority: priority % 8, segment: 0 });
                    sent.insert(serial, bytes);
                }
                // Refused sends are counted, not errors; loopback refuses none here.
                tx.send(&mut out).expect("send");
            }
            Op::Recv { capacity, slot_len } => {
                let (capacity, slot_len) =
                    (usize::from(capacity % 40) + 1, (slot_len % 70_000) as usize + 1);
                let mut batch = Batch::new(capacity, slot_len);
                rx.recv(&mut batch).expect("recv");
                assert!(batch.len() <= capacity);
                for i in 0..batch.len() {
                    let (d, bytes) = batch.get(i);
                    assert_eq!(d.len, bytes.len());
                    assert!(bytes.len() <= slot_len.max(d.len));
                    let joined: Vec<u8> = d.packets(bytes).flatten().copied().collect();
                    assert_eq!(joined, bytes, "a GRO batch's packets are its bytes");
                    for packet in d.packets(bytes) {
                        check(&mut sent, first_serial, packet);
                    }
                }
            }
            Op::Split { head, segment, use_peeked } => {
                let mut first = vec![0; usize::from(head % 64) + 1];
                let Some(p) = rx.peek(&mut first) else { continue };
                assert!(p.segment == 0 || p.segment < p.len);
                let segment = match (use_peeked, p.segment) {
                    (true, 0) => p.len,
                    (true, s) => s,
                    (false, _) => usize::from(segment % 3000) + 2,
                };
                let head_len = first.len().min(segment - 1);
                let packets = p.len.div_ceil(segment).clamp(1, 64);
                let mut heads = vec![0; packets * head_len];
                let payload = p.len.saturating_sub(packets * head_len);
                let mut message = Vec::with_capacity(payload);
                match rx.recv_split(&mut heads, head_len, segment, &mut message, payload) {
                    Ok(Some(from)) => {
                        assert_eq!(from, tx.local_addr());
                        assert_eq!(message.len(), payload);
                        // Reassemble the datagram as sent and check each packet.
                        let mut whole = Vec::new();
                        for (h, body) in
                            heads.chunks(head_len).zip(message.chunks(segment - head_len))
                        {
                            whole.extend_from_slice(h);
                            whole.extend_from_slice(body);
                        }
                        let d = Datagram {
                            addr: from,
                            len: whole.len(),
                            priority: 0,
                            segment: p.segment,
                        };
                        for packet in d.packets(&whole) {
                            check(&mut sent, first_serial, packet);
                        }
                    }
                    // Another length than guessed: dropped (counted), the message untouched.
                    Ok(None) => assert!(message.is_empty()),
                    Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}"),
                }
            }
        }
    }
}

/// `packet` must be a datagram sent and not yet seen, whole or its first bytes, or one an
/// earlier input sent (its serial is below `first`).
fn check(sent: &mut HashMap<u32, Vec<u8>>, first: u32, packet: &[u8]) {
    let Some(serial) = packet.get(..4).map(|s| u32::from_le_bytes(s.try_into().unwrap())) else {
        return; // too short to name itself: a truncated receive
    };
    if serial < first {
        return;
    }
    let bytes =
        sent.remove(&serial).unwrap_or_else(|| panic!("datagram {serial} unknown or seen twice"));
    assert_eq!(packet, &bytes[..packet.len()], "datagram {serial} differs");
}

/// Takes whatever an earlier input left.
fn drain(rx: &mut dyn Transport) {
    let mut batch = Batch::new(32, 65_536);
    loop {
        batch.clear();
        if rx.recv(&mut batch).is_err() || batch.is_empty() {
            return;
        }
    }
}
