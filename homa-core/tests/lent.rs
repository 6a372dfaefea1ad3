//! Delivered messages the application still holds (`Endpoint::set_lent_bytes`) count
//! against `max_rx_bytes`: a message that does not fit waits, its sender hearing that this
//! host is busy, for longer than the timeout, and arrives once the application lets go.

mod common;

use homa_core::Instant;
use std::net::SocketAddr;

use common::{SERVER_PORT, pattern};
use homa_core::{Config, Endpoint, Event};

const CLIENT: &str = "198.18.0.2:40000";
const SERVER: &str = "198.18.0.1:99";

/// A client and a server, wired back to back; time in ticks.
struct Pair {
    c: Endpoint,
    s: Endpoint,
    tick: u64,
    buf: Vec<u8>,
}

impl Pair {
    /// One tick: every packet each side sends reaches the other, timers run.
    fn step(&mut self) -> (Vec<Event>, Vec<Event>) {
        let (client, server): (SocketAddr, SocketAddr) =
            (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
        self.tick += 1;
        let now = Instant::from_nanos(self.tick * self.c.config().tick());
        for _ in 0..100 {
            let mut moved = false;
            while let Some(t) = self.c.poll_transmit(now, &mut self.buf).unwrap() {
                let _ = self.s.handle_packet(now, client, &self.buf[..t.len]);
                moved = true;
            }
            while let Some(t) = self.s.poll_transmit(now, &mut self.buf).unwrap() {
                let _ = self.c.handle_packet(now, server, &self.buf[..t.len]);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        self.c.handle_timeout(now);
        self.s.handle_timeout(now);
        let drain = |ep: &mut Endpoint| std::iter::from_fn(|| ep.poll_event()).collect();
        (drain(&mut self.c), drain(&mut self.s))
    }
}

#[test]
fn a_message_that_does_not_fit_beside_the_lent_ones_waits_and_does_not_fail() {
    let config = Config {
        max_rx_bytes: 100_000,
        max_message_length: 100_000,
        timeout_ticks: 20,
        ..Config::default()
    };
    let mut c = Endpoint::new(config.clone()).unwrap();
    let port = c.bind_ephemeral().unwrap();
    let mut s = Endpoint::new(config.clone()).unwrap();
    s.bind(SERVER_PORT).unwrap();
    let server: SocketAddr = SERVER.parse().unwrap();
    c.send_request(Instant::ZERO, port, server, SERVER_PORT, pattern(60_000, 1), 0).unwrap();
    let buf = vec![0; config.max_packet_len()];
    let mut p = Pair { c, s, tick: 0, buf };

    // The server's application holds 90,000 bytes: the request waits, ten timeouts long.
    p.s.set_lent_bytes(90_000);
    for _ in 0..10 * config.timeout_ticks {
        let (client_events, server_events) = p.step();
        assert_eq!(client_events, [], "the call failed");
        assert_eq!(server_events, [], "the request arrived past the bound");
    }
    assert!(p.s.metrics().drops.rx_memory > 0);
    assert!(p.c.metrics().restarts > 0, "the client never asked again");
    // Let go: it arrives.
    p.s.set_lent_bytes(0);
    let rpc = loop {
        let (client_events, server_events) = p.step();
        assert_eq!(client_events, [], "the call failed");
        if let Some(Event::RequestReceived { rpc, message, .. }) = server_events.into_iter().next()
        {
            assert!(message == pattern(60_000, 1));
            break rpc;
        }
        assert!(p.tick < 20 * u64::from(config.timeout_ticks), "the request never arrived");
    };

    // The same for the response at a client whose application holds its memory.
    p.c.set_lent_bytes(90_000);
    p.s.send_response(Instant::from_nanos(p.tick * config.tick()), rpc, pattern(50_000, 2))
        .unwrap();
    for _ in 0..10 * config.timeout_ticks {
        let (client_events, _) = p.step();
        assert_eq!(client_events, [], "the response arrived past the bound, or the call failed");
    }
    assert!(p.c.metrics().drops.rx_memory > 0);
    p.c.set_lent_bytes(0);
    let start = p.tick;
    loop {
        let (client_events, _) = p.step();
        if let Some(e) = client_events.into_iter().next() {
            assert!(
                matches!(e, Event::ResponseReceived { ref message, .. } if *message == pattern(50_000, 2)),
                "{e:?}"
            );
            break;
        }
        assert!(p.tick < start + 10 * u64::from(config.timeout_ticks), "no response");
    }
}
