//! Shortest remaining first: a short message overtakes long ones at the receiver and, with
//! priorities, in the bottleneck queue.

mod common;

use common::*;
use homa_core::Endpoint;
use homa_core::testnet::{App, NodeId};
use homa_core::{Config, Event, Instant};

/// Echo that also notes when each request reached the server.
#[derive(Default)]
struct Timed {
    echo: Echo,
    arrivals: Vec<(u64, usize)>,
}

impl App for Timed {
    fn on_event(&mut self, now: Instant, host: NodeId, ep: &mut Endpoint, event: Event) {
        if let Event::RequestReceived { message, .. } = &event {
            self.arrivals.push((now.as_nanos(), message.len()));
        }
        self.echo.on_event(now, host, ep, event);
    }
}

/// Two clients send 1 MB each to the server; 200 µs later a third sends 1 KB. Returns the
/// 1 KB request's one-way latency and the order requests arrived in.
fn short_behind_long(num_priorities: u8) -> (u64, Vec<usize>) {
    let config = Config { num_priorities, ..Config::default() };
    let Star { mut net, hosts, ports, .. } = star(4, config, 10, 11);
    let mut app = Timed::default();
    for i in 1..=2 {
        call(&mut net, &mut app, hosts[i], ports[i], hosts[0], pattern(1_000_000, i as u64));
    }
    net.run_until(200_000, &mut app);
    let start = net.now();
    call(&mut net, &mut app, hosts[3], ports[3], hosts[0], pattern(1000, 3));
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.echo.responses.len(), 3);
    let (at, _) = app.arrivals.iter().find(|(_, len)| *len == 1000).expect("1 KB request arrived");
    (at - start, app.arrivals.iter().map(|&(_, len)| len).collect())
}

#[test]
fn a_short_message_completes_before_long_ones_in_flight() {
    let (_, order) = short_behind_long(8);
    assert_eq!(order, [1000, 1_000_000, 1_000_000]);
    let (_, order) = short_behind_long(1);
    assert_eq!(order, [1000, 1_000_000, 1_000_000]);
}

#[test]
fn priorities_let_the_short_message_overtake_at_the_bottleneck() {
    let (with_8, _) = short_behind_long(8);
    let (with_1, _) = short_behind_long(1);
    // Unloaded, 1 KB crosses two 10 Gbit/s hops in about 2 x (0.85 + 1) µs.
    println!(
        "1 KB request latency behind two 1 MB messages: 8 priorities {with_8} ns, 1 priority {with_1} ns"
    );
    assert!(with_8 < 10_000, "with 8 priorities the short message waits {with_8} ns");
    assert!(
        with_1 > 2 * with_8,
        "one priority should queue behind the long messages ({with_1} ns vs {with_8} ns)"
    );
}

/// Every packet `ep` sends until it stops, in order (the pacer waited out).
fn drain(ep: &mut Endpoint, now: &mut Instant) -> Vec<Vec<u8>> {
    let (mut out, mut buf) = (Vec::new(), vec![0; 2048]);
    loop {
        while let Some(t) = ep.poll_transmit(*now, &mut buf).unwrap() {
            out.push(buf[..t.len].to_vec());
        }
        match ep.poll_timeout() {
            Some(t) if t.as_nanos() < now.as_nanos() + 100_000 => {
                // A deadline already passed is a timer: run it, or time would stand still.
                *now = t.max(*now);
                ep.handle_timeout(*now);
            }
            _ => return out,
        }
    }
}

#[test]
fn a_waiting_message_that_overtakes_another_is_granted_first() {
    // One message granted at a time. C (310 KB) waits behind B (300 KB) until its other
    // unscheduled bytes arrive and leave it fewer to go: when A ends, C is granted, not B.
    let config = Config { max_overcommit: 1, grant_fifo_fraction: 0, ..Config::default() };
    let mut server = Endpoint::new(config.clone()).unwrap();
    server.bind(99).unwrap();
    let addr = |i: u8| std::net::SocketAddr::from(([198, 18, 0, i], 4000));
    let mut now = Instant::ZERO;
    let (mut clients, mut sent) = (Vec::new(), Vec::new());
    for (i, size) in [(1u8, 41_000), (2, 300_000), (3, 310_000)] {
        let mut ep = Endpoint::new(config.clone()).unwrap();
        let port = ep.bind_ephemeral().unwrap();
        ep.send_request(now, port, addr(0), 99, pattern(size, i.into()), 0).unwrap();
        sent.push(drain(&mut ep, &mut now));
        clients.push(ep);
    }
    let deliver = |server: &mut Endpoint, now: Instant, i: usize, packets: &[Vec<u8>]| {
        for p in packets {
            server.handle_packet(now, addr(i as u8 + 1), p).unwrap();
        }
    };
    // A (the shortest) is granted to; B, then C, wait. B's second packet comes between
    // C's first and the rest, so C moves up the queue it is already in.
    for (i, packets) in sent.iter().enumerate() {
        deliver(&mut server, now, i, &packets[..1]);
    }
    deliver(&mut server, now, 1, &sent[1][1..2]);
    deliver(&mut server, now, 2, &sent[2][1..]);
    deliver(&mut server, now, 0, &sent[0][1..]);
    // A's grant, its last bytes, and then the next grant.
    let (mut buf, mut granted) = (vec![0; 2048], Vec::new());
    for _ in 0..2 {
        while let Some(t) = server.poll_transmit(now, &mut buf).unwrap() {
            let kind = homa_core::wire::Repr::parse(&buf[..t.len]).unwrap().packet_type();
            if kind == homa_core::wire::PacketType::Grant {
                granted.push(t.to);
            }
            if t.to == addr(1) {
                clients[0].handle_packet(now, addr(0), &buf[..t.len]).unwrap();
            }
        }
        let last = drain(&mut clients[0], &mut now);
        deliver(&mut server, now, 0, &last);
    }
    assert_eq!(granted.first(), Some(&addr(1)), "A is granted first: {granted:?}");
    assert_eq!(granted.iter().find(|&&a| a != addr(1)), Some(&addr(3)), "then C: {granted:?}");
}
