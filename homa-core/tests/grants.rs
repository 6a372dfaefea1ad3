//! The receiver's GRANTs, packet by packet: DATA handed straight to one endpoint.

use homa_core::Instant;
use std::net::SocketAddr;

use homa_core::wire::{self, Body};
use homa_core::{Config, Endpoint};

mod common;
use common::{SERVER_PORT, request_data, request_data_of};

/// Found by the `grant_model` fuzz target (fuzz/regressions/grant_model/
/// redundant-grant-after-full-grant): once a message was granted to its end, every further
/// DATA packet drew another GRANT with the same offset, a wasted packet for each DATA of the
/// message's last window.
#[test]
fn no_grant_repeats_an_offset_once_the_message_is_fully_granted() {
    let config = Config { window: 10_000, grant_fifo_fraction: 0, ..Config::default() };
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let from: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    let (length, mut offset, mut grants) = (30_000, 0, Vec::new());
    while offset < length {
        let len = config.max_payload().min(length - offset);
        ep.handle_packet(Instant::ZERO, from, &request_data(length, 10_000, offset, len as usize))
            .unwrap();
        offset += len;
        while let Some(t) = ep.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
            if let Body::Grant(g) = wire::Repr::parse(&buf[..t.len]).unwrap().body {
                grants.push((offset, g.offset));
            }
        }
    }
    // Each GRANT keeps the window at 10,000 bytes past what arrived, up to the end.
    assert!(
        grants.windows(2).all(|w| w[0].1 < w[1].1),
        "GRANTs (after byte, offset) repeat an offset: {grants:?}"
    );
    assert_eq!(grants.last().map(|g| g.1), Some(length));
    assert!(grants.iter().all(|&(received, granted)| granted == (received + 10_000).min(length)));
    assert_eq!(ep.metrics().requests_received, 1);
}

/// A receiver that handles several DATA packets of a message before draining (homa-io
/// feeds a whole receive batch) sends one GRANT for them, with the offset and level that
/// GRANTs after each packet would have ended at.
#[test]
fn a_batch_of_data_draws_one_grant_per_message() {
    let config = Config { grant_fifo_fraction: 0, ..Config::default() };
    let from: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    let mut grants = |ep: &mut Endpoint| {
        let mut out = Vec::new();
        while let Some(t) = ep.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
            if let Body::Grant(g) = wire::Repr::parse(&buf[..t.len]).unwrap().body {
                out.push((g.offset, g.priority));
            }
        }
        out
    };
    let (mut each, mut batched) =
        (Endpoint::new(config.clone()).unwrap(), Endpoint::new(config.clone()).unwrap());
    each.bind(99).unwrap();
    batched.bind(99).unwrap();
    let payload = config.max_payload();
    let (mut per_packet, length) = (Vec::new(), 1_000_000);
    for i in 0..6 {
        let data = request_data(length, 40_000, i * payload, payload as usize);
        each.handle_packet(Instant::ZERO, from, &data).unwrap();
        per_packet.extend(grants(&mut each));
        batched.handle_packet(Instant::ZERO, from, &data).unwrap();
    }
    assert_eq!(per_packet.len(), 6, "a GRANT per DATA packet when drained each time");
    assert_eq!(grants(&mut batched), [*per_packet.last().unwrap()]);
}

/// DATA of two messages, interleaved and handed in before draining (as homa-io feeds a
/// receive batch), leave the receiver as if it had drained after every packet: the same
/// last GRANT to each sender, the same timer deadline, and when the senders then fall
/// silent, the same RESENDs at the same times.
#[test]
fn a_batch_of_two_messages_ends_as_if_drained_packet_by_packet() {
    let config = Config { grant_fifo_fraction: 0, ..Config::default() };
    let a: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let b: SocketAddr = "198.18.0.3:4000".parse().unwrap();
    let payload = config.max_payload();
    let order = [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1), (a, 3), (a, 4)];
    let mut buf = vec![0; config.max_packet_len()];
    // What an endpoint sends: (time, destination, the packet's body), GRANTs kept only
    // as the last one to each destination.
    let mut drain = |ep: &mut Endpoint, now: u64, out: &mut Vec<(u64, SocketAddr, String)>| {
        while let Some(t) = ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            let body = wire::Repr::parse(&buf[..t.len]).unwrap().body;
            if matches!(body, Body::Grant(_)) {
                out.retain(|(_, to, b)| !(*to == t.to && b.starts_with("Grant")));
            }
            out.push((now, t.to, format!("{body:?}")));
        }
    };
    let mut sent = Vec::new();
    for batched in [false, true] {
        let mut ep = Endpoint::new(config.clone()).unwrap();
        ep.bind(SERVER_PORT).unwrap();
        let mut out = Vec::new();
        for &(from, i) in &order {
            let data = request_data(1_000_000, 40_000, i * payload, payload as usize);
            ep.handle_packet(Instant::ZERO, from, &data).unwrap();
            if !batched {
                drain(&mut ep, 0, &mut out);
            }
        }
        drain(&mut ep, 0, &mut out);
        let deadline = ep.poll_timeout();
        // Silence: the timers ask for what is missing.
        while let Some(t) = ep.poll_timeout().filter(|t| t.as_nanos() < 50_000_000) {
            ep.handle_timeout(t);
            drain(&mut ep, t.as_nanos(), &mut out);
        }
        sent.push((deadline, out, ep.metrics().granted_bytes));
    }
    let (each, batched) = (&sent[0], &sent[1]);
    assert!(each.1.iter().filter(|p| p.2.starts_with("Grant")).count() == 2, "{:?}", each.1);
    assert!(each.1.iter().any(|p| p.2.starts_with("Resend")), "{:?}", each.1);
    assert_eq!(batched, each);
}

/// Grants go to one message per peer at a time (`max_active_per_peer`): a peer's messages
/// share its uplink, so granting two of them only interleaves them. The peer's shorter
/// message takes its turn; another peer's message is granted beside it. A message in its
/// last round trip gives its peer's turn to the next.
#[test]
fn a_peer_is_granted_one_message_at_a_time() {
    let a: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let b: SocketAddr = "198.18.0.3:4000".parse().unwrap();
    let receiver = |max_active_per_peer| {
        let config = Config {
            max_active_per_peer,
            window: 100_000,
            max_incoming: 1 << 30,
            grant_fifo_fraction: 0,
            ..Config::default()
        };
        let mut ep = Endpoint::new(config).unwrap();
        ep.bind(SERVER_PORT).unwrap();
        ep
    };
    // Hands `ep` the DATA packets (sender, RPC id, message length, offset); returns the
    // RPCs (by the client's id) of the GRANTs it sends in answer, in order.
    let feed = |ep: &mut Endpoint, packets: &[(SocketAddr, u64, u32, u32)]| {
        let mut buf = vec![0; 1500];
        let mut ids = Vec::new();
        for &(from, id, length, offset) in packets {
            let data = request_data_of(id, length, 40_000, offset, 1424);
            ep.handle_packet(Instant::ZERO, from, &data).unwrap();
            while let Some(t) = ep.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
                let p = wire::Repr::parse(&buf[..t.len]).unwrap();
                if matches!(p.body, Body::Grant(_)) {
                    ids.push(p.header.sender_id ^ 1); // the server's id is the client's + 1
                }
            }
        }
        ids
    };
    let first = [(a, 100, 1_000_000, 0), (a, 102, 500_000, 0), (b, 104, 1_000_000, 0)];
    let second = first.map(|(from, id, length, _)| (from, id, length, 1424));
    let mut one = receiver(1);
    feed(&mut one, &first);
    assert_eq!(feed(&mut one, &second), [102, 104], "a's longer message waits for its shorter");
    let mut two = receiver(2);
    feed(&mut two, &first);
    assert_eq!(feed(&mut two, &second), [100, 102, 104], "two of a's may be granted to");

    // 102 (42,000 bytes) takes a's turn before 100 is granted anything. Its second packet
    // leaves it less than a round trip's worth to receive (`unsched_bytes`, 40,000), and
    // 100, none of whose packets arrive meanwhile, has its turn at once.
    let mut one = receiver(1);
    assert_eq!(feed(&mut one, &[(a, 102, 42_000, 0), (a, 100, 1_000_000, 0)]), [102]);
    assert_eq!(feed(&mut one, &[(a, 102, 42_000, 1424)]), [100]);
}
