//! Peers' addresses as hash keys, and the hash state of the endpoint's maps.

use core::net::SocketAddr;

/// Hash state for the endpoint's maps: seeded from `Config::seed`, so runs are reproducible
/// and peers cannot predict bucket collisions without the seed.
pub(crate) type Hasher = foldhash::fast::FixedState;

/// A socket address reduced to plain integers: hashes several times faster than
/// `SocketAddr`, whose `Hash` walks its enum and fields. Two `u64`s rather than a `u128`,
/// whose 16-byte alignment would make the key 32 bytes instead of 24 (a server-table entry 64
/// instead of 40, and the peer's first cache line too full). The IPv6 scope tells apart
/// link-local neighbours with one address on different interfaces (it fits the padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AddrKey {
    ip_high: u64,
    ip_low: u64,
    scope: u32,
    port: u16,
}

const _: () = assert!(core::mem::size_of::<AddrKey>() == 24);

impl AddrKey {
    /// The key of `addr`'s host: its address without the port.
    pub(crate) fn host(addr: SocketAddr) -> AddrKey {
        AddrKey { port: 0, ..AddrKey::from(addr) }
    }
}

impl From<SocketAddr> for AddrKey {
    fn from(addr: SocketAddr) -> AddrKey {
        let (ip, scope) = match addr {
            SocketAddr::V4(a) => (a.ip().to_ipv6_mapped().to_bits(), 0),
            SocketAddr::V6(a) => (a.ip().to_bits(), a.scope_id()),
        };
        AddrKey { ip_high: (ip >> 64) as u64, ip_low: ip as u64, scope, port: addr.port() }
    }
}
