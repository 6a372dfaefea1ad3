//! A receiver asks for lost bytes at the level they were first sent at, so that a sender
//! that follows the RESEND's level (the Linux module does) does not resend bulk data in the
//! short messages' class.

mod common;

use std::net::SocketAddr;

use common::{SERVER_PORT, request_data};
use homa_core::wire::{self, Body};
use homa_core::{Config, Endpoint, Instant};

#[test]
fn resends_are_asked_for_at_the_level_the_lost_bytes_were_sent_at() {
    let config = Config::default();
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let client: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let (length, unsched, payload) = (200_000, 40_000, 1424);
    let mut buf = vec![0; config.max_packet_len()];
    let mut grant_level = None;
    // All unscheduled packets but the second, then one scheduled packet past a lost one.
    let offsets = (0..29).filter(|&i| i != 1).chain([30]).map(|i| i * payload);
    for offset in offsets {
        let len = payload.min(length - offset) as usize;
        let data = request_data(length, unsched, offset, len);
        ep.handle_packet(Instant::ZERO, client, &data).unwrap();
        while let Some(t) = ep.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
            if let Body::Grant(g) = wire::Repr::parse(&buf[..t.len]).unwrap().body {
                grant_level = Some(g.priority);
            }
        }
    }
    let grant_level = grant_level.expect("the message was granted");
    let later = Instant::from_nanos(u64::from(config.resend_ticks + 1) * config.tick());
    ep.handle_timeout(later);
    let mut asked = Vec::new();
    while let Some(t) = ep.poll_transmit(later, &mut buf).unwrap() {
        if let Body::Resend(rs) = wire::Repr::parse(&buf[..t.len]).unwrap().body {
            asked.push((rs.offset, rs.priority, t.priority));
        }
    }
    // The lost unscheduled packet at the cutoff level of a 200,000-byte message (level 4
    // with the default cutoffs); the lost scheduled one, and the granted rest, at the
    // grant's level. The RESEND itself, a control packet, travels at the top level.
    let expected =
        [(payload, 4, 7), (29 * payload, grant_level, 7), (31 * payload, grant_level, 7)];
    assert_eq!(asked, expected);
}
