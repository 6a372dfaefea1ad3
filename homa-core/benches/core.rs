//! Speed of the core: codec, per-packet and per-RPC work, bulk transfer, idle timers.
//! Run with `cargo bench -p homa-core --bench core`.

mod pair;

use homa_core::Instant;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use divan::Bencher;
use homa_core::wire::{self, Ack, Body, PacketType, ack, cutoffs, data, grant, header, resend};
use homa_core::{Config, Endpoint, Payload};
use pair::{Pair, SERVER_PORT, keep_freed_memory};

fn main() {
    keep_freed_memory();
    divan::main();
}

/// One packet of each type, as bytes.
fn sample(t: PacketType) -> Vec<u8> {
    let payload = [7u8; 1424];
    let body = match t {
        PacketType::Data => Body::Data {
            repr: data::Repr {
                message_length: 100_000,
                incoming: 40_000,
                ack: Ack { client_id: 8, server_port: 99 },
                cutoff_version: 1,
                retransmit: 0,
                pad: [0; 3],
                seg_offset: 1424,
            },
            payload: &payload,
        },
        PacketType::Grant => Body::Grant(grant::Repr { offset: 200_000, priority: 3 }),
        PacketType::Resend => Body::Resend(resend::Repr { offset: 0, length: 1424, priority: 7 }),
        PacketType::Cutoffs => Body::Cutoffs(cutoffs::Repr {
            unsched_cutoffs: [0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200],
            cutoff_version: 1,
        }),
        PacketType::Ack => {
            Body::Ack(ack::Repr::new(&[Ack { client_id: 2, server_port: 99 }; 5]).unwrap())
        }
        PacketType::RpcUnknown => Body::RpcUnknown,
        PacketType::Busy => Body::Busy,
        PacketType::Freeze => Body::Freeze,
        PacketType::NeedAck => Body::NeedAck,
    };
    let mut header = header::Repr::new(t, 40_000, SERVER_PORT, 3);
    header.sequence = 1424;
    let repr = wire::Repr { header, body };
    let mut buf = vec![0; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

const TYPES: [PacketType; 6] = [
    PacketType::Data,
    PacketType::Grant,
    PacketType::Resend,
    PacketType::Cutoffs,
    PacketType::Ack,
    PacketType::Busy,
];

#[divan::bench(args = TYPES)]
fn decode(bencher: Bencher<'_, '_>, t: PacketType) {
    let bytes = sample(t);
    bencher.bench(|| wire::Repr::parse(black_box(&bytes)).unwrap().buffer_len());
}

#[divan::bench(args = TYPES)]
fn emit(bencher: Bencher<'_, '_>, t: PacketType) {
    let bytes = sample(t);
    let repr = wire::Repr::parse(&bytes).unwrap();
    let mut out = vec![0; bytes.len()];
    bencher.bench_local(|| black_box(&repr).emit(black_box(&mut out)).unwrap());
}

/// A receiver taking DATA packets of a long message and emitting the GRANT they cause:
/// draining after each packet, or after a GRO batch of 45 (64 KB), as homa-io does.
/// Divan's item rate is per packet.
#[divan::bench(args = [1, 45])]
fn data_in_grant_out(bencher: Bencher<'_, '_>, per_drain: usize) {
    let from: SocketAddr = "198.18.0.1:4000".parse().unwrap();
    let mut server = Endpoint::new(Config { max_rx_bytes: 1 << 34, ..Config::default() }).unwrap();
    server.bind(SERVER_PORT).unwrap();
    let mut buf = vec![0u8; 1500];
    let mut packet = sample(PacketType::Data);
    packet[36..46].fill(0); // no piggy-backed ack
    let mut id = 2u64;
    let mut offset = 0u32;
    // Messages of 1,000,000 bytes: 702 packets each; a new message (id) when one is done.
    bencher.counter(divan::counter::ItemsCount::new(per_drain)).bench_local(|| {
        for _ in 0..per_drain {
            if offset >= 1_000_000 {
                offset = 0;
                id += 2;
            }
            packet[20..28].copy_from_slice(&id.to_be_bytes());
            packet[28..32].copy_from_slice(&1_000_000u32.to_be_bytes());
            packet[4..8].copy_from_slice(&offset.to_be_bytes());
            packet[52..56].copy_from_slice(&offset.to_be_bytes());
            let len = (1_000_000 - offset).min(1424) as usize;
            offset += len as u32;
            server.handle_packet(Instant::ZERO, from, &packet[..56 + len]).unwrap();
        }
        let mut grants = 0;
        while let Some(t) = server.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
            grants += usize::from(buf[11] == PacketType::Grant.code());
            black_box(t);
        }
        debug_assert!(grants > 0 || offset <= 40_000 || offset > 800_000);
        while let Some(e) = server.poll_event() {
            black_box(e);
        }
    });
}

/// A whole single-packet echo RPC: both endpoints' work, request and response.
#[divan::bench(args = [100, 1000])]
fn rpc_single_packet(bencher: Bencher<'_, '_>, len: usize) {
    let mut pair = Pair::new(Config::default());
    let message = vec![1u8; len];
    bencher.bench_local(|| pair.rpc(black_box(message.clone()), 1000));
}

/// A 1,000,000-byte request (sent from a shared buffer, as bindings do, so the benchmark
/// copies nothing itself) answered with 1 byte: one megabyte through two endpoints.
#[divan::bench(sample_count = 50)]
fn one_megabyte_message(bencher: Bencher<'_, '_>) {
    let mut pair = Pair::new(Config { link_mbps: 1_000_000, ..Config::default() });
    pair.response_len = Some(1);
    let message: Arc<Vec<u8>> = Arc::new(vec![1u8; 1_000_000]);
    bencher
        .counter(divan::counter::BytesCount::new(1_000_000usize))
        .bench_local(|| pair.rpc(Payload::shared(black_box(message.clone())), 1000));
}

/// An endpoint holding 10,000 server RPCs that wait for the application: its deadline query
/// and a timer pass must not scan them.
fn idle_server(rpcs: u64) -> Endpoint {
    let mut server =
        Endpoint::new(Config { max_rpcs_per_peer: 100_000, ..Config::default() }).unwrap();
    server.bind(SERVER_PORT).unwrap();
    let from: SocketAddr = "198.18.0.1:4000".parse().unwrap();
    let mut packet = sample(PacketType::Data);
    packet[36..46].fill(0); // no piggy-backed ack
    packet[28..32].copy_from_slice(&100u32.to_be_bytes());
    packet[52..56].copy_from_slice(&0u32.to_be_bytes());
    packet[4..8].copy_from_slice(&0u32.to_be_bytes());
    let mut buf = vec![0u8; 1500];
    for i in 0..rpcs {
        packet[20..28].copy_from_slice(&(2 + 2 * i).to_be_bytes());
        server.handle_packet(Instant::ZERO, from, &packet[..156]).unwrap();
        while server.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {}
    }
    while server.poll_event().is_some() {}
    assert_eq!(server.rpc_count() as u64, rpcs);
    server
}

#[divan::bench]
fn poll_timeout_10k_idle(bencher: Bencher<'_, '_>) {
    let mut server = idle_server(10_000);
    bencher.bench_local(|| black_box(server.poll_timeout()));
}

#[divan::bench]
fn handle_timeout_10k_idle(bencher: Bencher<'_, '_>) {
    let mut server = idle_server(10_000);
    let mut now = 0;
    bencher.bench_local(|| {
        now += 1_000_000;
        server.handle_timeout(Instant::from_nanos(black_box(now)));
    });
}
