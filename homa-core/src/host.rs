//! What one host (an IP address, whatever ports it sends from) makes an endpoint hold: its
//! messages being received, and the responses to its requests until it acknowledges them.
//! Over UDP every port is a peer of its own, so a bound per peer alone would let one machine
//! with many ports take all the memory.

use core::net::SocketAddr;

use alloc::vec::Vec;
use hashbrown::HashMap;
use hashbrown::hash_map::Entry;

use crate::addr::{AddrKey, Hasher};

/// Index of a host in [`HostBytes`]; each peer keeps its host's, so counting bytes for a
/// message costs no lookup.
pub(crate) type HostId = u32;

#[derive(Debug, Clone, Copy)]
struct Host {
    bytes: u64,
    /// Peers of this host in the peer table: the entry goes with the last.
    peers: u32,
    key: AddrKey,
}

/// Bytes held per host, for the hosts of the peers known.
#[derive(Debug)]
pub(crate) struct HostBytes {
    slots: Vec<Host>,
    free: Vec<HostId>,
    index: HashMap<AddrKey, HostId, Hasher>,
}

impl HostBytes {
    pub(crate) fn new(hasher: Hasher) -> HostBytes {
        HostBytes { slots: Vec::new(), free: Vec::new(), index: HashMap::with_hasher(hasher) }
    }

    /// The host of a new peer at `addr`, counted as one of its peers.
    pub(crate) fn attach(&mut self, addr: SocketAddr) -> HostId {
        let key = AddrKey::host(addr);
        let entry = match self.index.entry(key) {
            Entry::Occupied(e) => {
                let id = *e.get();
                self.slots[id as usize].peers += 1;
                return id;
            }
            Entry::Vacant(e) => e,
        };
        let host = Host { bytes: 0, peers: 1, key };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = host;
                id
            }
            None => {
                self.slots.push(host);
                (self.slots.len() - 1) as HostId
            }
        };
        *entry.insert(id)
    }

    /// A peer of host `id` is forgotten; the host goes with its last peer. (A peer is
    /// forgotten only without RPCs, so its host's last peer leaves no bytes behind.)
    pub(crate) fn detach(&mut self, id: HostId) {
        let host = &mut self.slots[id as usize];
        host.peers -= 1;
        if host.peers == 0 {
            debug_assert_eq!(host.bytes, 0, "a host's last peer went with bytes held");
            self.index.remove(&host.key);
            self.free.push(id);
        }
    }

    /// Adds `bytes` to host `id` if its total stays within `max`.
    pub(crate) fn reserve(&mut self, id: HostId, bytes: u64, max: u64) -> bool {
        let held = &mut self.slots[id as usize].bytes;
        if *held + bytes > max {
            return false;
        }
        *held += bytes;
        true
    }

    /// Adds `bytes` to host `id`, whatever it holds already.
    pub(crate) fn hold(&mut self, id: HostId, bytes: u64) {
        self.slots[id as usize].bytes += bytes;
    }

    /// Gives back `bytes` that [`reserve`](Self::reserve) or [`hold`](Self::hold) added.
    pub(crate) fn release(&mut self, id: HostId, bytes: u64) {
        self.slots[id as usize].bytes -= bytes;
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_of_one_host_share_its_bound_and_entries_go_with_the_last_peer() {
        let mut h = HostBytes::new(Hasher::with_seed(1));
        let port = |p| SocketAddr::from(([198, 18, 0, 3], p));
        let (a, b) = (h.attach(port(1)), h.attach(port(2)));
        let other = h.attach(SocketAddr::from(([198, 18, 0, 4], 2)));
        assert_eq!(a, b, "two ports, one host");
        assert_ne!(a, other);
        assert!(h.reserve(a, 600, 1000));
        assert!(!h.reserve(b, 600, 1000), "another port of the same host");
        assert!(h.reserve(other, 600, 1000), "another host");
        h.hold(b, 400);
        assert!(!h.reserve(a, 1, 1000), "what it holds counts");
        h.release(b, 400);
        h.release(a, 600);
        assert!(h.reserve(b, 1000, 1000));
        h.release(b, 1000);
        h.release(other, 600);
        h.detach(a);
        assert_eq!(h.len(), 2, "one peer of the host is left");
        h.detach(b);
        h.detach(other);
        assert_eq!(h.len(), 0);
        assert_eq!(h.attach(port(3)), other, "a freed slot is reused");
    }
}
