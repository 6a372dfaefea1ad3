//! `poll_transmit_run` writes exactly the packets successive `poll_transmit` calls write,
//! in runs of one message's full packets: a client and a server exchange messages of many
//! sizes twice, once drained packet by packet and once in runs, and every packet, and the
//! endpoints' counters at the end, must be the same.

mod common;

use std::net::SocketAddr;

use common::*;
use homa_core::{Config, Endpoint, Event, Instant};

/// A client and a server wired back to back.
struct World {
    client: Endpoint,
    server: Endpoint,
    port: u16,
    /// Room for this many packets per `poll_transmit_run`; 0: `poll_transmit` instead.
    slots: usize,
    /// The length of every run sent (with `slots`).
    runs: Vec<usize>,
}

const CLIENT: &str = "198.18.0.2:4000";
const SERVER: &str = "198.18.0.1:4000";

/// A sent packet: destination, level, bytes.
type Sent = (SocketAddr, u8, Vec<u8>);

impl World {
    fn new(config: &Config, slots: usize) -> World {
        let mut client = Endpoint::new(config.clone()).unwrap();
        let mut server = Endpoint::new(config.clone()).unwrap();
        server.bind(SERVER_PORT).unwrap();
        let port = client.bind_ephemeral().unwrap();
        World { client, server, port, slots, runs: Vec::new() }
    }

    /// Every packet `ep` sends at `now`, in order.
    fn drain(ep: &mut Endpoint, now: u64, slots: usize, runs: &mut Vec<usize>) -> Vec<Sent> {
        let len = ep.config().max_packet_len();
        let mut buf = vec![0; len * slots.max(1)];
        let now = Instant::from_nanos(now);
        let mut out = Vec::new();
        if slots == 0 {
            while let Some(t) = ep.poll_transmit(now, &mut buf).unwrap() {
                out.push((t.to, t.priority, buf[..t.len].to_vec()));
            }
            return out;
        }
        while let Some(run) = ep.poll_transmit_run(now, &mut buf).unwrap() {
            runs.push(run.packets);
            for (slot, end) in buf.chunks(len).zip(run.lens(len)) {
                out.push((run.to, run.priority, slot[..end].to_vec()));
            }
        }
        out
    }

    /// One step at `now`: the client's packets reach the server, which echoes each request,
    /// and the server's reach the client. Returns what was sent, and the responses.
    fn step(&mut self, now: u64) -> (Vec<Sent>, usize) {
        let (client, server) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
        let at = Instant::from_nanos(now);
        for ep in [&mut self.client, &mut self.server] {
            if ep.poll_timeout().is_some_and(|t| t <= at) {
                ep.handle_timeout(at);
            }
        }
        let mut sent = World::drain(&mut self.client, now, self.slots, &mut self.runs);
        for (_, _, p) in &sent {
            let _ = self.server.handle_packet(at, client, p);
        }
        while let Some(event) = self.server.poll_event() {
            if let Event::RequestReceived { rpc, message, .. } = event {
                self.server.send_response(at, rpc, message).unwrap();
            }
        }
        let back = World::drain(&mut self.server, now, self.slots, &mut self.runs);
        for (_, _, p) in &back {
            let _ = self.client.handle_packet(at, server, p);
        }
        let mut responses = 0;
        while let Some(event) = self.client.poll_event() {
            responses += usize::from(matches!(event, Event::ResponseReceived { .. }));
        }
        sent.extend(back);
        (sent, responses)
    }
}

/// Runs the exchange in lockstep with a world drained packet by packet; returns the runs.
fn exchange_in_runs(config: Config, slots: usize) -> Vec<usize> {
    let (mut single, mut runs) = (World::new(&config, 0), World::new(&config, slots));
    let server: SocketAddr = SERVER.parse().unwrap();
    let sizes = [1_000_000, 1, 100_000, 1_416 * 3, 250_000, 1_417, 60_000];
    for (i, &size) in sizes.iter().enumerate() {
        for w in [&mut single, &mut runs] {
            let message = pattern(size, i as u64);
            w.client.send_request(Instant::ZERO, w.port, server, SERVER_PORT, message, 0).unwrap();
        }
    }
    let (mut now, mut responses) = (0, 0);
    while responses < sizes.len() {
        let (a, got) = single.step(now);
        let (b, _) = runs.step(now);
        assert_eq!(
            a.len(),
            b.len(),
            "at {now} ns: {} packets one by one, {} in runs",
            a.len(),
            b.len()
        );
        for (k, (a, b)) in a.iter().zip(&b).enumerate() {
            assert!(a == b, "at {now} ns, packet {k} differs");
        }
        let ends = [(&mut single.client, &mut runs.client), (&mut single.server, &mut runs.server)];
        for (a, b) in ends {
            assert_eq!(a.poll_timeout(), b.poll_timeout(), "at {now} ns: the timers differ");
        }
        responses += got;
        now += 1_000;
        assert!(now < 1_000_000_000, "the exchange did not finish");
    }
    for (a, b) in [(&single.client, &runs.client), (&single.server, &runs.server)] {
        assert_eq!(format!("{:?}", a.metrics()), format!("{:?}", b.metrics()));
    }
    runs.runs
}

#[test]
fn runs_are_the_packets_poll_transmit_writes() {
    // Paced (a 10 Gbit/s link, 1 µs steps), with FIFO picks every 20th packet.
    let config = Config { link_mbps: 10_000, ..Config::default() };
    for slots in [1, 2, 44, 64] {
        let runs = exchange_in_runs(config.clone(), slots);
        let longest = runs.iter().copied().max().unwrap_or(0);
        assert!(longest <= slots, "{slots} slots: a run of {longest}");
        if slots > 1 {
            assert!(longest > 1, "{slots} slots: no run of more than one packet");
        }
    }
    // Unscheduled bytes a whole number of packets, paced, so that the first GRANT comes
    // before they are all sent: a run reaches the last unscheduled packet, which is full,
    // and ends there, for the next goes at the scheduled level.
    let unsched_bytes = Config::default().max_payload() * 20;
    let config = Config { link_mbps: 10_000, unsched_bytes, ..Config::default() };
    exchange_in_runs(config, 44);
    // Unpaced, no FIFO picks: runs fill the room.
    let config = Config { link_mbps: 1_000_000, pacer_fifo_fraction: 0, ..Config::default() };
    let runs = exchange_in_runs(config, 44);
    assert_eq!(runs.iter().copied().max(), Some(44));
}
