//! 100-byte ping-pong over loopback: Homa (each transport) against plain UDP, in one
//! process — a sanity check, not the benchmark (`homa bench rtt` is).
//!
//! ```text
//! cargo run --release -p homa-io --example pingpong              # compare in-process
//! cargo run --release -p homa-io --example pingpong -- server 127.0.0.1:4000 [udp|ip|uring|uring-ip]
//! cargo run --release -p homa-io --example pingpong -- client 127.0.0.1:4000 [udp|ip|uring|uring-ip] [count]
//! cargo run --release -p homa-io --example pingpong -- throughput [mtu] [link_mbps]  # 1 MB echoes
//! ```

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use homa_io::{Builder, Socket, TransportKind};

const SIZE: usize = 100;
const COUNT: usize = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = |i: usize| args.get(i).map_or(Ok(TransportKind::Udp), |s| s.parse());
    match args.first().map(String::as_str) {
        Some("server") => {
            let server = Socket::builder().transport(kind(2)?).bind(args[1].parse()?)?;
            println!("serving on {} ({})", server.local_addr(), server.transport());
            loop {
                let mut request = server.recv_request()?;
                let message = request.take_message();
                request.reply(message)?;
            }
        }
        Some("client") => {
            let dest: SocketAddr = args[1].parse()?;
            let count = args.get(3).map_or(Ok(COUNT), |s| s.parse())?;
            let client = Socket::builder().transport(kind(2)?).client(local_for(dest.ip()))?;
            let rtts = measure(count, || {
                client.call(dest, vec![7; SIZE], Some(Duration::from_secs(5))).map(drop)
            })?;
            report(&format!("homa/{}", client.transport()), &rtts, None);
        }
        Some("throughput") => {
            let mtu = args.get(1).map_or(Ok(1500), |s| s.parse())?;
            let link_mbps = args.get(2).map_or(Ok(25_000), |s| s.parse())?;
            throughput(mtu, link_mbps)?
        }
        _ => compare()?,
    }
    Ok(())
}

fn local_for(dest: IpAddr) -> IpAddr {
    if dest.is_ipv4() { IpAddr::from([0, 0, 0, 0]) } else { IpAddr::from([0u16; 8]) }
}

/// Round-trip times of `count` calls of `f`, after a warm-up.
fn measure(
    count: usize,
    mut f: impl FnMut() -> homa_io::Result<()>,
) -> homa_io::Result<Vec<Duration>> {
    for _ in 0..count / 10 {
        f()?;
    }
    let mut rtts = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        f()?;
        rtts.push(start.elapsed());
    }
    rtts.sort();
    Ok(rtts)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn report(name: &str, rtts: &[Duration], baseline: Option<Duration>) {
    let p50 = percentile(rtts, 0.5);
    let ratio = baseline.map_or(String::new(), |b| {
        format!("  {:.2}x plain UDP", p50.as_secs_f64() / b.as_secs_f64())
    });
    println!(
        "{name:<24} p50 {:>7.1} us  p99 {:>7.1} us{ratio}",
        p50.as_secs_f64() * 1e6,
        percentile(rtts, 0.99).as_secs_f64() * 1e6
    );
}

fn plain_udp() -> std::io::Result<Vec<Duration>> {
    let server = UdpSocket::bind("127.0.0.1:0")?;
    let addr = server.local_addr()?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = server.recv_from(&mut buf) {
            if server.send_to(&buf[..n], from).is_err() {
                break;
            }
        }
    });
    let client = UdpSocket::bind("127.0.0.1:0")?;
    let mut buf = [0u8; 2048];
    let rtts = measure(COUNT, || {
        client.send_to(&[7; SIZE], addr)?;
        client.recv_from(&mut buf)?;
        Ok(())
    });
    rtts.map_err(std::io::Error::other)
}

fn homa(builder: Builder) -> homa_io::Result<(TransportKind, Vec<Duration>)> {
    let mut port = 20_000 + (std::process::id() % 10_000) as u16;
    let server = loop {
        match builder.clone().bind(SocketAddr::from(([127, 0, 0, 1], port))) {
            Err(homa_io::Error::Api(homa_io::ApiError::PortInUse(_))) => port += 1,
            other => break Arc::new(other?),
        }
    };
    let echo = Arc::clone(&server);
    std::thread::spawn(move || {
        while let Ok(mut request) = echo.recv_request() {
            let message = request.take_message();
            let _ = request.reply(message);
        }
    });
    let client = builder.client(IpAddr::from([127, 0, 0, 1]))?;
    let dest = server.local_addr();
    let rtts = measure(COUNT, || client.call(dest, vec![7; SIZE], None).map(drop))?;
    Ok((client.transport(), rtts))
}

fn compare() -> Result<(), Box<dyn std::error::Error>> {
    let udp = plain_udp()?;
    let base = percentile(&udp, 0.5);
    report("plain UDP", &udp, None);
    let mut kinds = vec![TransportKind::Udp, TransportKind::UringUdp];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        kinds.extend([TransportKind::Ip, TransportKind::UringIp]);
    }
    for kind in kinds {
        let (used, rtts) = homa(Socket::builder().transport(kind))?;
        report(&format!("homa/{used}"), &rtts, Some(base));
        let (used, rtts) =
            homa(Socket::builder().transport(kind).busy_poll(Duration::from_micros(50)))?;
        report(&format!("homa/{used} busy-poll"), &rtts, Some(base));
    }
    let udp = plain_udp()?;
    report("plain UDP (again)", &udp, None);
    Ok(())
}

/// Echoes 1,000,000-byte messages, one at a time and 8 in flight; prints Gbit/s of
/// message bytes (both directions).
fn throughput(mtu: u32, link_mbps: u32) -> homa_io::Result<()> {
    let builder = Socket::builder().mtu(mtu).link_mbps(link_mbps);
    let server = Arc::new(builder.clone().bind(SocketAddr::from(([127, 0, 0, 1], 4999)))?);
    let echo = Arc::clone(&server);
    std::thread::spawn(move || {
        while let Ok(mut request) = echo.recv_request() {
            let message = request.take_message();
            let _ = request.reply(message);
        }
    });
    let client = builder.client(IpAddr::from([127, 0, 0, 1]))?;
    let dest = server.local_addr();
    for in_flight in [1, 8] {
        let start = Instant::now();
        let rounds = 40 / in_flight;
        for _ in 0..rounds {
            let calls: Vec<_> = (0..in_flight)
                .map(|_| client.call_async(dest, vec![7; 1_000_000], None))
                .collect::<homa_io::Result<_>>()?;
            for call in calls {
                call.wait()?;
            }
        }
        let bits = (rounds * in_flight * 2_000_000 * 8) as f64;
        let gbps = bits / start.elapsed().as_secs_f64() / 1e9;
        println!("mtu {mtu}, link {link_mbps} Mbit/s, {in_flight} in flight: {gbps:.2} Gbit/s");
    }
    println!("{:?}", client.metrics().transport);
    Ok(())
}
