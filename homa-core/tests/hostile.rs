//! Garbage and mutated packets from peers never panic, stay bounded, and leave the
//! endpoint serving.

mod common;

use homa_core::Instant;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use common::*;
use homa_core::testnet::Rng;
use homa_core::wire::{self, PacketType};
use homa_core::{Config, Endpoint};

/// Packets of a few real exchanges (small and large RPCs), as captured off the network.
fn captured() -> Vec<Vec<u8>> {
    let Star { mut net, hosts, ports, .. } = star(3, Config::default(), 10, 21);
    let seen = Rc::new(RefCell::new(Vec::new()));
    let tap = seen.clone();
    net.tap = Some(Box::new(move |_, _, _, bytes| tap.borrow_mut().push(bytes.to_vec())));
    let mut app = Echo::default();
    for (i, len) in [1, 100, 5000, 60_000].into_iter().enumerate() {
        call(
            &mut net,
            &mut app,
            hosts[1 + i % 2],
            ports[1 + i % 2],
            hosts[0],
            pattern(len, i as u64),
        );
    }
    settle(&mut net, &mut app, 1000);
    net.tap = None;
    Rc::try_unwrap(seen).unwrap().into_inner()
}

/// Flips bits, overwrites fields, truncates, extends, splices.
fn mutate(rng: &mut Rng, packet: &[u8], other: &[u8]) -> Vec<u8> {
    let mut p = packet.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !p.is_empty() => {
                let bit = rng.below(p.len() as u64 * 8);
                p[(bit / 8) as usize] ^= 1 << (bit % 8);
            }
            1 if !p.is_empty() => {
                let at = rng.below(p.len() as u64) as usize;
                p[at] = [0, 0xff, 0x7f, 0x80, 1][rng.below(5) as usize];
            }
            2 => p.truncate(rng.below(p.len() as u64 + 1) as usize),
            3 => p.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8)),
            4 if p.len() >= 28 => {
                // A plausible but wrong id, offset or length.
                let at = [4usize, 20, 28, 32, 52][rng.below(5) as usize];
                if at + 4 <= p.len() {
                    p[at..at + 4].copy_from_slice(&(rng.next_u64() as u32).to_be_bytes());
                }
            }
            _ => {
                let cut = rng.below(p.len().min(other.len()) as u64 + 1) as usize;
                p[..cut].copy_from_slice(&other[..cut]);
            }
        }
    }
    p
}

#[test]
fn garbage_and_mutations_never_break_an_endpoint() {
    let packets = captured();
    assert!(packets.len() > 50, "captured {} packets", packets.len());
    let config = Config {
        max_rx_bytes: 4_000_000,
        max_peers: 64,
        max_rpcs_per_peer: 64,
        ..Config::default()
    };
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    ep.bind_ephemeral().unwrap();
    let mut rng = Rng::new(5);
    let mut buf = vec![0; config.max_packet_len()];
    let mut now = 0;
    for i in 0..200_000u64 {
        let from =
            SocketAddr::from(([198, 18, 1, rng.below(200) as u8], 4000 + rng.below(3) as u16));
        let bytes = if i % 10 == 0 {
            (0..rng.below(200)).map(|_| rng.next_u64() as u8).collect()
        } else {
            let a = &packets[rng.below(packets.len() as u64) as usize];
            let b = &packets[rng.below(packets.len() as u64) as usize];
            mutate(&mut rng, a, b)
        };
        let _ = ep.handle_packet(Instant::from_nanos(now), from, &bytes);
        while let Some(t) = ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            assert!(t.len <= buf.len());
        }
        while let Some(event) = ep.poll_event() {
            if let homa_core::Event::RequestReceived { rpc, message, .. } = event {
                let _ = ep.send_response(Instant::from_nanos(now), rpc, message);
            }
        }
        now += rng.below(200_000);
        if i % 100 == 0 {
            ep.handle_timeout(Instant::from_nanos(now));
        }
        let m = ep.metrics();
        assert!(
            m.rx_bytes <= config.max_rx_bytes,
            "reassembly memory {} over its limit",
            m.rx_bytes
        );
        assert!(m.peers <= u64::from(config.max_peers));
        assert_eq!(
            m.packets_in,
            m.accepted + m.drops.total(),
            "every packet accepted or dropped once"
        );
    }
    // Still a working server: a real client completes an RPC through it.
    let Star { mut net, hosts, ports, .. } = star(2, config, 10, 8);
    net.replace_endpoint(hosts[0], ep);
    let mut app = Echo::default();
    net.run_until(now, &mut app); // the endpoint's clock is already at `now`
    let msg = pattern(100_000, 77);
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], msg.clone());
    settle(&mut net, &mut app, 10_000);
    assert!(app.responses.get(&(hosts[1], id)) == Some(&msg));
}

/// Review finding: extreme values overflowed (a panic in debug builds) instead of failing
/// validation or being used as the largest possible.
#[test]
fn extreme_settings_and_clocks_do_not_overflow() {
    let c = Config { mtu: u32::MAX, outer_header_bytes: u32::MAX - 60, ..Config::default() };
    assert!(c.validate().is_err());
    let c = Config { fifo_grant_increment: u32::MAX, ..Config::default() };
    let mut ep = Endpoint::new(c.clone()).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let from: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    let late = u64::MAX - 1;
    let mut buf = vec![0; c.max_packet_len()];
    // The first grant runs the FIFO check (twice the increment) at the latest time.
    ep.handle_packet(Instant::from_nanos(late), from, &request_data(1_000_000, 10_000, 0, 1_000))
        .unwrap();
    while ep.poll_transmit(Instant::from_nanos(late), &mut buf).unwrap().is_some() {}
    // The pacer's clock near its end too.
    ep.send_request(Instant::from_nanos(late), SERVER_PORT, from, 4000, vec![1u8; 100_000], 0)
        .unwrap();
    while ep.poll_transmit(Instant::from_nanos(late), &mut buf).unwrap().is_some() {}
}

/// Drains what `ep` sends at `now`; returns the types sent to `to`.
fn sent_to(ep: &mut Endpoint, now: u64, to: SocketAddr) -> Vec<PacketType> {
    let mut buf = vec![0; ep.config().max_packet_len()];
    let mut types = Vec::new();
    while let Some(t) = ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
        if t.to == to {
            types.push(wire::Repr::parse(&buf[..t.len]).unwrap().body.packet_type());
        }
    }
    types
}

/// One host announces 1,000,000-byte requests from a thousand ports and sends 1,000 bytes of
/// each, never more. It holds at most `max_bytes_per_host` (the rest hear BUSY), and
/// its silent messages do not hold the grant budget: another host's request is granted to.
/// (Counted per port, the first would have taken all memory; counted as `incoming` until
/// they time out, their unscheduled bytes would have stopped every grant.)
#[test]
fn silent_announcements_from_many_ports_cannot_starve_another_host() {
    let config = Config { max_bytes_per_host: 20_000_000, ..Config::default() };
    let mut ep = Endpoint::new(config).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let attacker = |port: u16| SocketAddr::from(([198, 18, 0, 3], 20_000 + port));
    let mut now = 0;
    for port in 0..1000 {
        let fake = request_data_of(2, 1_000_000, 40_000, 0, 1_000);
        let _ = ep.handle_packet(Instant::from_nanos(now), attacker(port), &fake);
        sent_to(&mut ep, now, attacker(port));
    }
    let m = ep.metrics();
    assert_eq!((m.rpcs, m.rx_bytes, m.drops.host_memory), (20, 20_000_000, 980), "{m:?}");
    // They go silent: asked to resend, they owe nothing that counts.
    for _ in 0..10 {
        now += 1_000_000;
        ep.handle_timeout(Instant::from_nanos(now));
        for port in 0..20 {
            sent_to(&mut ep, now, attacker(port));
        }
    }
    assert_eq!(ep.metrics().incoming, 0);
    // Another host's 100,000-byte request: its unscheduled bytes draw a GRANT.
    let client = SocketAddr::from(([198, 18, 0, 2], 4000));
    let mut types = Vec::new();
    for offset in (0..40_000).step_by(1_000) {
        let data = request_data_of(100, 100_000, 40_000, offset, 1_000);
        ep.handle_packet(Instant::from_nanos(now), client, &data).unwrap();
        types.extend(sent_to(&mut ep, now, client));
    }
    assert!(types.contains(&PacketType::Grant), "sent {types:?}");
}

/// A request whose client goes silent is asked for at intervals that double, not every
/// `resend_interval`: a thousand such requests from one host draw 5 RESENDs each, not 19.
/// Then the server forgets it (a real client would send it again).
#[test]
fn a_silent_request_is_asked_for_at_doubling_intervals() {
    let config = Config::default();
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let attacker = SocketAddr::from(([198, 18, 0, 3], 20_000));
    let fake = request_data_of(2, 1_000_000, 40_000, 0, 1_000);
    ep.handle_packet(Instant::ZERO, attacker, &fake).unwrap();
    sent_to(&mut ep, 0, attacker);
    let mut asked = Vec::new();
    for tick in 1..=u64::from(config.timeout_ticks) + 10 {
        let now = tick * config.tick();
        ep.handle_timeout(Instant::from_nanos(now));
        if sent_to(&mut ep, now, attacker).contains(&PacketType::Resend) {
            asked.push(tick);
        }
    }
    assert_eq!(asked, [5, 10, 20, 40, 80]);
    assert_eq!((ep.metrics().rpcs, ep.metrics().server_timeouts), (0, 1));
}

/// Responses a host never acknowledges count against it: once they fill
/// `max_bytes_per_host`, its new requests hear BUSY, and another host's are served.
#[test]
fn unacknowledged_responses_bound_what_their_host_may_ask() {
    let config = Config { max_bytes_per_host: 100_000, ..Config::default() };
    let mut ep = Endpoint::new(config).unwrap();
    ep.bind(SERVER_PORT).unwrap();
    let request = |ep: &mut Endpoint, from: SocketAddr, id: u64| {
        let data = request_data_of(id, 1_000, 1_000, 0, 1_000);
        let _ = ep.handle_packet(Instant::ZERO, from, &data);
        let busy = sent_to(ep, 0, from).contains(&PacketType::Busy);
        while let Some(event) = ep.poll_event() {
            if let homa_core::Event::RequestReceived { rpc, .. } = event {
                ep.send_response(Instant::ZERO, rpc, vec![1u8; 40_000]).unwrap();
            }
        }
        sent_to(ep, 0, from);
        busy
    };
    let silent = |port: u16| SocketAddr::from(([198, 18, 0, 3], 20_000 + port));
    for port in 0..3 {
        assert!(!request(&mut ep, silent(port), 2), "request {port} is served");
    }
    assert!(request(&mut ep, silent(3), 2), "the fourth would pass 100,000 bytes");
    assert_eq!(ep.metrics().drops.host_memory, 1);
    assert!(!request(&mut ep, SocketAddr::from(([198, 18, 0, 2], 4000)), 2), "another host");
}
