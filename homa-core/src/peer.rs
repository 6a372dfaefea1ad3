//! What an endpoint remembers about each host it talks to: the unscheduled cutoffs that host
//! asked for, acks waiting to be sent to it, and counters used by the grant scheduler.

use core::hash::BuildHasher;
use core::net::SocketAddr;

use alloc::vec::Vec;

use crate::time::{MaybeTick, Nanos};
use crate::wire::{Ack, MAX_ACKS, MAX_MESSAGE_LENGTH, MAX_PRIORITIES};
use hashbrown::HashTable;

use crate::addr::{AddrKey, Hasher};
use crate::host::{HostBytes, HostId};

/// Index of a peer in the [`PeerTable`].
pub(crate) type PeerId = u32;

/// A lookup by address reads the first cache line (the address and the counters it
/// updates); a DATA packet's level, the second (the cutoffs). The acks follow; they are read
/// only when some wait. With many peers (a simulation holds 143 per host) the table is seldom
/// cached, and each line costs a miss.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Peer {
    /// The peer's address, as the index compares it.
    key: AddrKey,
    /// Last time the peer was used, to choose whom to forget when the table is full.
    pub(crate) last_used: Nanos,
    /// RPCs (client and server) using this peer; it can be forgotten when 0.
    pub(crate) rpcs: u32,
    /// Server RPCs this peer opened on us (bounded by `max_rpcs_per_peer`).
    pub(crate) server_rpcs: u32,
    /// Version of `cutoffs`, echoed in DATA to the peer (0 until a CUTOFFS arrives).
    pub(crate) cutoff_version: u16,
    /// Incoming messages from this peer in the grant scheduler's active set.
    pub(crate) active_grants: u8,
    num_acks: u8,
    /// Tick (its low 32 bits: 49 days of ticks) of the last packet from the peer about one
    /// of our RPCs: it is there. Fits the line's padding.
    pub(crate) heard: u32,
    /// Incoming messages from this peer waiting for the grant scheduler's active set: with
    /// one, a message is its peer's best without a search of the queue.
    pub(crate) waiting_grants: u32,
    /// Tick in which we last sent the peer our CUTOFFS (rate limit: one per tick).
    pub(crate) cutoffs_sent_tick: MaybeTick,
    /// Cutoffs the peer sent in CUTOFFS: entry i = largest message to send it at level i.
    pub(crate) cutoffs: [u32; MAX_PRIORITIES as usize],
    /// How patient a receiver is with this sender: its first RESEND for granted bytes waits
    /// `resend_ticks << patience` silent ticks. Each BUSY answer (the bytes were still
    /// queued at the sender, not lost) adds one, up to `MAX_PATIENCE`; resent bytes that
    /// fill a hole (a loss after all) set it back to 0.
    pub(crate) patience: u8,
    /// The peer's host in `PeerTable::hosts`.
    pub(crate) host: HostId,
    /// Client RPCs finished but not yet acknowledged to this (server) peer.
    acks: [Ack; MAX_ACKS],
}

/// At most `resend_ticks << MAX_PATIENCE` (80 ticks by default, and never more than half the
/// timeout) before a receiver asks a sender that has kept answering BUSY.
pub(crate) const MAX_PATIENCE: u8 = 4;

const _: () = {
    assert!(core::mem::offset_of!(Peer, cutoffs) == 64, "the lookup's fields fit one line");
    assert!(core::mem::offset_of!(Peer, patience) < 128, "patience shares the cutoffs' line");
};

impl Peer {
    fn new(key: AddrKey, host: HostId, now: Nanos) -> Peer {
        // Until the peer sends CUTOFFS, all unscheduled data goes one level below control
        // packets, as the module does (`homa_peer_alloc`).
        let mut cutoffs = [0; MAX_PRIORITIES as usize];
        cutoffs[MAX_PRIORITIES as usize - 2] = i32::MAX as u32;
        cutoffs[0] = i32::MAX as u32;
        Peer {
            key,
            cutoffs,
            cutoff_version: 0,
            cutoffs_sent_tick: MaybeTick::NONE,
            acks: [Ack::NONE; MAX_ACKS],
            num_acks: 0,
            rpcs: 0,
            server_rpcs: 0,
            active_grants: 0,
            waiting_grants: 0,
            last_used: now,
            heard: 0,
            patience: 0,
            host,
        }
    }

    /// Level for unscheduled bytes of a `length`-byte message to this peer: the highest
    /// level below `num_priorities` whose cutoff admits it (`homa_unsched_priority`).
    pub(crate) fn unsched_priority(&self, length: u32, num_priorities: u8) -> u8 {
        (0..num_priorities).rev().find(|&i| self.cutoffs[usize::from(i)] >= length).unwrap_or(0)
    }

    /// Stores new cutoffs from a CUTOFFS packet. Entry 0, and any entry of 1,000,000 or more
    /// (the module's largest message), mean "anything": stored as `i32::MAX`, they also admit
    /// the longer messages of endpoints that raised `max_message_length`.
    pub(crate) fn set_cutoffs(&mut self, cutoffs: [u32; MAX_PRIORITIES as usize], version: u16) {
        self.cutoffs = cutoffs.map(|c| if c >= MAX_MESSAGE_LENGTH { i32::MAX as u32 } else { c });
        self.cutoffs[0] = i32::MAX as u32;
        self.cutoff_version = version;
    }

    /// Records an ack for a finished client RPC. When five are already waiting, returns them
    /// so the caller can send them in an ACK packet (together with this one's RPC).
    pub(crate) fn add_ack(&mut self, ack: Ack) -> Option<[Ack; MAX_ACKS]> {
        if usize::from(self.num_acks) < MAX_ACKS {
            self.acks[usize::from(self.num_acks)] = ack;
            self.num_acks += 1;
            return None;
        }
        self.num_acks = 0;
        Some(self.acks)
    }

    /// Takes up to `max` waiting acks (most recent first, as the module does).
    pub(crate) fn take_acks(&mut self, max: usize, out: &mut [Ack; MAX_ACKS]) -> usize {
        let held = usize::from(self.num_acks);
        let n = max.min(held);
        let start = held - n;
        out[..n].copy_from_slice(&self.acks[start..held]);
        self.num_acks = start as u8;
        n
    }
}

/// All known peers, by address, with a bound on how many.
#[derive(Debug)]
pub(crate) struct PeerTable {
    /// Peers by id; a forgotten peer's slot keeps its stale value until reused (only ids in
    /// `index` or held by RPCs are read, so no per-slot liveness check is needed).
    slots: Vec<Peer>,
    free: Vec<PeerId>,
    /// Ids by their peer's address. The addresses stay in the slots: an entry of four bytes
    /// keeps the index of a host's peers in a few cache lines, and the slot a lookup
    /// compares is the one it goes on to use.
    index: HashTable<PeerId>,
    hasher: Hasher,
    max: usize,
    /// What each known peer's host makes the endpoint hold (`max_bytes_per_host`).
    pub(crate) hosts: HostBytes,
}

impl PeerTable {
    pub(crate) fn new(max: u32, hasher: Hasher) -> PeerTable {
        PeerTable {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hosts: HostBytes::new(hasher.clone()),
            hasher,
            max: max as usize,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn find(&self, addr: SocketAddr) -> Option<PeerId> {
        self.lookup(AddrKey::from(addr))
    }

    fn lookup(&self, key: AddrKey) -> Option<PeerId> {
        let slots = &self.slots;
        self.index.find(self.hasher.hash_one(key), |&id| slots[id as usize].key == key).copied()
    }

    /// The peer for `addr`, created if needed. When the table is full, an idle peer (no RPCs;
    /// see `evict_idle`) is forgotten to make room; if none is idle, `None`.
    pub(crate) fn get_or_insert(&mut self, addr: SocketAddr, now: Nanos) -> Option<PeerId> {
        let key = AddrKey::from(addr);
        if let Some(id) = self.lookup(key) {
            self.slots[id as usize].last_used = now;
            return Some(id);
        }
        if self.index.len() >= self.max {
            self.evict_idle()?;
        }
        let peer = Peer::new(key, self.hosts.attach(addr), now);
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = peer;
                id
            }
            None => {
                self.slots.push(peer);
                (self.slots.len() - 1) as PeerId
            }
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index
            .insert_unique(hasher.hash_one(key), id, |&i| hasher.hash_one(slots[i as usize].key));
        Some(id)
    }

    /// Forgets the least recently used idle peer (no RPCs), one without acks waiting if
    /// there is one. O(peers), only when the table is full. Acks waiting for a peer we may
    /// never send to again must not pin it (the table would fill up for good); losing them
    /// costs little: a server asks with NEED_ACK, and our answer for an RPC we no longer
    /// know acknowledges it, or the server times it out.
    fn evict_idle(&mut self) -> Option<()> {
        let (id, key) = self
            .index
            .iter()
            .map(|&id| (id, &self.slots[id as usize]))
            .filter(|(_, p)| p.rpcs == 0)
            .min_by_key(|&(id, p)| (p.num_acks > 0, p.last_used, id))
            .map(|(id, p)| (id, p.key))?;
        let entry = self.index.find_entry(self.hasher.hash_one(key), |&i| i == id);
        entry.ok()?.remove();
        self.hosts.detach(self.slots[id as usize].host);
        self.free.push(id);
        Some(())
    }

    pub(crate) fn get(&self, id: PeerId) -> &Peer {
        self.debug_check(id);
        &self.slots[id as usize]
    }

    pub(crate) fn get_mut(&mut self, id: PeerId) -> &mut Peer {
        self.debug_check(id);
        &mut self.slots[id as usize]
    }

    /// Peer ids held by RPCs stay valid because a peer with RPCs is never forgotten. Debug
    /// builds (and the fuzzers) check the id against the index: that catches an id whose
    /// peer was forgotten while its slot is unused, not one whose slot went to a new peer.
    fn debug_check(&self, id: PeerId) {
        debug_assert_eq!(
            self.lookup(self.slots[id as usize].key),
            Some(id),
            "peer {id} was forgotten"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([198, 18, 0, i], 4000))
    }

    #[test]
    fn unscheduled_priority_defaults_and_cutoffs() {
        let mut p = Peer::new(AddrKey::from(addr(1)), 0, 0);
        assert_eq!(p.unsched_priority(100, 8), 6);
        assert_eq!(p.unsched_priority(1_000_000, 8), 6);
        assert_eq!(p.unsched_priority(100, 4), 0);
        p.set_cutoffs([0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200], 1);
        assert_eq!(p.unsched_priority(100, 8), 7);
        assert_eq!(p.unsched_priority(200, 8), 7);
        assert_eq!(p.unsched_priority(201, 8), 6);
        assert_eq!(p.unsched_priority(20_000, 8), 4);
        assert_eq!(
            p.unsched_priority(30_000_000, 8),
            4,
            "the lowest unscheduled level takes any length"
        );
        assert_eq!(p.unsched_priority(100, 5), 4);
    }

    #[test]
    fn sixth_ack_flushes_five() {
        let mut p = Peer::new(AddrKey::from(addr(1)), 0, 0);
        for i in 1..=5 {
            assert_eq!(p.add_ack(Ack { client_id: 2 * i, server_port: 1 }), None);
        }
        let flushed = p.add_ack(Ack { client_id: 12, server_port: 1 }).unwrap();
        assert_eq!(flushed[4].client_id, 10);
        let mut out = [Ack::NONE; MAX_ACKS];
        assert_eq!(p.take_acks(5, &mut out), 0);
    }

    #[test]
    fn full_table_evicts_only_idle_peers() {
        let mut t = PeerTable::new(2, Hasher::with_seed(1));
        let a = t.get_or_insert(addr(1), 0).unwrap();
        let b = t.get_or_insert(addr(2), 1).unwrap();
        t.get_mut(a).rpcs = 1;
        t.get_mut(b).rpcs = 1;
        assert_eq!(t.get_or_insert(addr(3), 2), None);
        t.get_mut(b).rpcs = 0;
        let c = t.get_or_insert(addr(3), 3).unwrap();
        assert_eq!(c, b, "the idle peer's slot is reused");
        assert_eq!(t.find(addr(2)), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.hosts.len(), 2, "the forgotten peer's host went with it");
        assert_ne!(t.get(a).host, t.get(c).host);
    }

    /// Review finding: acks waiting for a peer we never send to again pinned it, so after
    /// `max_peers` such peers every new one was refused for good.
    #[test]
    fn a_full_table_evicts_a_peer_holding_only_acks_last() {
        let mut t = PeerTable::new(2, Hasher::with_seed(1));
        let a = t.get_or_insert(addr(1), 0).unwrap();
        let b = t.get_or_insert(addr(2), 1).unwrap();
        t.get_mut(a).add_ack(Ack { client_id: 2, server_port: 1 });
        let c = t.get_or_insert(addr(3), 2).unwrap();
        assert_eq!(c, b, "the peer without acks goes first, although used later");
        t.get_mut(c).rpcs = 1;
        let d = t.get_or_insert(addr(4), 3).unwrap();
        assert_eq!(d, a, "then the one holding only acks");
        assert_eq!(t.get(d).num_acks, 0, "its acks went with it");
    }
}
