//! A sender that sends past its grant, then goes quiet, must not pin grant headroom or its
//! RPC.

use homa_core::Instant;
use std::net::SocketAddr;

use homa_core::wire::{self, Body};
use homa_core::{Config, Endpoint};

mod common;
use common::{request_data, run_timers_until_idle};

/// Found by the `endpoint_packets` fuzz target (fuzz/regressions/endpoint_packets/
/// data-past-grant-phantom-incoming): after a sender sent past its grant, the next GRANT
/// counted all its new bytes as outstanding although some had already arrived. The
/// scheduler's total of granted-but-unreceived bytes kept that phantom for good: it starved
/// other messages of `max_incoming`, and the message, no longer owed data by the books that
/// drive its timer, never timed out.
#[test]
fn data_sent_past_the_grant_is_not_counted_as_outstanding() {
    let config = Config {
        max_incoming: 10_000,
        window: 5_000,
        max_overcommit: 1,
        grant_fifo_fraction: 0,
        timeout_ticks: 10,
        ..Config::default()
    };
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(99).unwrap();
    let from: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    let mut granted = 0;
    let mut grants = |ep: &mut Endpoint, buf: &mut Vec<u8>| {
        while let Some(t) = ep.poll_transmit(Instant::ZERO, buf).unwrap() {
            if let Body::Grant(g) = wire::Repr::parse(&buf[..t.len]).unwrap().body {
                granted = g.offset;
            }
        }
        granted
    };
    ep.handle_packet(Instant::ZERO, from, &request_data(20_000, 2_000, 0, 1_000)).unwrap();
    assert_eq!(grants(&mut ep, &mut buf), 6_000);
    // 16,000 bytes, well past the grant.
    ep.handle_packet(Instant::ZERO, from, &request_data(20_000, 2_000, 1_000, 16_000)).unwrap();
    let granted = grants(&mut ep, &mut buf);
    assert_eq!(granted, 20_000, "received + window, capped at the end");
    assert_eq!(ep.metrics().incoming, u64::from(granted) - 17_000, "only unreceived bytes");
    // The sender goes quiet: the RPC asks for the rest, then times out and frees everything.
    run_timers_until_idle(&mut ep, 0, 20 * config.tick());
    let m = ep.metrics();
    assert_eq!((m.rpcs, m.incoming, m.rx_bytes, m.server_timeouts), (0, 0, 0, 1), "{m:?}");
}
