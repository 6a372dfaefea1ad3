//! The pacer's estimate of the NIC queue, packet by packet.

use homa_core::Instant;
use std::net::SocketAddr;

use homa_core::wire::{self, PacketType};
use homa_core::{Config, Endpoint};

mod common;
use common::request_data;

/// The times at which an endpoint that starts a 100,000-byte request at time 0 sends its
/// first three DATA packets, after first receiving one DATA packet of a long request (which
/// it answers with a GRANT) or not.
fn data_times(receiving: bool, config: &Config) -> (Vec<u64>, Vec<PacketType>) {
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(99).unwrap();
    let peer: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    if receiving {
        let data = request_data(1_000_000, 10_000, 0, config.max_payload() as usize);
        ep.handle_packet(Instant::ZERO, peer, &data).unwrap();
    }
    ep.send_request(Instant::ZERO, 99, "198.18.0.3:4000".parse().unwrap(), 99, vec![1; 100_000], 0)
        .unwrap();
    let (mut buf, mut now) = (vec![0; config.max_packet_len()], 0);
    let (mut times, mut sent) = (Vec::new(), Vec::new());
    while times.len() < 3 {
        while let Some(t) = ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            let kind = wire::Repr::parse(&buf[..t.len]).unwrap().packet_type();
            if kind == PacketType::Data {
                times.push(now);
            }
            sent.push(kind);
        }
        now = ep.poll_timeout().expect("data left to send").as_nanos();
    }
    (times, sent)
}

/// The module's qdisc counts every Homa packet in its estimate of when the link goes idle
/// (homa_qdisc.c), so a host that receives and sends at once does not queue its GRANTs in
/// the NIC on top of a full pacer budget of data.
#[test]
fn a_grant_takes_its_wire_time_from_the_data_behind_it() {
    let config = Config {
        link_mbps: 1_000,
        max_nic_est_backlog_usecs: 0,
        pacer_batch_packets: 0,
        grant_fifo_fraction: 0, // one GRANT, not also a FIFO one
        ..Config::default()
    };
    let (quiet, sent) = data_times(false, &config);
    assert_eq!(sent[0], PacketType::Data);
    let (busy, sent) = data_times(true, &config);
    assert_eq!(sent[..2], [PacketType::Grant, PacketType::Data], "control goes first");
    // Nanoseconds on a 1 Gbit/s link for a Homa packet of `len` bytes.
    let wire_ns = |len: usize| u64::from(config.wire_bytes(len)) * 8;
    let grant_ns = wire_ns(wire::grant::HEADER_LEN);
    let data_ns = wire_ns(wire::data::HEADER_LEN + config.max_payload() as usize);
    assert_eq!(quiet, [0, data_ns, 2 * data_ns], "one full packet's wire time apart");
    assert!(busy.iter().zip(&quiet).all(|(b, q)| *b == q + grant_ns), "{busy:?} {quiet:?}");
}

/// A user-space driver pays a wake-up for every pacer slot, so the pacer hands out data a
/// batch at a time: each time a throttled sender is due, a batch goes, and the link is
/// still busy with the previous one.
#[test]
fn a_throttled_sender_is_due_once_a_batch() {
    let config = Config { link_mbps: 1_000, ..Config::default() };
    let batch = config.pacer_batch_packets as usize;
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(99).unwrap();
    let len = 40_000; // all unscheduled
    ep.send_request(Instant::ZERO, 99, "198.18.0.3:4000".parse().unwrap(), 99, vec![1; len], 0)
        .unwrap();
    let full_ns = u64::from(config.wire_bytes(config.max_packet_len())) * 8;
    let (mut buf, mut now) = (vec![0; config.max_packet_len()], 0);
    let (mut wakes, mut sent, mut link_idle) = (Vec::new(), 0, 0u64);
    while sent < len.div_ceil(config.max_payload() as usize) {
        assert!(link_idle == 0 || link_idle >= now + batch as u64 * full_ns / 2, "link kept busy");
        let mut here = 0;
        while let Some(t) = ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            link_idle = link_idle.max(now) + u64::from(config.wire_bytes(t.len)) * 8;
            here += 1;
        }
        wakes.push(here);
        sent += here;
        now = match ep.poll_timeout() {
            Some(t) => t.as_nanos(),
            None => break,
        };
    }
    assert_eq!(sent, len.div_ceil(config.max_payload() as usize));
    let (last, rest) = wakes.split_last().unwrap();
    assert!(rest.iter().all(|&n| n >= batch), "a batch per wake-up: {wakes:?}");
    assert!(*last > 0, "{wakes:?}");
    assert!(wakes.len() <= sent / batch, "{wakes:?}");
}
