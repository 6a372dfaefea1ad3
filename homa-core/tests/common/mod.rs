//! Shared helpers for the engine's tests: a star network of endpoints and an echo server.
#![allow(dead_code)]

use homa_core::Instant;
use std::collections::HashMap;

use homa_core::testnet::{self, App, LinkId, Network, NodeId};
use homa_core::wire::{self, Ack, Body, PacketType, data, header};
use homa_core::{Config, Endpoint, Event, FailReason};

pub(crate) const SERVER_PORT: u16 = 99;
pub(crate) const GBPS: u64 = 1_000_000_000;
pub(crate) const MS: u64 = 1_000_000;

/// Answers every request with its own bytes, and records what clients receive.
#[derive(Debug, Default)]
pub(crate) struct Echo {
    /// Responses by (client host, id).
    pub(crate) responses: HashMap<(NodeId, u64), Vec<u8>>,
    pub(crate) failures: Vec<(NodeId, u64, FailReason)>,
    pub(crate) requests_served: u64,
    /// Events seen after their RPC already completed (must stay empty).
    pub(crate) duplicates: u64,
}

impl App for Echo {
    fn on_event(&mut self, now: Instant, host: NodeId, ep: &mut Endpoint, event: Event) {
        match event {
            Event::RequestReceived { rpc, message, .. } => {
                self.requests_served += 1;
                ep.send_response(now, rpc, message).expect("respond");
            }
            Event::ResponseReceived { id, message, .. } => {
                if self.responses.insert((host, id), message).is_some() {
                    self.duplicates += 1;
                }
            }
            Event::RpcFailed { id, reason, .. } => self.failures.push((host, id, reason)),
        }
    }
}

/// A message whose bytes depend on its seed, so mixed-up payloads are caught.
pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed * 7 + 1) as u8).collect()
}

/// A star network: hosts around one switch.
pub(crate) struct Star {
    pub(crate) net: Network,
    pub(crate) hosts: Vec<NodeId>,
    /// Host 0's server port, then each client's ephemeral port.
    pub(crate) ports: Vec<u16>,
    /// Per host: (uplink to the switch, downlink from it).
    pub(crate) links: Vec<(LinkId, LinkId)>,
}

/// `n` endpoints on a star at `gbps`, 1 µs per hop; host 0 binds SERVER_PORT, the others
/// take an ephemeral port each.
pub(crate) fn star(n: usize, config: Config, gbps: u64, seed: u64) -> Star {
    let mut ports = vec![];
    let endpoints = (0..n)
        .map(|i| {
            let mut ep =
                Endpoint::new(Config { link_mbps: (gbps * 1000) as u32, ..config.clone() })
                    .unwrap();
            if i == 0 {
                ep.bind(SERVER_PORT).unwrap();
                ports.push(SERVER_PORT);
            } else {
                ports.push(ep.bind_ephemeral().unwrap());
            }
            ep
        })
        .collect();
    let (mut net, hosts, links) = testnet::star(seed, endpoints, gbps * GBPS, 1_000);
    for &(up, down) in &links {
        net.link_mut(up).overhead = 62;
        net.link_mut(down).overhead = 62;
    }
    Star { net, hosts, ports, links }
}

/// Starts an RPC from `client` to host 0's server port.
pub(crate) fn call(
    net: &mut Network,
    app: &mut impl App,
    client: NodeId,
    port: u16,
    server: NodeId,
    message: Vec<u8>,
) -> u64 {
    let dest = net.addr(server);
    net.with_endpoint(client, app, |now, ep| {
        ep.send_request(now, port, dest, SERVER_PORT, message, 0).unwrap()
    })
}

/// Runs until idle (asserting it gets there by `limit_ms` of virtual time).
pub(crate) fn settle(net: &mut Network, app: &mut impl App, limit_ms: u64) {
    let limit = net.now() + limit_ms * MS;
    assert!(net.run_until_idle(limit, app), "network still busy after {limit_ms} ms");
}

/// DATA of a request from client id 100 to port 99: bytes [offset, offset + len) of a
/// `length`-byte message with `incoming` unscheduled bytes, for handing straight to an
/// endpoint.
pub(crate) fn request_data(length: u32, incoming: u32, offset: u32, len: usize) -> Vec<u8> {
    request_data_of(100, length, incoming, offset, len)
}

/// `request_data` for the client's RPC `id`.
pub(crate) fn request_data_of(
    id: u64,
    length: u32,
    incoming: u32,
    offset: u32,
    len: usize,
) -> Vec<u8> {
    data_packet(id, length, incoming, offset, len, false)
}

/// `request_data_of`, marked as a retransmission when `retransmit`.
pub(crate) fn data_packet(
    id: u64,
    length: u32,
    incoming: u32,
    offset: u32,
    len: usize,
    retransmit: bool,
) -> Vec<u8> {
    let mut h = header::Repr::new(PacketType::Data, 40_000, SERVER_PORT, id);
    h.sequence = offset;
    let repr = data::Repr {
        message_length: length,
        incoming,
        ack: Ack::NONE,
        cutoff_version: Config::default().cutoff_version,
        retransmit: u8::from(retransmit),
        pad: [0; 3],
        seg_offset: offset,
    };
    packet(h, Body::Data { repr, payload: &vec![7; len] })
}

/// The bytes of a packet with header `h` and `body`.
pub(crate) fn packet(h: header::Repr, body: Body<'_>) -> Vec<u8> {
    let p = wire::Repr { header: h, body };
    let mut bytes = vec![0; p.buffer_len()];
    p.emit(&mut bytes).unwrap();
    bytes
}

/// Runs `ep`'s timers (dropping what they send) until it has no deadline left, starting at
/// `now`; panics if work is still due after `limit`. Returns the events it produced.
pub(crate) fn run_timers_until_idle(ep: &mut Endpoint, mut now: u64, limit: u64) -> Vec<Event> {
    let mut buf = vec![0; ep.config().max_packet_len()];
    let mut events = vec![];
    while let Some(deadline) = ep.poll_timeout() {
        now = now.max(deadline.as_nanos());
        ep.handle_timeout(Instant::from_nanos(now));
        while ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap().is_some() {}
        events.extend(std::iter::from_fn(|| ep.poll_event()));
        assert!(now <= limit, "still busy at {now} ns: {:?}", ep.metrics());
    }
    events
}
