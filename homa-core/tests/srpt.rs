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
