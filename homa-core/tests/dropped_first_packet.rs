//! A message whose first DATA packet is dropped must not outlive the peer's silence.

use std::net::SocketAddr;

use homa_core::wire::{self, Ack, Body, PacketType, data, header};
use homa_core::{Config, Endpoint};

/// DATA of a request from client id 100 with `payload` bytes at `offset`.
fn request_data(length: u32, incoming: u32, offset: u32, payload: usize) -> Vec<u8> {
    let mut h = header::Repr::new(PacketType::Data, 40_000, 99, 100);
    h.sequence = offset;
    let repr = data::Repr {
        message_length: length,
        incoming,
        ack: Ack::NONE,
        cutoff_version: Config::default().cutoff_version,
        retransmit: 0,
        pad: [0; 3],
        seg_offset: offset,
    };
    let payload = vec![7; payload];
    let packet = wire::Repr { header: h, body: Body::Data { repr, payload: &payload } };
    let mut bytes = vec![0; packet.buffer_len()];
    packet.emit(&mut bytes).unwrap();
    bytes
}

/// Found by the `endpoint_packets` fuzz target (fuzz/regressions/endpoint_packets/
/// empty-first-data-pins-rpc): a first DATA that created a server RPC and was then dropped
/// (no payload; or past a gap with `max_gaps` 0) left an RPC holding its message memory that
/// no timer watched: it never timed out, so a peer could pin `max_rx_bytes` for good.
#[test]
fn a_server_rpc_whose_first_packet_was_dropped_times_out() {
    // (max_gaps, incoming, offset, payload bytes): an empty packet; an empty packet of a
    // message that needs grants from byte 0; a packet past a gap that may not be tracked.
    for (max_gaps, incoming, offset, payload) in
        [(1024, 62_530, 0, 0), (1024, 0, 0, 0), (0, 62_530, 2848, 1424)]
    {
        let config = Config { max_gaps, timeout_ticks: 10, ..Config::default() };
        let mut ep = Endpoint::new(config.clone()).unwrap();
        ep.bind(99).unwrap();
        let from: SocketAddr = "198.18.0.2:4000".parse().unwrap();
        ep.handle_packet(0, from, &request_data(62_530, incoming, offset, payload)).unwrap();
        let m = ep.metrics();
        assert_eq!((m.accepted, m.rpcs, m.rx_bytes), (0, 1, 62_530), "case {max_gaps} {incoming}");
        let mut buf = vec![0; config.max_packet_len()];
        let mut now = 0;
        while let Some(deadline) = ep.poll_timeout() {
            now = now.max(deadline);
            ep.handle_timeout(now);
            while ep.poll_transmit(now, &mut buf).is_some() {}
            assert!(now <= 20 * config.tick(), "still busy at {now} ns: {:?}", ep.metrics());
        }
        let m = ep.metrics();
        assert_eq!((m.rpcs, m.rx_bytes), (0, 0), "case {max_gaps} {incoming}: {m:?}");
        assert_eq!(m.server_timeouts, 1);
    }
}
