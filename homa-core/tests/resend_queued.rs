//! A receiver whose downlink runs full with data at or above the level of the bytes it
//! awaits does not ask for them: at a strict-priority bottleneck they may only be queued.
//! It asks once the downlink had room (or delivered lower-level data), and within half the
//! timeout however busy the downlink stays.

mod common;

use std::net::SocketAddr;

use common::{SERVER_PORT, packet};
use homa_core::wire::{self, Ack, Body, PacketType, data, header};
use homa_core::{Config, Endpoint, Instant};

const PAYLOAD: u32 = 1424;

fn config() -> Config {
    // 1 Gbit/s: 125,000 bytes a tick; four 30,000-byte requests fill one. SRPT grants only
    // (a FIFO grant goes at level 6), so granted bytes travel at a scheduled level, below
    // the unscheduled levels.
    Config { link_mbps: 1000, grant_fifo_fraction: 0, ..Config::default() }
}

/// The DATA packets of a request of `length` bytes, all unscheduled, but for `skip`.
fn request(id: u64, length: u32, skip: Option<u32>) -> Vec<Vec<u8>> {
    let unsched = length.min(40_000);
    (0..unsched.div_ceil(PAYLOAD))
        .map(|i| i * PAYLOAD)
        .filter(|&offset| Some(offset) != skip)
        .map(|offset| {
            let mut h = header::Repr::new(PacketType::Data, 40_000, SERVER_PORT, id);
            h.sequence = offset;
            let repr = data::Repr {
                message_length: length,
                incoming: unsched,
                ack: Ack::NONE,
                cutoff_version: Config::default().cutoff_version,
                retransmit: 0,
                pad: [0; 3],
                seg_offset: offset,
            };
            let len = PAYLOAD.min(length - offset) as usize;
            packet(h, Body::Data { repr, payload: &vec![7; len] })
        })
        .collect()
}

/// Delivers `awaited` from one client at tick 0, then, from another, `busy_ticks` ticks of
/// 30,000-byte requests (sent at level 4 under the default cutoffs) filling the downlink.
/// Returns the ticks at which the server asked the first client for bytes.
fn resend_ticks(awaited: Vec<Vec<u8>>, busy_ticks: u64, until: u64) -> Vec<u64> {
    let config = config();
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let waiting: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let busy: SocketAddr = "198.18.0.3:4000".parse().unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    let mut asked = vec![];
    let mut next_id = 2;
    for tick in 0..until {
        let now = Instant::from_nanos(tick * config.tick());
        ep.handle_timeout(now);
        if tick == 0 {
            for p in &awaited {
                ep.handle_packet(now, waiting, p).unwrap();
            }
        } else if tick <= busy_ticks {
            for _ in 0..4 {
                for p in request(next_id, 30_000, None) {
                    ep.handle_packet(now, busy, &p).unwrap();
                }
                next_id += 2;
            }
        }
        while let Some(t) = ep.poll_transmit(now, &mut buf).unwrap() {
            let body = wire::Repr::parse(&buf[..t.len]).unwrap().body;
            if matches!(body, Body::Resend(_)) && t.to == waiting && asked.last() != Some(&tick) {
                asked.push(tick);
            }
        }
    }
    assert_eq!(ep.poll_event().is_some(), busy_ticks > 0, "the busy client's requests arrived");
    asked
}

#[test]
fn granted_bytes_behind_a_full_downlink_are_not_asked_for_until_it_has_room() {
    // 200,000 bytes: the first 40,000 arrive, the grant for more goes out, then nothing.
    let big = request(40_000, 200_000, None);
    // With an idle downlink: resend_ticks (5) after the silence began, then after 5, 10 ...
    // (a server's intervals double).
    assert_eq!(resend_ticks(big.clone(), 0, 41), [5, 10, 20, 40]);
    // Busy for ticks 1 to 20: the RESENDs wait for five ticks with room (0 and 21 to 24).
    assert_eq!(resend_ticks(big, 20, 31), [25, 30]);
}

#[test]
fn a_full_downlink_defers_a_resend_by_at_most_half_the_timeout() {
    let big = request(40_000, 200_000, None);
    let half = u64::from(config().timeout_ticks / 2);
    let resend = u64::from(config().resend_ticks);
    assert_eq!(resend_ticks(big, 90, 90)[0], half + resend);
}

#[test]
fn a_full_downlink_of_lower_level_data_does_not_defer_a_resend() {
    // 10,000 bytes go at level 5, above the busy client's level 4: a strict-priority queue
    // sends them first, so a missing packet was lost.
    let short = request(40_000, 10_000, Some(PAYLOAD));
    assert_eq!(resend_ticks(short, 20, 11), [5, 10]);
}
