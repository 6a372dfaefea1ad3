//! Storage for RPCs: a slab with generation-checked handles, and the two lookups the
//! protocol needs (client RPCs by id; server RPCs by client address and id, spec §1.6).

use core::net::SocketAddr;

use alloc::vec::Vec;
use hashbrown::HashMap;

use super::Rpc;
use crate::addr::{AddrKey, Hasher};

/// A handle to an RPC that may since have ended: [`RpcTable::get`] returns `None` then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RpcRef {
    idx: u32,
    generation: u32,
}

/// Aligned, with the generation first: a lookup's check and the RPC's first fields share a
/// cache line.
#[derive(Debug)]
#[repr(C, align(64))]
struct Slot {
    generation: u32,
    rpc: Option<Rpc>,
}

const _: () = assert!(
    8 + core::mem::offset_of!(Rpc, addr) + core::mem::size_of::<SocketAddr>() <= 64,
    "the generation and the RPC's fields up to `addr` fit one line"
);
const _: () =
    assert!(core::mem::size_of::<Slot>() <= 5 * 64, "an RPC's slot is five lines at most");

#[derive(Debug)]
pub(crate) struct RpcTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    clients: HashMap<u64, RpcRef, Hasher>,
    servers: HashMap<(AddrKey, u64), RpcRef, Hasher>,
}

impl RpcTable {
    pub(crate) fn new(hasher: Hasher) -> RpcTable {
        RpcTable {
            slots: Vec::new(),
            free: Vec::new(),
            clients: HashMap::with_hasher(hasher.clone()),
            servers: HashMap::with_hasher(hasher),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.clients.len() + self.servers.len()
    }

    /// Adds the RPC that `make` builds, in its slot: an `Rpc` is large, and built in place
    /// it is not copied there.
    pub(crate) fn insert(&mut self, make: impl FnOnce() -> Rpc) -> RpcRef {
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => {
                self.slots.push(Slot { generation: 0, rpc: None });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[idx as usize];
        let rpc = slot.rpc.insert(make());
        let (key, client) = ((AddrKey::from(rpc.addr), rpc.id), rpc.is_client());
        let r = RpcRef { idx, generation: slot.generation };
        if client {
            self.clients.insert(key.1, r);
        } else {
            self.servers.insert(key, r);
        }
        r
    }

    /// Drops the RPC (in place: an `Rpc` is large) and forgets its handle.
    pub(crate) fn remove(&mut self, r: RpcRef) {
        let Some(slot) =
            self.slots.get_mut(r.idx as usize).filter(|s| s.generation == r.generation)
        else {
            return;
        };
        let Some(rpc) = slot.rpc.as_ref() else { return };
        if rpc.is_client() {
            self.clients.remove(&rpc.id);
        } else {
            self.servers.remove(&(AddrKey::from(rpc.addr), rpc.id));
        }
        slot.rpc = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(r.idx);
    }

    pub(crate) fn get(&self, r: RpcRef) -> Option<&Rpc> {
        self.slots.get(r.idx as usize).filter(|s| s.generation == r.generation)?.rpc.as_ref()
    }

    pub(crate) fn get_mut(&mut self, r: RpcRef) -> Option<&mut Rpc> {
        self.slots.get_mut(r.idx as usize).filter(|s| s.generation == r.generation)?.rpc.as_mut()
    }

    pub(crate) fn find_client(&self, id: u64) -> Option<RpcRef> {
        self.clients.get(&id).copied()
    }

    pub(crate) fn find_server(&self, client: SocketAddr, id: u64) -> Option<RpcRef> {
        self.servers.get(&(AddrKey::from(client), id)).copied()
    }

    /// Every live RPC handle (for bulk operations such as closing a port).
    pub(crate) fn refs(&self) -> impl Iterator<Item = RpcRef> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.rpc.is_some())
            .map(|(i, s)| RpcRef { idx: i as u32, generation: s.generation })
    }
}
