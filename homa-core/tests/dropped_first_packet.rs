//! A message whose first DATA packet is dropped must not outlive the peer's silence.

use homa_core::Instant;
use std::net::SocketAddr;

use homa_core::{Config, Endpoint};

mod common;
use common::{request_data, run_timers_until_idle};

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
        ep.handle_packet(Instant::ZERO, from, &request_data(62_530, incoming, offset, payload))
            .unwrap();
        let m = ep.metrics();
        assert_eq!((m.accepted, m.rpcs, m.rx_bytes), (0, 1, 62_530), "case {max_gaps} {incoming}");
        run_timers_until_idle(&mut ep, 0, 20 * config.tick());
        let m = ep.metrics();
        assert_eq!((m.rpcs, m.rx_bytes), (0, 0), "case {max_gaps} {incoming}: {m:?}");
        assert_eq!(m.server_timeouts, 1);
    }
}
