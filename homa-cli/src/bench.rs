//! `homa bench`: Homa against plain UDP and TCP over loopback, servers and clients in this
//! one process, interleaved so that the machine's noise hits every contender alike.
//!
//! - [`rtt`]: 100-byte ping-pong latency.
//! - [`throughput`]: 1,000,000-byte messages, one and several in flight.
//!
//! The shared pieces live here: Homa server/client pairs, a TCP server speaking a small
//! framing (`[u32 length][u32 response length][bytes]`, answered by `[u32 length][bytes]`),
//! and a plain UDP echo server.

use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use homa_io::{Builder, Socket, TransportKind};
use serde_json::Value;

use crate::error::Error;
use crate::server::net_error;

mod rtt;
mod throughput;
mod uring;
pub(crate) mod veth;

/// Benchmark Homa against plain UDP and TCP over loopback (no setup needed).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, clap::Subcommand)]
enum Which {
    Rtt(rtt::Args),
    Throughput(throughput::Args),
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    match &args.which {
        Which::Rtt(a) => rtt::run(a),
        Which::Throughput(a) => throughput::run(a),
    }
}

/// The pacer's link speed on loopback, Mbit/s: 1 Tbit/s, so that it never holds packets
/// back (the default 25 Gbit/s would cap loopback throughput below what the CPU can do).
pub(crate) const LOOPBACK_MBPS: u32 = 1_000_000;

/// Loopback addresses for a Homa pair. Raw IP sockets see every Homa packet for their
/// address, so the raw IP server and client each get their own (127.0.0.0/8 is all
/// loopback); `n` tells pairs apart.
fn pair_ips(kind: TransportKind, n: u8) -> (IpAddr, IpAddr) {
    if kind.is_ip() {
        (IpAddr::V4(Ipv4Addr::new(127, 146, n, 1)), IpAddr::V4(Ipv4Addr::new(127, 146, n, 2)))
    } else {
        (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(Ipv4Addr::LOCALHOST))
    }
}

/// A Homa server (with its answering thread) and a client, in this process.
#[derive(Debug)]
struct HomaPair {
    server: Arc<Socket>,
    client: Socket,
    thread: Option<JoinHandle<()>>,
}

impl HomaPair {
    /// A pair whose server answers with `response_len` bytes, or echoes (`None`), as
    /// `server::serve` does.
    fn open(
        builder: &Builder,
        kind: TransportKind,
        n: u8,
        response_len: Option<usize>,
    ) -> homa_io::Result<HomaPair> {
        let builder = builder.clone().transport(kind);
        let (server_ip, client_ip) = pair_ips(kind, n);
        let server = crate::server::bind(&builder, server_ip, 0)?;
        let client = builder.client(client_ip)?;
        HomaPair::serve(server, client, response_len)
    }

    /// A pair across `veth`: the server at its server end, the client at the other.
    fn open_across(
        builder: &Builder,
        kind: TransportKind,
        veth: &veth::Veth,
        response_len: Option<usize>,
    ) -> Result<HomaPair, Error> {
        let builder = builder.clone().transport(kind);
        let server = veth.at_server(|| {
            crate::server::bind(&builder, veth.server_ip, 0)
                .map_err(net_error("opening the server socket"))
        })?;
        let client = veth.at_client(|| {
            builder.client(veth.client_ip).map_err(net_error("opening a client socket"))
        })?;
        HomaPair::serve(server, client, response_len)
            .map_err(net_error("starting the server thread"))
    }

    /// Starts the server's answering thread.
    fn serve(
        server: Socket,
        client: Socket,
        response_len: Option<usize>,
    ) -> homa_io::Result<HomaPair> {
        let server = Arc::new(server);
        let s = Arc::clone(&server);
        let thread =
            std::thread::Builder::new().name("bench-homa-server".into()).spawn(move || {
                crate::server::serve(&s, &Default::default(), response_len);
            })?;
        Ok(HomaPair { server, client, thread: Some(thread) })
    }

    /// The transport actually in use (after any io_uring fallback).
    fn used(&self) -> TransportKind {
        self.client.transport()
    }

    fn dest(&self) -> SocketAddr {
        self.server.local_addr()
    }
}

impl Drop for HomaPair {
    fn drop(&mut self) {
        self.client.shutdown();
        self.server.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A UDP echo server thread (plain sockets, or a ring: `uring::start_echo`); a zero-length
/// datagram stops it.
#[derive(Debug)]
struct UdpEcho {
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl UdpEcho {
    fn start() -> io::Result<UdpEcho> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        let addr = socket.local_addr()?;
        let thread =
            std::thread::Builder::new().name("bench-udp-server".into()).spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while let Ok((n, from)) = socket.recv_from(&mut buf) {
                    if n == 0 || socket.send_to(&buf[..n], from).is_err() {
                        break;
                    }
                }
            })?;
        Ok(UdpEcho { addr, thread: Some(thread) })
    }
}

impl Drop for UdpEcho {
    fn drop(&mut self) {
        if let Ok(s) = UdpSocket::bind("127.0.0.1:0") {
            let _ = s.send_to(&[], self.addr);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP server for the framing above: a thread per connection, until the client closes it.
#[derive(Debug)]
struct TcpServer {
    addr: SocketAddr,
}

impl TcpServer {
    /// Listens on loopback; accepts `connections` connections (then stops accepting).
    fn start(connections: usize) -> io::Result<TcpServer> {
        TcpServer::start_at(IpAddr::V4(Ipv4Addr::LOCALHOST), connections)
    }

    /// Listens on `ip` (in the calling thread's namespace).
    fn start_at(ip: IpAddr, connections: usize) -> io::Result<TcpServer> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
        let addr = listener.local_addr()?;
        std::thread::Builder::new().name("bench-tcp-accept".into()).spawn(move || {
            for _ in 0..connections {
                let Ok((stream, _)) = listener.accept() else { return };
                let spawned =
                    std::thread::Builder::new().name("bench-tcp-server".into()).spawn(move || {
                        let _ = tcp_serve(stream);
                    });
                if spawned.is_err() {
                    return;
                }
            }
        })?;
        Ok(TcpServer { addr })
    }

    fn connect(&self) -> io::Result<TcpConn> {
        TcpConn::new(TcpStream::connect(self.addr)?)
    }
}

/// Reads `[u32 len][u32 response len][bytes]` requests and answers each; ends at EOF.
fn tcp_serve(stream: TcpStream) -> io::Result<()> {
    let mut conn = TcpConn::new(stream)?;
    let mut buf = Vec::new();
    let mut answer = Vec::new();
    loop {
        let mut header = [0u8; 8];
        if let Err(e) = conn.read_exact(&mut header) {
            return if e.kind() == io::ErrorKind::UnexpectedEof { Ok(()) } else { Err(e) };
        }
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let response = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        buf.resize(len, 0);
        conn.read_exact(&mut buf)?;
        if response == u32::MAX {
            conn.send(&buf, None)?;
        } else {
            answer.resize(response as usize, 0x5a);
            conn.send(&answer, None)?;
        }
    }
}

/// One TCP connection (TCP_NODELAY), buffered for reading.
#[derive(Debug)]
struct TcpConn {
    stream: TcpStream,
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
}

impl TcpConn {
    fn new(stream: TcpStream) -> io::Result<TcpConn> {
        stream.set_nodelay(true)?;
        Ok(TcpConn { stream, rbuf: vec![0; 64 * 1024], rpos: 0, rend: 0 })
    }

    /// Writes `[u32 len]` (and `[u32 response]` for a request) and `bytes` with one
    /// `writev` where the kernel takes it all (as one segment when small).
    fn send(&mut self, bytes: &[u8], response: Option<u32>) -> io::Result<()> {
        let mut header = [0u8; 8];
        header[..4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        let hlen = match response {
            Some(r) => {
                header[4..].copy_from_slice(&r.to_le_bytes());
                8
            }
            None => 4,
        };
        let mut slices = [IoSlice::new(&header[..hlen]), IoSlice::new(bytes)];
        let mut slices: &mut [IoSlice<'_>] = &mut slices;
        while !slices.is_empty() {
            match self.stream.write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads a `[u32 len][bytes]` response into `buf`.
    fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        let mut header = [0u8; 4];
        self.read_exact(&mut header)?;
        buf.resize(u32::from_le_bytes(header) as usize, 0);
        self.read_exact(buf)
    }
}

impl Read for TcpConn {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.rpos == self.rend {
            if out.len() >= self.rbuf.len() {
                return self.stream.read(out); // large reads skip the buffer
            }
            self.rend = self.stream.read(&mut self.rbuf)?;
            self.rpos = 0;
        }
        let n = out.len().min(self.rend - self.rpos);
        out[..n].copy_from_slice(&self.rbuf[self.rpos..self.rpos + n]);
        self.rpos += n;
        Ok(n)
    }
}

/// Writes `json` pretty-printed to `path`.
pub(crate) fn write_json(path: &Path, json: &Value) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(json).expect("serializable") + "\n";
    std::fs::write(path, text).map_err(Error::io(format!("writing {}", path.display())))
}
