//! The receiver's GRANTs, packet by packet: DATA handed straight to one endpoint.

use std::net::SocketAddr;

use homa_core::wire::{self, Body};
use homa_core::{Config, Endpoint};

mod common;
use common::request_data;

/// Found by the `grant_model` fuzz target (fuzz/regressions/grant_model/
/// redundant-grant-after-full-grant): once a message was granted to its end, every further
/// DATA packet drew another GRANT with the same offset, a wasted packet for each DATA of the
/// message's last window.
#[test]
fn no_grant_repeats_an_offset_once_the_message_is_fully_granted() {
    let config = Config { window: 10_000, grant_fifo_fraction: 0, ..Config::default() };
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(99).unwrap();
    let from: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    let (length, mut offset, mut grants) = (30_000, 0, Vec::new());
    while offset < length {
        let len = config.max_payload().min(length - offset);
        ep.handle_packet(0, from, &request_data(length, 10_000, offset, len as usize)).unwrap();
        offset += len;
        while let Some(t) = ep.poll_transmit(0, &mut buf) {
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
