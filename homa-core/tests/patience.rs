//! A receiver grows patient with a sender whose RESENDs drew BUSY (the bytes were still
//! queued there, not lost): it waits 5, then 10, 20 ... silent ticks before it asks again,
//! and asks after 5 once more as soon as resent bytes fill a hole (a real loss).

use std::net::SocketAddr;

use homa_core::wire::{Body, PacketType, header};
use homa_core::{Config, Endpoint, Instant};

mod common;
use common::{SERVER_PORT, data_packet, packet};

const LENGTH: u32 = 100_000;

fn data(offset: u32, len: usize, retransmit: bool) -> Vec<u8> {
    data_packet(100, LENGTH, 40_000, offset, len, retransmit)
}

/// Runs the timers tick by tick from `tick`; returns the first tick that sends a RESEND.
fn next_resend(ep: &mut Endpoint, tick: &mut u64, tick_ns: u64) -> u64 {
    let mut buf = vec![0; ep.config().max_packet_len()];
    loop {
        *tick += 1;
        let now = Instant::from_nanos(*tick * tick_ns);
        ep.handle_timeout(now);
        let mut resent = false;
        while let Some(t) = ep.poll_transmit(now, &mut buf).unwrap() {
            let sent = homa_core::wire::Repr::parse(&buf[..t.len]).unwrap();
            resent |= matches!(sent.body, Body::Resend(_));
        }
        if resent {
            return *tick;
        }
        assert!(*tick < 1000, "no RESEND");
    }
}

#[test]
fn busy_answers_make_a_receiver_patient_and_a_found_loss_prompt() {
    let config = Config::default();
    let tick_ns = config.tick();
    let mut ep = Endpoint::new(config).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let from: SocketAddr = "198.18.0.2:40000".parse().unwrap();
    let at = |tick: u64| Instant::from_nanos(tick * tick_ns);
    let busy = packet(header::Repr::new(PacketType::Busy, 40_000, SERVER_PORT, 100), Body::Busy);
    // The first packet and one past a hole arrive; the rest of the unscheduled bytes do not.
    ep.handle_packet(at(0), from, &data(0, 1_000, false)).unwrap();
    ep.handle_packet(at(0), from, &data(2_000, 1_000, false)).unwrap();
    let mut tick = 0;
    let mut waits = vec![];
    for _ in 0..5 {
        let start = tick;
        waits.push(next_resend(&mut ep, &mut tick, tick_ns) - start);
        ep.handle_packet(at(tick), from, &busy).unwrap();
    }
    assert_eq!(waits, [5, 10, 20, 40, 50], "doubling, up to half the timeout");
    // The sender resends the hole's bytes: the RESEND found a loss.
    ep.handle_packet(at(tick), from, &data(1_000, 1_000, true)).unwrap();
    let start = tick;
    assert_eq!(next_resend(&mut ep, &mut tick, tick_ns) - start, 5);
}
