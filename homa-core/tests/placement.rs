//! Receive-in-place (`Endpoint::place`): a DATA packet whose payload the caller appends
//! straight to its message has exactly the effect of `handle_packet`; and a placement the
//! caller gives up or botches loses nothing.

mod common;

use homa_core::Instant;
use std::net::SocketAddr;

use common::*;
use homa_core::wire::data::{self, HEADER_LEN, continues};
use homa_core::{Config, Endpoint, Event, Metrics};

const CLIENT: &str = "198.18.0.2:40000";
const SERVER: &str = "198.18.0.1:99";
const LEN: usize = 300_000;

/// How the server takes each DATA packet from the client.
#[derive(Clone, Copy, PartialEq)]
enum Take {
    Copy,
    InPlace,
    /// Place, append more junk than the payload and give up (`fill` returns false); then
    /// take the packet with `handle_packet`.
    AbandonFirst,
    /// Place runs of packets that continue each other (`place_run`), as GRO delivers them.
    InRuns,
}

/// Hands `packets` to `s` in runs of consecutive packets of one message, each placed as
/// one (or by copy where it cannot be); returns the packets placed.
fn place_runs(s: &mut Endpoint, now: Instant, from: SocketAddr, packets: &[Vec<u8>]) -> usize {
    let mut placed = 0;
    let mut rest = packets;
    while let [first, ..] = rest {
        let step = first.len() - HEADER_LEN;
        let offset = data::Packet::new_unchecked(&first[..]).offset();
        let n = 1 + rest[1..]
            .iter()
            .zip(1u32..)
            .take_while(|(p, i)| {
                p.len() - HEADER_LEN <= step && continues(first, p, offset + i * step as u32)
            })
            .count();
        // Only the last may be short.
        let n = (1..=n).find(|&k| rest[k - 1].len() < first.len()).unwrap_or(n);
        let run = &rest[..n];
        let payload_len = run.iter().map(|p| p.len() - HEADER_LEN).sum();
        let fill = |b: &mut Vec<u8>| {
            run.iter().for_each(|p| b.extend_from_slice(&p[HEADER_LEN..]));
            true
        };
        if s.place_run(now, from, first, payload_len, n as u32, fill) {
            placed += n;
        } else {
            run.iter().for_each(|p| s.handle_packet(now, from, p).unwrap());
        }
        rest = &rest[n..];
    }
    placed
}

struct Run {
    message: Vec<u8>,
    placed: usize,
    server_metrics: Metrics,
    /// Every packet the server sent, in order.
    server_packets: Vec<Vec<u8>>,
}

/// A client sends a `LEN`-byte request; the server takes its packets as `take` says.
fn run(take: Take) -> Run {
    let (client, server): (SocketAddr, SocketAddr) =
        (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
    let config = Config { link_mbps: 100_000, ..Config::default() };
    let mut c = Endpoint::new(config.clone()).unwrap();
    let port = c.bind_ephemeral().unwrap();
    let mut s = Endpoint::new(config).unwrap();
    s.bind(SERVER_PORT).unwrap();
    c.send_request(Instant::ZERO, port, server, SERVER_PORT, pattern(LEN, 5), 0).unwrap();
    let mut buf = vec![0; c.config().max_packet_len()];
    let (mut placed, mut server_packets) = (0, vec![]);
    for now in (0..100 * MS).step_by(1_000) {
        let mut sent = vec![];
        while let Some(t) = c.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            sent.push(buf[..t.len].to_vec());
        }
        if take == Take::InRuns {
            placed += place_runs(&mut s, Instant::from_nanos(now), client, &sent);
            sent.clear();
        }
        for packet in &sent {
            let packet = &packet[..];
            let payload_len = packet.len().saturating_sub(HEADER_LEN);
            if take == Take::AbandonFirst {
                s.place(Instant::from_nanos(now), client, packet, payload_len, |buf| {
                    buf.extend_from_slice(&vec![0xEE; payload_len + 100]);
                    false
                });
            }
            let in_place = take == Take::InPlace
                && s.place(Instant::from_nanos(now), client, packet, payload_len, |buf| {
                    buf.extend_from_slice(&packet[HEADER_LEN..]);
                    true
                });
            if in_place {
                placed += 1;
            } else {
                s.handle_packet(Instant::from_nanos(now), client, packet).unwrap();
            }
        }
        while let Some(t) = s.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            server_packets.push(buf[..t.len].to_vec());
            c.handle_packet(Instant::from_nanos(now), server, &buf[..t.len]).unwrap();
        }
        if let Some(Event::RequestReceived { message, .. }) = s.poll_event() {
            return Run { message, placed, server_metrics: s.metrics().clone(), server_packets };
        }
    }
    panic!("the request never arrived");
}

#[test]
fn a_message_received_in_place_is_the_message_received_by_copy() {
    let copied = run(Take::Copy);
    assert_eq!(copied.message, pattern(LEN, 5));
    assert_eq!(copied.placed, 0);
    for take in [Take::InPlace, Take::AbandonFirst, Take::InRuns] {
        let r = run(take);
        assert!(r.message == copied.message, "the message differs");
        // Every packet but the first (which creates the message) extends it in order; in
        // runs, every packet but the first run.
        let packets = copied.server_metrics.packets_in;
        match take {
            Take::InPlace => assert_eq!(r.placed as u64, packets - 1),
            Take::AbandonFirst => assert_eq!(r.placed, 0),
            _ => assert!(r.placed as u64 > packets / 2, "{} of {packets} in runs", r.placed),
        }
        assert_eq!(r.server_metrics, copied.server_metrics);
        assert_eq!(r.server_packets, copied.server_packets, "the server answered differently");
    }
}

#[test]
fn only_a_packet_that_extends_its_message_is_placed_and_a_botched_one_is_dropped() {
    let (client, server): (SocketAddr, SocketAddr) =
        (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
    let mut c = Endpoint::new(Config::default()).unwrap();
    let port = c.bind_ephemeral().unwrap();
    let mut s = Endpoint::new(Config::default()).unwrap();
    s.bind(SERVER_PORT).unwrap();
    c.send_request(Instant::ZERO, port, server, SERVER_PORT, pattern(LEN, 7), 0).unwrap();
    let mut buf = vec![0; c.config().max_packet_len()];
    let mut packets = vec![];
    while let Some(t) = c.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
        packets.push(buf[..t.len].to_vec());
    }
    assert!(packets.len() >= 4, "{} unscheduled packets", packets.len());
    let len = |p: &[u8]| p.len() - HEADER_LEN;
    let [first, second, third, ..] = &packets[..] else { unreachable!() };
    let untouched = |_: &mut Vec<u8>| -> bool { panic!("fill called") };

    assert!(!s.place(Instant::ZERO, client, second, len(second), untouched), "no message yet");
    s.handle_packet(Instant::ZERO, client, first).unwrap();
    assert!(!s.place(Instant::ZERO, client, third, len(third), untouched), "not in order");
    assert!(
        !s.place(Instant::ZERO, client, &second[..10], len(second), untouched),
        "header cut short"
    );
    assert!(!s.place(Instant::ZERO, client, second, LEN, untouched), "past the message's end");
    assert!(!s.place(Instant::ZERO, server, second, len(second), untouched), "other peer");

    // Appending other than the payload drops the packet, and what was appended.
    let before = s.metrics();
    let one_short = |b: &mut Vec<u8>| {
        b.extend_from_slice(&second[HEADER_LEN + 1..]);
        true
    };
    assert!(s.place(Instant::ZERO, client, second, len(second), one_short));
    let junk = |b: &mut Vec<u8>| {
        b.extend_from_slice(&[0xEE; 5000]);
        false
    };
    assert!(s.place(Instant::ZERO, client, second, len(second), junk));
    assert_eq!(s.metrics(), before, "nothing was received");

    // Nothing was lost: the rest by copy completes the message.
    for p in packets.iter().skip(1) {
        s.handle_packet(Instant::ZERO, client, p).unwrap();
    }
    let mut now = 0;
    let message = loop {
        if let Some(Event::RequestReceived { message, .. }) = s.poll_event() {
            break message;
        }
        now += 100_000;
        assert!(now < 100 * MS, "the request never arrived");
        while let Some(t) = s.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            c.handle_packet(Instant::from_nanos(now), server, &buf[..t.len]).unwrap();
        }
        while let Some(t) = c.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            s.handle_packet(Instant::from_nanos(now), client, &buf[..t.len]).unwrap();
        }
    };
    assert!(message == pattern(LEN, 7));
}
