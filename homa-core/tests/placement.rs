//! Receive-in-place (`Endpoint::placement` / `handle_placed`): a DATA packet whose payload
//! the caller appends straight to its message has exactly the effect of `handle_packet`;
//! and a placement the caller abandons or misuses loses nothing.

mod common;

use std::net::SocketAddr;

use common::*;
use homa_core::wire::data::HEADER_LEN;
use homa_core::{ApiError, Config, Endpoint, Event, Metrics};

const CLIENT: &str = "198.18.0.2:40000";
const SERVER: &str = "198.18.0.1:99";
const LEN: usize = 300_000;

/// How the server takes each DATA packet from the client.
#[derive(Clone, Copy, PartialEq)]
enum Take {
    Copy,
    InPlace,
    /// Place, append more junk than the payload, give up, and take the packet with
    /// `handle_packet`.
    AbandonFirst,
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
    c.send_request(0, port, server, SERVER_PORT, pattern(LEN, 5), 0).unwrap();
    let mut buf = vec![0; c.config().max_packet_len()];
    let (mut placed, mut server_packets) = (0, vec![]);
    for now in (0..100 * MS).step_by(1_000) {
        while let Some(t) = c.poll_transmit(now, &mut buf) {
            let packet = &buf[..t.len];
            let payload_len = packet.len().saturating_sub(HEADER_LEN);
            if take == Take::AbandonFirst
                && let Some(buf) = s.placement(client, packet, payload_len)
            {
                buf.extend_from_slice(&vec![0xEE; payload_len + 100]);
            }
            let placement = match take {
                Take::InPlace => s.placement(client, packet, payload_len),
                _ => None,
            };
            match placement {
                Some(buf) => {
                    buf.extend_from_slice(&packet[HEADER_LEN..]);
                    s.handle_placed(now, client, packet).unwrap(); // the header, and more
                    placed += 1;
                }
                None => s.handle_packet(now, client, packet).unwrap(),
            }
        }
        while let Some(t) = s.poll_transmit(now, &mut buf) {
            server_packets.push(buf[..t.len].to_vec());
            c.handle_packet(now, server, &buf[..t.len]).unwrap();
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
    for take in [Take::InPlace, Take::AbandonFirst] {
        let r = run(take);
        assert!(r.message == copied.message, "the message differs");
        // Every packet but the first (which creates the message) extends it in order.
        let packets = copied.server_metrics.packets_in;
        assert_eq!(r.placed as u64, if take == Take::InPlace { packets - 1 } else { 0 });
        assert_eq!(r.server_metrics, copied.server_metrics);
        assert_eq!(r.server_packets, copied.server_packets, "the server answered differently");
    }
}

#[test]
fn a_placement_is_only_for_the_next_input_and_its_own_header() {
    let (client, server): (SocketAddr, SocketAddr) =
        (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
    let mut c = Endpoint::new(Config::default()).unwrap();
    let port = c.bind_ephemeral().unwrap();
    let mut s = Endpoint::new(Config::default()).unwrap();
    s.bind(SERVER_PORT).unwrap();
    c.send_request(0, port, server, SERVER_PORT, pattern(LEN, 7), 0).unwrap();
    let mut buf = vec![0; c.config().max_packet_len()];
    let mut packets = vec![];
    while let Some(t) = c.poll_transmit(0, &mut buf) {
        packets.push(buf[..t.len].to_vec());
    }
    assert!(packets.len() >= 4, "{} unscheduled packets", packets.len());
    let len = |p: &[u8]| p.len() - HEADER_LEN;
    let [first, second, third, ..] = &packets[..] else { unreachable!() };

    assert_eq!(s.handle_placed(0, client, &second[..HEADER_LEN]), Err(ApiError::NotPlaced));
    assert!(s.placement(client, second, len(second)).is_none(), "no message yet");
    s.handle_packet(0, client, first).unwrap();
    assert!(s.placement(client, third, len(third)).is_none(), "not in order");
    assert!(s.placement(client, &second[..10], len(second)).is_none(), "header cut short");
    assert!(s.placement(client, second, LEN).is_none(), "past the message's end");
    assert!(s.placement(SERVER.parse().unwrap(), second, len(second)).is_none(), "other peer");

    // Another header is refused, and the placement is gone after it.
    assert!(s.placement(client, second, len(second)).is_some());
    assert_eq!(s.handle_placed(0, client, &third[..HEADER_LEN]), Err(ApiError::NotPlaced));
    assert_eq!(s.handle_placed(0, client, &second[..HEADER_LEN]), Err(ApiError::NotPlaced));
    // Appending other than the payload drops the packet, as a duplicate.
    let message = s.placement(client, second, len(second)).unwrap();
    message.extend_from_slice(&second[HEADER_LEN + 1..]);
    let duplicates = s.metrics().drops.duplicate;
    s.handle_placed(0, client, &second[..HEADER_LEN]).unwrap();
    assert_eq!(s.metrics().drops.duplicate, duplicates + 1);

    // Another packet taken meanwhile voids the placement.
    assert!(s.placement(client, second, len(second)).is_some());
    s.handle_packet(0, client, third).unwrap();
    assert_eq!(s.handle_placed(0, client, &second[..HEADER_LEN]), Err(ApiError::NotPlaced));

    // Nothing was lost: the rest by copy completes the message.
    for p in packets.iter().skip(1).filter(|p| p != &third) {
        s.handle_packet(0, client, p).unwrap();
    }
    let mut now = 0;
    let message = loop {
        if let Some(Event::RequestReceived { message, .. }) = s.poll_event() {
            break message;
        }
        now += 100_000;
        assert!(now < 100 * MS, "the request never arrived");
        while let Some(t) = s.poll_transmit(now, &mut buf) {
            c.handle_packet(now, server, &buf[..t.len]).unwrap();
        }
        while let Some(t) = c.poll_transmit(now, &mut buf) {
            s.handle_packet(now, client, &buf[..t.len]).unwrap();
        }
    };
    assert!(message == pattern(LEN, 7));

    // A placement whose RPC ends before it is handled is void.
    c.send_request(now, port, server, SERVER_PORT, pattern(LEN, 8), 0).unwrap();
    let mut packets = vec![];
    while let Some(t) = c.poll_transmit(now, &mut buf) {
        packets.push(buf[..t.len].to_vec());
    }
    s.handle_packet(now, client, &packets[0]).unwrap();
    let next = &packets[1];
    assert!(s.placement(client, next, len(next)).is_some());
    s.unbind(SERVER_PORT).unwrap(); // ends the server's RPCs
    assert_eq!(s.handle_placed(now, client, &next[..HEADER_LEN]), Err(ApiError::NotPlaced));
}
