//! [`Builder`]: the options a [`Socket`] opens with, and the opening itself (transport,
//! endpoint config, Homa port, driver thread).

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use homa_core::config::Problem;
use homa_core::{ApiError, Config, ConfigError, Endpoint, MIN_EPHEMERAL_PORT};

use super::{Socket, claim_raw_port, path, raw_ports, release_raw_port};
use crate::cidr::Cidr;
use crate::driver::{DEFAULT_SPIN, Shared};
use crate::error::{Error, Result};
use crate::transport::{self, TransportKind};

/// Options for opening a [`Socket`]: transport, MTU, link rate, busy polling, allow-list,
/// and any other [`Config`] tunable.
///
/// ```no_run
/// use homa_io::{Socket, TransportKind};
/// let server = Socket::builder()
///     .transport(TransportKind::Udp)
///     .allow(["198.18.0.0/15".parse().unwrap()])
///     .bind("0.0.0.0:4000".parse().unwrap())?;
/// # Ok::<(), homa_io::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Builder {
    kind: TransportKind,
    config: Config,
    mtu: Option<u32>,
    link_mbps: Option<u32>,
    busy_poll: Option<Duration>,
    allow: Vec<Cidr>,
    reuse_port: bool,
}

impl Builder {
    /// The transport (default: UDP).
    pub fn transport(mut self, kind: TransportKind) -> Builder {
        self.kind = kind;
        self
    }

    /// All Homa tunables at once (module sysctl names and defaults). `outer_header_bytes`
    /// is always set from the transport, a `seed` of 0 is replaced by a random one, and a
    /// `first_client_id` of 2 (the default) by a random even one. An `mtu` or `link_mbps`
    /// left at its default is taken from the path, as [`mtu`](Builder::mtu) and
    /// [`link_mbps`](Builder::link_mbps) say; those two, when called, override this config.
    pub fn config(mut self, config: Config) -> Builder {
        self.config = config;
        self
    }

    /// Largest IP packet to send. Use the path MTU: packets go with don't-fragment set (and
    /// IPv4 ID 0 when sent one by one, as the module's). Where the path's MTU is smaller,
    /// the socket, told so by the kernel or by a router's ICMP error, logs a warning naming
    /// the MTU and lets the kernel fragment from then on, which is slower; what was refused
    /// before is sent again.
    ///
    /// By default, the MTU of the interface packets leave by: the one holding the local
    /// address; for an unspecified address the default route's (or the only one up besides
    /// loopback); 65,535 on loopback, whose device takes 64 KB. 1500 where none can be told.
    /// [`Socket::mtu`](super::Socket::mtu) says what was chosen.
    pub fn mtu(mut self, mtu: u32) -> Builder {
        self.mtu = Some(mtu);
        self
    }

    /// Uplink speed in Mbit/s, for the pacer. By default the speed the driver of the
    /// interface holding the local address reports (veth's say 10,000), unpaced on
    /// loopback, and 25,000 (the module's default) where the driver reports none, as
    /// virtio's do, or the socket is bound to an unspecified address.
    pub fn link_mbps(mut self, mbps: u32) -> Builder {
        self.link_mbps = Some(mbps);
        self
    }

    /// How long a thread blocked in `call`, `Call::wait` or `recv_request` polls the
    /// socket before it sleeps (default 50 µs, the module's `poll_usecs`; zero: never).
    /// Spinning saves the sleeping end its wake-up, most of a round trip across CPUs, for
    /// CPU time. It adapts: a spin that ends without a packet, or whose yield ran another
    /// thread on the CPU, makes the next waits sleep at once (1, 2, 4, ... up to 1,024 of
    /// them), and one that finds its packet spins again next time.
    pub fn busy_poll(mut self, spin: Duration) -> Builder {
        self.busy_poll = Some(spin);
        self
    }

    /// Accept packets only from these prefixes; others are dropped and counted in
    /// [`Metrics::dropped_by_allow_list`]. Empty (the default) accepts everyone.
    ///
    /// [`Metrics::dropped_by_allow_list`]: super::Metrics::dropped_by_allow_list
    pub fn allow(mut self, nets: impl IntoIterator<Item = Cidr>) -> Builder {
        self.allow.extend(nets);
        self
    }

    /// Lets several server sockets, in this or other processes of the same user, bind the
    /// same UDP port (SO_REUSEPORT): the kernel hands each client's packets to one of them,
    /// chosen by a hash of the client's address and port, so several worker processes can
    /// serve one Homa port. Whenever a worker exits or joins, the kernel moves many clients
    /// to other workers, not only the departed one's. Their calls in flight still complete:
    /// a server that does not know an RPC makes its client send the request again (Homa's
    /// restart), so such a request may run on two workers; make handlers safe to run twice.
    ///
    /// Such a socket serves only: a response to a call it made could reach another worker,
    /// so [`Socket::call`] and its kin fail with [`Error::SharedPort`]. UDP only. Its
    /// driver thread waits for packets in `poll(2)`, not in a blocking receive woken by a
    /// datagram to itself, which could reach another worker too.
    ///
    /// [`Error::SharedPort`]: crate::Error::SharedPort
    pub fn reuse_port(mut self, reuse: bool) -> Builder {
        self.reuse_port = reuse;
        self
    }

    /// A server socket: accepts requests on Homa port `addr.port()` (1..=32767). With UDP
    /// the UDP socket binds `addr` itself; with raw IP only `addr.ip()` is bound and the
    /// port lives in the Homa header. Can also make calls, unless it shares its port
    /// ([`reuse_port`](Builder::reuse_port)).
    pub fn bind(self, addr: SocketAddr) -> Result<Socket> {
        let port = addr.port();
        if port == 0 || port >= MIN_EPHEMERAL_PORT {
            return Err(ApiError::InvalidPort(port).into());
        }
        self.open(addr, Some(port))
    }

    /// A client socket on local address `local` (e.g. `Ipv4Addr::UNSPECIFIED`), with an
    /// ephemeral Homa port (and UDP port). It can call peers of `local`'s address family.
    pub fn client(self, local: impl Into<IpAddr>) -> Result<Socket> {
        if self.reuse_port {
            return Err(Error::SharedPort("a client socket cannot share its port: bind one"));
        }
        self.open(SocketAddr::new(local.into(), 0), None)
    }

    fn open(self, local: SocketAddr, server: Option<u16>) -> Result<Socket> {
        if self.reuse_port && self.kind.is_ip() {
            let why = "only UDP sockets can share a port (reuse_port); raw IP ones cannot";
            return Err(Error::SharedPort(why));
        }
        if self.kind.is_ip()
            && let Some(port) = server
            && raw_ports().contains(&port)
        {
            return Err(ApiError::PortInUse(port).into());
        }
        let transport = transport::open(self.kind, local, self.reuse_port)?;
        let mut config = self.config;
        config.outer_header_bytes = transport.outer_header_bytes();
        fit_path(&mut config, self.mtu, self.link_mbps, local, transport.max_packet_len());
        fit_grants(&mut config, transport.receive_buffer());
        if config.seed == 0 {
            config.seed = random_seed();
        }
        if config.first_client_id == Config::default().first_client_id {
            // A random even start: a socket that gets an earlier one's address and port
            // (ephemeral ports are reused, NATs map anew) must not meet that one's RPCs at
            // a server, which tells RPCs apart by (address, port, id) and would answer the
            // new call with the old response.
            config.first_client_id = (random_seed() >> 2 << 1).max(2);
        }
        config.validate()?;
        if config.max_packet_len() > transport.max_packet_len() {
            let reason = "larger than one datagram of this transport can carry";
            return Err(ConfigError { field: "mtu", problem: Problem::Rule(reason) }.into());
        }
        let (mtu, link_mbps) = (config.mtu, config.link_mbps);
        let mut endpoint = Endpoint::new(config)?;
        let kind = transport.kind();
        let port = match server {
            Some(port) => {
                endpoint.bind(port)?;
                port
            }
            None => endpoint.bind_ephemeral()?,
        };
        let claim = if kind.is_ip() {
            Some(claim_raw_port(&mut endpoint, port, server.is_some())?)
        } else {
            None
        };
        let port = claim.unwrap_or(port);
        let local = match kind.is_ip() {
            true => SocketAddr::new(transport.local_addr().ip(), port),
            false => transport.local_addr(),
        };
        let spin = self.busy_poll.unwrap_or(DEFAULT_SPIN);
        let (shared, thread) = match Shared::start(endpoint, transport, self.allow, spin) {
            Ok(started) => started,
            Err(e) => {
                release_raw_port(claim);
                return Err(e);
            }
        };
        let raw_port = Mutex::new(claim);
        let thread = Mutex::new(Some(thread));
        let shared_port = self.reuse_port;
        Ok(Socket { shared, thread, local, port, kind, mtu, link_mbps, raw_port, shared_port })
    }
}

/// Granted bytes beyond what the socket can queue (`queue`) are dropped and must be resent:
/// unless `max_incoming` is set, a receiver grants no more ahead than that (an unprivileged
/// socket gets net.core.rmem_max, 208 KB by default; the link rate alone may allow
/// megabytes).
fn fit_grants(config: &mut Config, queue: Option<usize>) {
    if config.max_incoming != 0 {
        return;
    }
    if let Some(queue) = queue {
        let queue = u32::try_from(queue).unwrap_or(u32::MAX).max(config.mtu);
        if queue < config.incoming_cap() {
            config.max_incoming = queue;
        }
    }
}

/// Sets `mtu` and `link_mbps` to the values given (to the builder, or in the config where
/// it differs from the default), the others to those of the interface `local` sends by
/// (see [`Builder::mtu`] and [`Builder::link_mbps`]).
fn fit_path(
    config: &mut Config,
    mtu: Option<u32>,
    link_mbps: Option<u32>,
    local: SocketAddr,
    max_packet_len: usize,
) {
    let default = Config::default();
    let mtu = mtu.or((config.mtu != default.mtu).then_some(config.mtu));
    let link_mbps =
        link_mbps.or((config.link_mbps != default.link_mbps).then_some(config.link_mbps));
    let iface = match (mtu, link_mbps) {
        (Some(_), Some(_)) => None,
        _ => path::interface_for(local.ip()),
    };
    let largest = u32::try_from(max_packet_len).unwrap_or(u32::MAX) + config.outer_header_bytes;
    let path_mtu = iface.as_ref().and_then(|i| i.mtu).map(|m| m.min(largest));
    config.mtu = mtu.or(path_mtu).unwrap_or(default.mtu);
    config.link_mbps =
        link_mbps.or(iface.as_ref().and_then(|i| i.link_mbps)).unwrap_or(default.link_mbps);
    if let Some(i) = iface {
        let (mtu, link_mbps) = (config.mtu, config.link_mbps);
        tracing::debug!(interface = %i.name, mtu, link_mbps, "defaults from the path");
    }
}

/// A seed for the endpoint's hash tables that peers cannot guess (so they cannot aim
/// collisions at them).
fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    // SAFETY: getrandom writes at most the 8 bytes of the live buffer.
    let n = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
    if n != 8 {
        // No entropy source: the clock is better than a constant.
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
    }
    u64::from_ne_bytes(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receivers_grant_no_more_ahead_than_their_socket_queues() {
        // Unpaced (loopback), the link alone would allow 16 MB ahead.
        let fast = Config { link_mbps: 1_000_000, ..Config::default() };
        let fitted = |config: &Config, queue| {
            let mut c = config.clone();
            fit_grants(&mut c, queue);
            c.incoming_cap()
        };
        assert_eq!(fitted(&fast, Some(212_992)), 212_992, "an unprivileged socket's default");
        assert_eq!(fitted(&fast, Some(8 << 20)), 8 << 20, "a privileged socket's 8 MB");
        assert_eq!(fitted(&fast, None), 16_000_000, "nothing known");
        // At 25 Gbit/s the link allows 400,000 bytes, which 8 MB holds.
        assert_eq!(fitted(&Config::default(), Some(8 << 20)), 400_000);
        let set = Config { max_incoming: 1_000_000, ..fast };
        assert_eq!(fitted(&set, Some(100_000)), 1_000_000, "a value given wins");
    }
}
