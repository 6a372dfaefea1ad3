//! A client RPC ends only with an event (or `abort`): an ACK naming it does not end it.

use homa_core::Instant;
use std::net::SocketAddr;

use homa_core::wire::{self, Body, PacketType, ack, header};
use homa_core::{Config, Endpoint, Event, FailReason};

mod common;
use common::{packet, run_timers_until_idle};

/// Found by the `endpoint_packets` fuzz target (fuzz/regressions/endpoint_packets/
/// ack-ends-client-rpc): an ACK whose header named one of our client RPCs (ACKs go from
/// clients to servers, so no peer sends that) freed it with no event, from any address,
/// and the application waited for an answer that could never come.
#[test]
fn an_ack_naming_a_client_rpc_does_not_end_it_silently() {
    let config = Config { timeout_ticks: 10, ..Config::default() };
    let mut ep = Endpoint::new(config.clone()).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let server: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let stranger: SocketAddr = "198.18.0.9:4000".parse().unwrap();
    let id = ep.send_request(Instant::ZERO, port, server, 99, vec![1; 100], 5).unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    while ep.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {}
    for from in [stranger, server] {
        let h = header::Repr::new(PacketType::Ack, 99, port, wire::local_id(id));
        let body = Body::Ack(ack::Repr::new(&[]).unwrap());
        ep.handle_packet(Instant::from_nanos(1000), from, &packet(h, body)).unwrap();
        assert_eq!(ep.rpc_count(), 1, "the ACK from {from} ended the call");
    }
    // The call still ends the way calls end: here, with a timeout event.
    let events = run_timers_until_idle(&mut ep, 1000, 20 * config.tick());
    assert_eq!(events, [Event::RpcFailed { id, cookie: 5, reason: FailReason::Timeout }]);
    assert_eq!(ep.rpc_count(), 0);
}
