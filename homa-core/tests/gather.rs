//! `poll_transmit_gather` sends exactly the packets `poll_transmit` writes: new DATA,
//! retransmissions and control packets, with the message bytes of multi-packet messages
//! left out of the buffer.

mod common;

use homa_core::Instant;
use std::net::SocketAddr;

use common::*;
use homa_core::wire::{Body, PacketType, header, resend};
use homa_core::{Config, Endpoint};

const SERVER: &str = "198.18.0.1:1";

/// Two endpoints in the same state: each sent a 100,000-byte and a 100-byte request.
fn twins() -> (Endpoint, Endpoint, u16) {
    let server: SocketAddr = SERVER.parse().unwrap();
    let mut twins = [(); 2].map(|_| Endpoint::new(Config::default()).unwrap());
    let mut port = 0;
    for ep in &mut twins {
        port = ep.bind_ephemeral().unwrap();
        ep.send_request(Instant::ZERO, port, server, SERVER_PORT, pattern(100_000, 1), 0).unwrap();
        ep.send_request(Instant::ZERO, port, server, SERVER_PORT, pattern(100, 2), 1).unwrap();
    }
    let [written, gathered] = twins;
    (written, gathered, port)
}

/// Drains both endpoints for 100 µs from `start` (the pacer spreads packets out),
/// asserting packet by packet that `gathered`'s headers plus slice equal `written`'s
/// packet. Returns (packets, packets with a slice).
fn compare(written: &mut Endpoint, gathered: &mut Endpoint, start: u64) -> (usize, usize) {
    let len = written.config().max_packet_len();
    let (mut buf, mut head) = (vec![0; len], vec![0; len]);
    let (mut packets, mut sliced) = (0, 0);
    for now in (start..start + 100_000).step_by(1_000) {
        let (p, s) = compare_now(written, gathered, now, &mut buf, &mut head);
        (packets, sliced) = (packets + p, sliced + s);
    }
    (packets, sliced)
}

fn compare_now(
    written: &mut Endpoint,
    gathered: &mut Endpoint,
    now: u64,
    buf: &mut [u8],
    head: &mut [u8],
) -> (usize, usize) {
    let (mut packets, mut sliced) = (0, 0);
    loop {
        let w = written.poll_transmit(Instant::from_nanos(now), buf).unwrap();
        let g = gathered.poll_transmit_gather(Instant::from_nanos(now), head).unwrap();
        let (mut g, slice) = match (w, g) {
            (Some(_), Some(g)) => g,
            (None, None) => return (packets, sliced),
            (w, g) => panic!("only one endpoint sent: {w:?} / {g:?}"),
        };
        let w = w.unwrap();
        let mut bytes = head[..g.len].to_vec();
        if let Some(s) = slice {
            bytes.extend_from_slice(s.as_slice());
            g.len += s.len();
            sliced += 1;
        }
        assert_eq!(g, w, "packet {packets}: different descriptions");
        assert!(bytes == buf[..w.len], "packet {packets}: different bytes");
        packets += 1;
    }
}

#[test]
fn gathered_packets_equal_written_ones() {
    let (mut written, mut gathered, port) = twins();
    // 40,000 unscheduled bytes of the long request in 29 packets, each with a slice; the
    // short request whole.
    let (packets, sliced) = compare(&mut written, &mut gathered, 0);
    assert_eq!((packets, sliced), (30, 29));

    // 5 ms later (sooner, the RESEND would have crossed fresh data and draw BUSY), the server
    // asks for bytes 1,000..5,000 again (and so for packets 0..=3 of 1,424 B).
    let h = header::Repr::new(PacketType::Resend, SERVER_PORT, port, 3); // the server's id of RPC 2
    let ask = packet(h, Body::Resend(resend::Repr { offset: 1000, length: 4000, priority: 5 }));
    for ep in [&mut written, &mut gathered] {
        ep.handle_packet(Instant::from_nanos(5_000_000), SERVER.parse().unwrap(), &ask).unwrap();
    }
    assert_eq!(compare(&mut written, &mut gathered, 5_000_000), (4, 4));
    assert_eq!(written.metrics().retransmitted_packets, 4);
}
