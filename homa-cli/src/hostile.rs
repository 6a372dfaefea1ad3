//! `homa hostile`: peers that misbehave at scale, against a server that must stay bounded
//! and keep serving a well-behaved client. A server, a well-behaved client and an attacker
//! (its own address) in network namespaces on a veth pair; one phase without an attacker,
//! then one per attack; in each, the client's latency and the server's memory.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use homa_core::testnet::Rng;
use homa_core::wire::{self, Ack, Body, PacketType, data, grant, header, resend};
use homa_io::{Config, Socket};
use serde_json::json;

use crate::bench::veth::Veth;
use crate::error::Error;
use crate::netns::{self, Teardown, sh};
use crate::soak::heap_in_use;

/// Attack a server the way broken or hostile peers do, and show that its memory stays
/// bounded and a well-behaved client's latency holds (root: it makes network namespaces).
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sudo homa hostile                                (every attack, 10 s each)
  sudo homa hostile --attacks fake-requests --seconds 30 --json hostile.json

A server, a well-behaved client and an attacker run in this process, in two network namespaces \
joined by a veth pair (MTU 1500, addresses from 198.18.0.0/15; the attacker has its own address \
next to the client's), removed at the end and on SIGINT or SIGTERM. The client makes one call \
at a time, of 100, 10,000 and 100,000 bytes in turn. The first phase has no attacker; then one \
phase per attack:

  fake-requests  1,000 source ports each open requests that claim 1,000,000 bytes and send \
one packet of them, --rate requests a second in all
  stray-control  GRANT and RESEND packets for RPCs the attacker does not own, --rate a second, \
to the server's port (random ids) and to the client's (the ids it uses)
  no-acks        1,000 source ports each send whole 40,000-byte requests, --rate packets a \
second in all, and never acknowledge or read the responses
  malformed      a flood of damaged and random packets from 64 ports, as fast as one thread \
sends them

Each phase reports the client's p50 and p99, the calls that failed (a call fails after 2 s), \
and the server's peak memory: the bytes its endpoint held for messages, and malloc's heap in \
use above the start. A phase passes when no call failed, its p99 is at most --max-slowdown \
times the unloaded one, and the bytes held stayed within what one host may make a socket hold \
(Config::max_bytes_per_host) plus the client's own messages.")]
pub(crate) struct Args {
    /// The attacks, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fake-requests,stray-control,no-acks,malformed"
    )]
    attacks: Vec<Attack>,
    /// Seconds each phase measures the client.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Packets a second of the paced attacks (all but the malformed flood).
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// The largest ratio of an attack's p99 to the unloaded one that passes.
    #[arg(long, default_value_t = 2.0)]
    max_slowdown: f64,
    /// Also write the phases and the verdict as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Attack {
    FakeRequests,
    StrayControl,
    NoAcks,
    Malformed,
}

impl Attack {
    fn name(self) -> &'static str {
        match self {
            Attack::FakeRequests => "fake-requests",
            Attack::StrayControl => "stray-control",
            Attack::NoAcks => "no-acks",
            Attack::Malformed => "malformed",
        }
    }
}

/// The server's Homa port.
const SERVER_PORT: u16 = 4000;
/// The well-behaved client's message sizes, in turn.
const SIZES: [usize; 3] = [100, 10_000, 100_000];
/// The most the server may hold for messages in any phase: what one host may make it hold
/// (`max_bytes_per_host`; the attacker is one host), plus the client's own messages.
fn bound() -> u64 {
    Config::default().max_bytes_per_host + 1_000_000
}
/// A call that takes longer has failed: the attack starved it.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Time an attack runs before the client is measured.
const WARMUP: Duration = Duration::from_secs(1);

/// One phase's figures.
#[derive(Debug)]
struct Phase {
    name: &'static str,
    calls: usize,
    failed: u64,
    p50: Duration,
    p99: Duration,
    /// Peak bytes the server's endpoint held for messages (`rx_bytes + tx_bytes`).
    held: u64,
    /// Peak heap in use of the process, above the unloaded phase's start.
    heap: u64,
    /// Packets the attacker sent.
    sent: u64,
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    if !netns::is_root() {
        return Err(Error::Input("homa hostile makes network namespaces: run it as root".into()));
    }
    if args.seconds <= 0.0 || args.rate == 0 {
        return Err(Error::Input("--seconds and --rate must be positive".into()));
    }
    let teardown = Teardown::default();
    teardown.on_signals("homa hostile");
    let result = hostile(args, &teardown);
    teardown.run();
    result
}

fn hostile(args: &Args, teardown: &Teardown) -> Result<(), Error> {
    let veth = Veth::create(teardown, 1, 1500)?;
    let attacker_ip = IpAddr::V4(Ipv4Addr::new(198, 18, 1, 3));
    sh("ip", &["-n", &veth.client_ns, "addr", "add", &format!("{attacker_ip}/24"), "dev", "eth0"])?;
    let echo = veth.echo(SERVER_PORT)?;
    let (server, client, server_addr) = (&echo.server, &echo.client, echo.server.local_addr());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "homa hostile: {:.0} s per phase, attacks at {} packets/s, MTU 1500 veth",
        args.seconds, args.rate
    );
    let _ = writeln!(
        out,
        "{:<14} {:>8} {:>6} {:>9} {:>9} {:>8} {:>11} {:>9} {:>10}",
        "phase", "calls", "failed", "p50 µs", "p99 µs", "p99/idle", "held MB", "heap MB", "sent"
    );
    let heap_base = heap_in_use();
    let mut phases = Vec::new();
    let client_port = client.local_addr().port();
    for attack in std::iter::once(None).chain(args.attacks.iter().copied().map(Some)) {
        if teardown.stopped() {
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let attacker = match attack {
            None => None,
            Some(attack) => {
                let sockets = veth.at_client(|| {
                    let count = if matches!(attack, Attack::FakeRequests | Attack::NoAcks) {
                        1000
                    } else {
                        64
                    };
                    (0..count)
                        .map(|_| UdpSocket::bind(SocketAddr::new(attacker_ip, 0)))
                        .collect::<std::io::Result<Vec<_>>>()
                        .map_err(Error::io("opening the attacker's sockets"))
                })?;
                let target = Target {
                    server: server_addr,
                    client: SocketAddr::new(veth.client_ip, client_port),
                };
                let (stop, rate) = (Arc::clone(&stop), args.rate);
                Some(std::thread::spawn(move || attack_with(attack, &sockets, target, rate, &stop)))
            }
        };
        if attacker.is_some() {
            std::thread::sleep(WARMUP);
        }
        let mut phase = measure(
            attack.map_or("unloaded", Attack::name),
            client,
            server_addr,
            server,
            Duration::from_secs_f64(args.seconds),
            heap_base,
        );
        stop.store(true, Ordering::Relaxed);
        phase.sent = attacker.map_or(0, |a| a.join().unwrap_or(0));
        let idle = phases.first().map_or(phase.p99, |p: &Phase| p.p99);
        let _ = writeln!(
            out,
            "{:<14} {:>8} {:>6} {:>9.1} {:>9.1} {:>8.2} {:>11.1} {:>9.1} {:>10}",
            phase.name,
            phase.calls,
            phase.failed,
            phase.p50.as_secs_f64() * 1e6,
            phase.p99.as_secs_f64() * 1e6,
            phase.p99.as_secs_f64() / idle.as_secs_f64(),
            phase.held as f64 / 1e6,
            phase.heap as f64 / 1e6,
            phase.sent
        );
        let _ = out.flush();
        phases.push(phase);
        // Let the server forget the attack before the next phase.
        wait_until_idle(server, Duration::from_secs(5));
    }
    let drops = server.metrics().core.drops;
    echo.stop();
    let idle = phases.first().map_or(Duration::ZERO, |p| p.p99);
    let failing: Vec<&Phase> = phases
        .iter()
        .skip(1)
        .filter(|p| {
            p.failed > 0
                || p.p99.as_secs_f64() > args.max_slowdown * idle.as_secs_f64()
                || p.held > bound()
        })
        .collect();
    let verdict = if failing.is_empty() {
        format!(
            "passed: no call failed, every attack's p99 within {}x the unloaded one, the \
             server held at most {:.1} MB",
            args.max_slowdown,
            bound() as f64 / 1e6
        )
    } else {
        let names: Vec<&str> = failing.iter().map(|p| p.name).collect();
        format!("FAILED: {}", names.join(", "))
    };
    let _ = writeln!(out, "{verdict}");
    let dropped: Vec<String> = drops
        .by_reason()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    let _ = writeln!(out, "packets the server dropped: {}", dropped.join(", "));
    if let Some(path) = &args.json {
        let report = json!({
            "seconds": args.seconds,
            "rate": args.rate,
            "bound_bytes": bound(),
            "phases": phases.iter().map(|p| json!({
                "name": p.name, "calls": p.calls, "failed": p.failed,
                "p50_us": p.p50.as_secs_f64() * 1e6, "p99_us": p.p99.as_secs_f64() * 1e6,
                "held_bytes": p.held, "heap_bytes": p.heap, "attacker_packets": p.sent,
            })).collect::<Vec<_>>(),
            "passed": failing.is_empty(),
        });
        crate::bench::write_json(path, &report)?;
    }
    if failing.is_empty() { Ok(()) } else { Err(Error::Failed(verdict)) }
}

/// Calls one at a time for `time`, sampling the server's memory between calls.
fn measure(
    name: &'static str,
    client: &Socket,
    server_addr: SocketAddr,
    server: &Socket,
    time: Duration,
    heap_base: u64,
) -> Phase {
    let payloads: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0x5a; n]).collect();
    let mut latencies = Vec::new();
    let (mut failed, mut held, mut heap) = (0, 0, 0);
    let started = Instant::now();
    let mut next_sample = Duration::ZERO;
    for i in 0.. {
        let elapsed = started.elapsed();
        if elapsed >= time {
            break;
        }
        if elapsed >= next_sample {
            let m = server.metrics().core;
            held = held.max(m.rx_bytes + m.tx_bytes);
            heap = heap.max(heap_in_use().saturating_sub(heap_base));
            next_sample = elapsed + Duration::from_millis(50);
        }
        let payload = &payloads[i % payloads.len()];
        let t = Instant::now();
        match client.call(server_addr, payload.clone(), Some(CALL_TIMEOUT)) {
            Ok(_) => latencies.push(t.elapsed()),
            Err(e) => {
                tracing::warn!("a call failed: {e}");
                failed += 1;
            }
        }
    }
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Phase { name, calls: latencies.len(), failed, p50: at(0.5), p99: at(0.99), held, heap, sent: 0 }
}

/// Waits (up to `limit`) until the server holds no RPCs.
fn wait_until_idle(server: &Socket, limit: Duration) {
    let until = Instant::now() + limit;
    while server.metrics().core.rpcs > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Where the attacker aims.
#[derive(Debug, Clone, Copy)]
struct Target {
    server: SocketAddr,
    client: SocketAddr,
}

/// Runs `attack` from `sockets` until `stop`; returns the packets sent.
fn attack_with(
    attack: Attack,
    sockets: &[UdpSocket],
    target: Target,
    rate: u64,
    stop: &AtomicBool,
) -> u64 {
    let mut rng = Rng::new(7);
    let mut sent = 0u64;
    let started = Instant::now();
    let mut id = 2u64;
    let mut buf = vec![0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        // Paced to `rate` (sleeping while ahead of it); the flood is not.
        if attack != Attack::Malformed {
            let due = started.elapsed().as_secs_f64() * rate as f64;
            if (sent as f64) >= due {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
        }
        // A no-acks request is 29 packets (40,000 bytes, all unscheduled) from one port; the
        // other attacks spread their packets over every port.
        let offset = (sent % 29) as u32 * 1400;
        if attack != Attack::NoAcks || offset == 0 {
            id += 2;
        }
        let pick = if attack == Attack::NoAcks { id / 2 } else { sent };
        let socket = &sockets[pick as usize % sockets.len()];
        let sport = socket.local_addr().map_or(0, |a| a.port());
        let (to, len) = match attack {
            Attack::FakeRequests => {
                (target.server, data_packet(&mut buf, sport, SERVER_PORT, id, 1_000_000, 0, 1000))
            }
            Attack::NoAcks => {
                let n = (40_000 - offset).min(1400) as usize;
                (target.server, data_packet(&mut buf, sport, SERVER_PORT, id, 40_000, offset, n))
            }
            Attack::StrayControl => {
                // Half to the server (ids of the attacker's choosing, as a client's), half to
                // the client (as its server would, for the ids of a client numbering from 2;
                // homa-io starts each client at a random id).
                let (to, dport, sender_id) = if sent.is_multiple_of(2) {
                    (target.server, SERVER_PORT, rng.next_u64() & !1)
                } else {
                    (target.client, target.client.port(), (rng.below(10_000) * 2) | 1)
                };
                let body = if rng.below(2) == 0 {
                    Body::Grant(grant::Repr {
                        offset: rng.below(2_000_000) as u32,
                        priority: rng.below(8) as u8,
                    })
                } else {
                    Body::Resend(resend::Repr {
                        offset: rng.below(1_000_000) as u32,
                        length: rng.below(1_000_000) as u32,
                        priority: rng.below(8) as u8,
                    })
                };
                let kind = body.packet_type();
                let p =
                    wire::Repr { header: header::Repr::new(kind, sport, dport, sender_id), body };
                (to, p.emit(&mut buf).unwrap_or(0))
            }
            Attack::Malformed => (target.server, malformed(&mut rng, &mut buf, sport)),
        };
        let _ = socket.send_to(&buf[..len], to);
        sent += 1;
    }
    sent
}

/// Writes a DATA packet of `payload` bytes at `offset` of a request of `length` bytes.
fn data_packet(
    buf: &mut [u8],
    sport: u16,
    dport: u16,
    id: u64,
    length: u32,
    offset: u32,
    payload: usize,
) -> usize {
    let mut h = header::Repr::new(PacketType::Data, sport, dport, id);
    h.sequence = offset;
    let repr = data::Repr {
        message_length: length,
        incoming: length.min(40_000),
        ack: Ack::NONE,
        cutoff_version: Config::default().cutoff_version,
        retransmit: 0,
        pad: [0; 3],
        seg_offset: offset,
    };
    let fill = [0x3c; 1400];
    let p = wire::Repr { header: h, body: Body::Data { repr, payload: &fill[..payload] } };
    p.emit(buf).unwrap_or(0)
}

/// Writes a damaged or random packet: random bytes, a header cut short, an unknown type, or
/// DATA whose offset lies past its message's end.
fn malformed(rng: &mut Rng, buf: &mut [u8], sport: u16) -> usize {
    let id = rng.next_u64() & !1;
    match rng.below(4) {
        0 => {
            let len = 1 + rng.below(1400) as usize;
            for b in &mut buf[..len] {
                *b = rng.next_u64() as u8;
            }
            len
        }
        1 => {
            // Cut inside the header: what is left is no packet.
            data_packet(buf, sport, SERVER_PORT, id, 50_000, 0, 1000);
            rng.below(data::HEADER_LEN as u64) as usize
        }
        2 => {
            let len = data_packet(buf, sport, SERVER_PORT, id, 50_000, 0, 100);
            header::Packet::new_unchecked(&mut buf[..len]).set_type_code(0x77); // no such type
            len
        }
        _ => {
            let offset = 60_000 + rng.below(1_000_000) as u32;
            let len = data_packet(buf, sport, SERVER_PORT, id, 50_000, 0, 1000);
            let mut p = data::Packet::new_unchecked(&mut buf[..len]);
            p.set_seg_offset(offset); // past the message's end
            p.header_mut().set_sequence(offset);
            len
        }
    }
}
