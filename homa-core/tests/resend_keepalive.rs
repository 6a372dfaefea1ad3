//! A server receiving a request times out when the data it asks for never comes, even while
//! the client keeps asking for the response.

mod common;

use homa_core::Instant;
use std::net::SocketAddr;

use common::{SERVER_PORT, packet, request_data};
use homa_core::wire::{self, Body, PacketType, header, resend};
use homa_core::{Config, Endpoint};

/// Found by the `endpoint_pair` fuzz target (fuzz/regressions/endpoint_pair/
/// resend-busy-livelock): a request's first packet arrived with a damaged source port, so the
/// server's GRANTs and RESENDs went to a port the client does not use. The client, having
/// sent what it could, asked for the response with RESENDs; the server answered BUSY. Each
/// side took the other's packets as signs of life (the server counted the client's RESENDs
/// while still receiving), so neither ever timed out and the RPC never ended.
#[test]
fn a_receiving_server_is_not_kept_alive_by_the_clients_resends() {
    let ask = header::Repr::new(PacketType::Resend, 40_000, SERVER_PORT, 100);
    let all = resend::Repr { offset: 0, length: resend::ALL_SENT, priority: 7 };
    // The client, waiting for its response, asks every tick; nothing else arrives.
    let (ticks, _) = ticks_to_time_out(200_000, &packet(ask, Body::Resend(all)));
    assert!(ticks >= 10, "timed out after {ticks} ticks, before timeout_ticks");
}

/// A server with timeout_ticks 10 receiving the first 1,424 bytes of a `length`-byte request,
/// then `each_tick` every tick: the ticks until its RPC timed out, and its metrics.
fn ticks_to_time_out(length: u32, each_tick: &[u8]) -> (u64, homa_core::Metrics) {
    let config = Config { timeout_ticks: 10, ..Config::default() };
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let client: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    ep.handle_packet(Instant::ZERO, client, &request_data(length, 40_000, 0, 1424)).unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    let tick = config.tick();
    for t in 0..50 {
        let now = t * tick + tick / 2;
        ep.handle_packet(Instant::from_nanos(now), client, each_tick).unwrap();
        ep.handle_timeout(Instant::from_nanos(now));
        while ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap().is_some() {}
        if ep.rpc_count() == 0 {
            assert_eq!(ep.metrics().server_timeouts, 1);
            return (t, ep.metrics());
        }
    }
    panic!("the server RPC never timed out: {:?}", ep.metrics());
}

/// Found by the `endpoint_pair` fuzz target (fuzz/regressions/endpoint_pair/
/// busy-for-bytes-past-the-end): a request's DATA arrived with a damaged message length, so
/// the server asked for bytes past the message's real end. The client answered BUSY (nothing
/// of the range sent yet), which kept the server waiting for ever. A RESEND for bytes past
/// the end gets no answer now, so the asker times out.
#[test]
fn a_resend_past_the_end_of_the_message_draws_no_busy() {
    let config = Config::default();
    let mut ep = Endpoint::new(config.clone()).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let server: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let id = ep.send_request(Instant::ZERO, port, server, SERVER_PORT, vec![1, 2, 3], 0).unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    while ep.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {}
    // resend_ticks later: a RESEND sooner would have crossed the DATA, and draw BUSY.
    let later = Instant::from_nanos(5 * config.tick());
    let sent = |ep: &mut Endpoint, buf: &mut Vec<u8>| {
        let mut types = Vec::new();
        while let Some(t) = ep.poll_transmit(later, buf).unwrap() {
            types.push(wire::Repr::parse(&buf[..t.len]).unwrap().packet_type());
        }
        types
    };
    let h = header::Repr::new(PacketType::Resend, SERVER_PORT, port, wire::local_id(id));
    for (offset, length, answer) in [
        (3, 1280, vec![]),                // past the end: nothing
        (1000, resend::ALL_SENT, vec![]), // past the end: nothing
        (0, 2, vec![PacketType::Data]),   // sent bytes: sent again
    ] {
        let rs = resend::Repr { offset, length, priority: 7 };
        ep.handle_packet(later, server, &packet(h, Body::Resend(rs))).unwrap();
        assert_eq!(sent(&mut ep, &mut buf), answer, "RESEND({offset}, {length})");
    }
}

/// Found by the `endpoint_pair` fuzz target (fuzz/regressions/endpoint_pair/
/// inconsistent-data-keeps-a-request-alive): a request's first packet arrived with a damaged
/// message length. The server asked for the rest with RESENDs; the client answered with
/// DATA of the true length, which the server dropped as inconsistent but counted as signs of
/// life, so its RPC never timed out and the two exchanged packets forever.
#[test]
fn a_receiving_server_is_not_kept_alive_by_data_of_another_length() {
    // The client's DATA, of the length it really sends: dropped, every tick.
    let (_, m) = ticks_to_time_out(300_000, &request_data(200_000, 40_000, 1424, 1424));
    assert!(m.drops.inconsistent >= 10);
}
