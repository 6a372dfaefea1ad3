//! What one host (an IP address, whatever ports it sends from) makes an endpoint hold: its
//! messages being received, and the responses to its requests until it acknowledges them.
//! Over UDP every port is a peer of its own, so a bound per peer alone would let one machine
//! with many ports take all the memory.

use core::net::SocketAddr;

use hashbrown::HashMap;
use hashbrown::hash_map::Entry;

use crate::addr::{AddrKey, Hasher};

/// Bytes held per host; a host holding none has no entry, so the map is never larger than
/// the RPCs.
#[derive(Debug)]
pub(crate) struct HostBytes {
    by_host: HashMap<AddrKey, u64, Hasher>,
}

impl HostBytes {
    pub(crate) fn new(hasher: Hasher) -> HostBytes {
        HostBytes { by_host: HashMap::with_hasher(hasher) }
    }

    /// Adds `bytes` to the host of `addr` if its total stays within `max`.
    pub(crate) fn reserve(&mut self, addr: SocketAddr, bytes: u64, max: u64) -> bool {
        // One lookup: this runs for every message received.
        match self.by_host.entry(AddrKey::host(addr)) {
            Entry::Occupied(mut e) if *e.get() + bytes <= max => *e.get_mut() += bytes,
            Entry::Vacant(e) if bytes <= max => {
                e.insert(bytes);
            }
            _ => return false,
        }
        true
    }

    /// Adds `bytes` to the host of `addr`, whatever it holds already.
    pub(crate) fn hold(&mut self, addr: SocketAddr, bytes: u64) {
        *self.by_host.entry(AddrKey::host(addr)).or_insert(0) += bytes;
    }

    /// Gives back `bytes` that [`reserve`](Self::reserve) or [`hold`](Self::hold) added
    /// for `addr`.
    pub(crate) fn release(&mut self, addr: SocketAddr, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if let Entry::Occupied(mut e) = self.by_host.entry(AddrKey::host(addr)) {
            *e.get_mut() -= bytes;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_of_one_host_share_its_bound_and_entries_go_when_empty() {
        let mut h = HostBytes::new(Hasher::with_seed(1));
        let port = |p| SocketAddr::from(([198, 18, 0, 3], p));
        assert!(h.reserve(port(1), 600, 1000));
        assert!(!h.reserve(port(2), 600, 1000), "another port of the same host");
        assert!(h.reserve(SocketAddr::from(([198, 18, 0, 4], 2)), 600, 1000), "another host");
        assert!(!h.reserve(port(3), 2000, 1000));
        h.hold(port(3), 400);
        assert!(!h.reserve(port(3), 1, 1000), "what it holds counts");
        h.release(port(3), 400);
        h.release(port(1), 600);
        assert!(h.reserve(port(2), 1000, 1000));
        h.release(port(2), 1000);
        h.release(SocketAddr::from(([198, 18, 0, 4], 2)), 600);
        assert!(h.by_host.is_empty());
    }
}
