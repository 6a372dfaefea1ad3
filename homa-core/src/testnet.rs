//! A deterministic network for testing and simulating endpoints (feature `testnet`).
//!
//! Hosts (each an [`Endpoint`]) and switches are joined by one-way links. A link has a rate,
//! a propagation delay, eight strict-priority output queues with an optional byte limit, and
//! seeded faults (loss, duplication, extra delay that reorders, corruption). Packets are
//! stored and forwarded whole. Time is virtual and the only randomness is the seed, so the
//! same construction and inputs give the same run.
//!
//! The network drives every endpoint by its contract: after each input it drains the
//! endpoint's packets into the host's outgoing link and its events to the [`App`], then
//! schedules the endpoint's next deadline.

use alloc::boxed::Box;
use alloc::collections::{BinaryHeap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::net::SocketAddr;

use crate::time::{Duration, Instant, Nanos};
use crate::{Endpoint, Event};

/// Index of a node (host or switch).
pub type NodeId = usize;
/// Index of a link.
pub type LinkId = usize;

/// Priority levels a link queue distinguishes.
pub const LEVELS: usize = 8;

/// Nanoseconds ahead of the clock that the agenda's ring covers (a power of two).
const RING: usize = 4096;

/// The application logic run at hosts: it sees every event and may call the endpoint.
pub trait App {
    /// Handles one event from `host`'s endpoint at `now`; it may call the endpoint.
    fn on_event(&mut self, now: Instant, host: NodeId, endpoint: &mut Endpoint, event: Event);
}

/// Collects events per host, for tests that inspect them afterwards.
#[derive(Debug, Default)]
pub struct Collect {
    /// Every event in the order delivered, with its time and host.
    pub events: Vec<(Instant, NodeId, Event)>,
}

impl App for Collect {
    fn on_event(&mut self, now: Instant, host: NodeId, _: &mut Endpoint, event: Event) {
        self.events.push((now, host, event));
    }
}

/// A small seeded PRNG (SplitMix64): fast, and the same everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next uniformly distributed 64-bit value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n); n > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }
}

/// Seeded misbehaviour of a link, each a per-packet probability.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Probability a packet is dropped.
    pub loss: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet is held back by up to `reorder_delay` extra.
    pub reorder: f64,
    /// Bound (exclusive, in nanoseconds) of the extra delay `reorder` adds.
    pub reorder_delay: Duration,
    /// Probability one random bit of the packet is flipped.
    pub corrupt: f64,
}

/// Counters of one link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets put on the link, those then lost to faults included.
    pub packets: u64,
    /// Bytes of those packets, not counting the link's `overhead`.
    pub bytes: u64,
    /// Dropped because the queue was at its byte limit.
    pub overflow_drops: u64,
    /// Dropped by the loss fault.
    pub fault_drops: u64,
    /// Most bytes ever waiting in the queues (not counting the packet on the wire).
    pub peak_queued: u64,
}

/// A one-way link and its output queues.
#[derive(Debug)]
pub struct Link {
    /// The sending node.
    pub from: NodeId,
    /// The receiving node.
    pub to: NodeId,
    /// Bits per second.
    pub rate_bps: u64,
    /// Propagation delay, in nanoseconds.
    pub delay: Duration,
    /// Bytes added to each packet's length on the wire (lower headers, framing, gaps).
    pub overhead: u32,
    /// Byte limit of the queues together; `None` for unlimited.
    pub limit: Option<u64>,
    /// One FIFO queue instead of eight strict-priority ones, as a host NIC: packets keep
    /// their priority for the switches downstream.
    pub fifo: bool,
    /// Seeded faults applied to each packet.
    pub faults: Faults,
    /// Counters since the link was added.
    pub stats: LinkStats,
    /// Boxed: most packets find the link idle and never queue, and the fields they do use
    /// then share fewer cache lines.
    queues: Box<[VecDeque<Packet>; LEVELS]>,
    /// A bit per non-empty queue, so the next packet is found without looking at all.
    waiting: u8,
    queued: u64,
    /// When the packet on the wire is out; the link is idle from then on.
    busy_until: Nanos,
    /// A `LinkFree` action is scheduled (only while packets wait).
    free_pending: bool,
}

impl Link {
    /// Bytes waiting to be sent.
    pub fn queued_bytes(&self) -> u64 {
        self.queued
    }
}

/// A packet in flight between hosts. (Ids are `u32` here and in `Action` to keep pending
/// actions small: they are moved in and out of the agenda at every hop.)
#[derive(Debug, Clone)]
struct Packet {
    src: u32,
    dst: u32,
    /// The packet is `bytes[..len]`: buffers keep their full size, so the endpoint writes
    /// into them directly and they are reused without resizing.
    len: u32,
    priority: u8,
    bytes: Vec<u8>,
}

#[derive(Debug)]
enum NodeKind {
    Host {
        endpoint: Box<Endpoint>,
        addr: SocketAddr,
        uplink: Option<LinkId>,
        armed: Option<Nanos>,
        /// Times with a `Timer` action pending, each with the number of later arms at the
        /// same time that were not scheduled (see `arm`).
        timers: Vec<(Nanos, u64)>,
    },
    Switch {
        delay: Duration,
        /// Per destination host: an index into `route_sets`, or `NONE`. Most destinations
        /// share a few sets (a ToR sends every remote host's packets over the same spine
        /// links), so the lookup stays in a few cache lines even with a thousand hosts.
        routes: Vec<u32>,
        route_sets: Vec<Vec<LinkId>>,
    },
}

#[derive(Debug)]
enum Action {
    /// A link finished putting its current packet on the wire.
    LinkFree(u32),
    /// A packet reaches a node.
    Arrive(u32, Packet),
    /// A switch hands a packet to an output link.
    Enqueue(u32, Packet),
    /// A host's deadline (stale if the host re-armed differently).
    Timer(u32),
}

/// A far action, ordered by time, then by the order it was scheduled in.
#[derive(Debug)]
struct Far {
    at: Nanos,
    seq: u64,
    action: Action,
}

impl PartialEq for Far {
    fn eq(&self, other: &Far) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Far {}

impl PartialOrd for Far {
    fn partial_cmp(&self, other: &Far) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Far {
    fn cmp(&self, other: &Far) -> core::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Pending actions in time order; actions at the same time run in the order they were
/// scheduled. Most actions are due within a few microseconds (link delays, serialisation),
/// so those sit in a ring of one FIFO list per nanosecond, found through a bitmap: O(1)
/// where a binary heap over all of them cost a fifth of a simulation's instructions. Later
/// ones (timers) wait in a heap and move to the ring, in order, before any action at their
/// time can be scheduled into it.
#[derive(Debug)]
struct Agenda {
    /// Every action before `base` has run; the ring holds those in [base, base + RING).
    base: Nanos,
    /// Per bucket (time % RING): the first and last node of its list, or `NONE` (together:
    /// one cache line).
    ends: Vec<(u32, u32)>,
    /// A bit per non-empty bucket.
    occupied: Vec<u64>,
    /// List nodes: an action and the next node of its bucket (or of the free list).
    nodes: Vec<(Option<Action>, u32)>,
    free: u32,
    in_ring: usize,
    /// Time of the next action.
    next: Option<Nanos>,
    /// Actions at base + RING or later.
    far: BinaryHeap<Reverse<Far>>,
    seq: u64,
}

const NONE: u32 = u32::MAX;

impl Agenda {
    fn new() -> Agenda {
        Agenda {
            base: 0,
            ends: vec![(NONE, NONE); RING],
            occupied: vec![0; RING / 64],
            nodes: Vec::new(),
            free: NONE,
            in_ring: 0,
            next: None,
            far: BinaryHeap::new(),
            seq: 0,
        }
    }

    fn push(&mut self, at: Nanos, action: Action) {
        // Nothing is scheduled in the past; if it were, it would run next.
        debug_assert!(at >= self.base);
        let at = at.max(self.base);
        if at - self.base < RING as u64 {
            self.put(at, action);
        } else {
            self.seq += 1;
            self.far.push(Reverse(Far { at, seq: self.seq, action }));
        }
        self.next = Some(self.next.map_or(at, |t| t.min(at)));
    }

    fn put(&mut self, at: Nanos, action: Action) {
        let node = if self.free != NONE {
            let n = self.free;
            self.free = self.nodes[n as usize].1;
            self.nodes[n as usize] = (Some(action), NONE);
            n
        } else {
            self.nodes.push((Some(action), NONE));
            (self.nodes.len() - 1) as u32
        };
        let b = at as usize % RING;
        let (head, tail) = &mut self.ends[b];
        if *head == NONE {
            *head = node;
            self.occupied[b / 64] |= 1 << (b % 64);
        } else {
            self.nodes[*tail as usize].1 = node;
        }
        *tail = node;
        self.in_ring += 1;
    }

    /// Time of the first action at or after the base.
    fn scan(&self) -> Option<Nanos> {
        if self.in_ring == 0 {
            return self.far.peek().map(|Reverse(f)| f.at);
        }
        // The first occupied bucket at or after the base's, wrapping around.
        let start = self.base as usize % RING;
        let words = self.occupied.len();
        let (w0, b0) = (start / 64, start % 64);
        let first = self.occupied[w0] & (u64::MAX << b0);
        let bucket = if first != 0 {
            w0 * 64 + first.trailing_zeros() as usize
        } else {
            (1..=words)
                .map(|k| (w0 + k) % words)
                .find(|&w| self.occupied[w] != 0)
                .map(|w| w * 64 + self.occupied[w].trailing_zeros() as usize)
                .expect("the ring holds an action")
        };
        Some(self.base + ((bucket + RING - start) % RING) as u64)
    }

    fn pop(&mut self) -> Option<(Nanos, Action)> {
        let at = self.next?;
        if at != self.base {
            // Buckets between the old base and `at` are empty: move the window on, and
            // far actions that now fall inside it into the ring.
            self.base = at;
            while let Some(Reverse(f)) = self.far.peek()
                && f.at - at < RING as u64
            {
                let Some(Reverse(f)) = self.far.pop() else { break };
                self.put(f.at, f.action);
            }
        }
        let b = at as usize % RING;
        let node = self.ends[b].0;
        let (action, next) = &mut self.nodes[node as usize];
        let action = action.take().expect("a listed node holds an action");
        self.ends[b].0 = core::mem::replace(next, self.free);
        self.free = node;
        self.in_ring -= 1;
        if self.ends[b].0 == NONE {
            self.occupied[b / 64] &= !(1 << (b % 64));
            self.next = self.scan();
        }
        Some((at, action))
    }
}

/// Sees every packet delivered to a host: (time, from, to, bytes).
pub type Tap = Box<dyn FnMut(Nanos, SocketAddr, SocketAddr, &[u8])>;

/// The network: nodes, links, pending actions and the virtual clock.
pub struct Network {
    now: Nanos,
    nodes: Vec<NodeKind>,
    links: Vec<Link>,
    actions: Agenda,
    rng: Rng,
    /// Length of packet buffers: the largest `max_packet_len` of the hosts.
    packet_len: usize,
    /// Packet buffers of delivered or dropped packets, for reuse.
    pool: Vec<Vec<u8>>,
    by_addr: hashbrown::HashMap<SocketAddr, NodeId, foldhash::fast::FixedState>,
    /// Packets handed to hosts whose bytes did not parse.
    pub malformed: u64,
    /// Actions executed (a measure of simulation work).
    pub steps: u64,
    /// Optional observer of delivered packets (for debugging and traces).
    pub tap: Option<Tap>,
}

impl core::fmt::Debug for Network {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Network").field("now", &self.now).field("nodes", &self.nodes.len()).finish()
    }
}

impl Network {
    /// An empty network whose randomness all comes from `seed`.
    pub fn new(seed: u64) -> Network {
        Network {
            now: 0,
            nodes: Vec::new(),
            links: Vec::new(),
            actions: Agenda::new(),
            rng: Rng::new(seed),
            packet_len: 0,
            pool: Vec::new(),
            by_addr: hashbrown::HashMap::with_hasher(foldhash::fast::FixedState::with_seed(seed)),
            malformed: 0,
            steps: 0,
            tap: None,
        }
    }

    /// The virtual time, in nanoseconds.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Adds a host running `endpoint` at transport address `addr`.
    pub fn add_host(&mut self, addr: SocketAddr, endpoint: Endpoint) -> NodeId {
        let id = self.nodes.len();
        let len = endpoint.config().max_packet_len();
        self.packet_len = self.packet_len.max(len);
        self.nodes.push(NodeKind::Host {
            endpoint: Box::new(endpoint),
            addr,
            uplink: None,
            armed: None,
            timers: Vec::new(),
        });
        self.by_addr.insert(addr, id);
        id
    }

    /// Adds a switch that holds each packet `delay` before queueing it on its output link.
    pub fn add_switch(&mut self, delay: Duration) -> NodeId {
        self.nodes.push(NodeKind::Switch { delay, routes: Vec::new(), route_sets: Vec::new() });
        self.nodes.len() - 1
    }

    /// Adds a one-way link. A host's first outgoing link becomes its uplink.
    pub fn add_link(&mut self, from: NodeId, to: NodeId, rate_bps: u64, delay: Duration) -> LinkId {
        let id = self.links.len();
        self.links.push(Link {
            from,
            to,
            rate_bps,
            delay,
            overhead: 0,
            limit: None,
            fifo: false,
            faults: Faults::default(),
            stats: LinkStats::default(),
            queues: Default::default(),
            waiting: 0,
            queued: 0,
            busy_until: 0,
            free_pending: false,
        });
        if let NodeKind::Host { uplink: up @ None, .. } = &mut self.nodes[from] {
            *up = Some(id);
        }
        id
    }

    /// Adds links both ways; returns (a -> b, b -> a).
    pub fn connect(
        &mut self,
        a: NodeId,
        b: NodeId,
        rate_bps: u64,
        delay: Duration,
    ) -> (LinkId, LinkId) {
        (self.add_link(a, b, rate_bps, delay), self.add_link(b, a, rate_bps, delay))
    }

    /// Routes packets for host `dst` arriving at `switch` over one of `links`, chosen at
    /// random per packet (spraying) when there are several.
    pub fn set_route(&mut self, switch: NodeId, dst: NodeId, links: Vec<LinkId>) {
        if let NodeKind::Switch { routes, route_sets, .. } = &mut self.nodes[switch] {
            if routes.len() <= dst {
                routes.resize(dst + 1, NONE);
            }
            routes[dst] = if links.is_empty() {
                NONE
            } else if let Some(i) = route_sets.iter().position(|set| *set == links) {
                i as u32
            } else {
                route_sets.push(links);
                (route_sets.len() - 1) as u32
            };
        }
    }

    /// Link `id`.
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id]
    }

    /// Link `id`, to change its settings or faults.
    pub fn link_mut(&mut self, id: LinkId) -> &mut Link {
        &mut self.links[id]
    }

    /// Every link, indexed by [`LinkId`].
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The endpoint of a host.
    pub fn endpoint(&self, host: NodeId) -> &Endpoint {
        match &self.nodes[host] {
            NodeKind::Host { endpoint, .. } => endpoint,
            NodeKind::Switch { .. } => panic!("node {host} is a switch"),
        }
    }

    /// A host's transport address; panics for a switch.
    pub fn addr(&self, host: NodeId) -> SocketAddr {
        match &self.nodes[host] {
            NodeKind::Host { addr, .. } => *addr,
            NodeKind::Switch { .. } => panic!("node {host} is a switch"),
        }
    }

    /// Replaces a host's endpoint (a restart: all its state is lost).
    pub fn replace_endpoint(&mut self, host: NodeId, new: Endpoint) -> Endpoint {
        let NodeKind::Host { endpoint, .. } = &mut self.nodes[host] else {
            panic!("node {host} is a switch")
        };
        core::mem::replace(endpoint, new)
    }

    /// Calls the application on a host's endpoint now, then drives the host.
    pub fn with_endpoint<T>(
        &mut self,
        host: NodeId,
        app: &mut impl App,
        f: impl FnOnce(Instant, &mut Endpoint) -> T,
    ) -> T {
        let now = self.now;
        let result = match &mut self.nodes[host] {
            NodeKind::Host { endpoint, .. } => f(Instant::from_nanos(now), endpoint),
            NodeKind::Switch { .. } => panic!("node {host} is a switch"),
        };
        self.drive(host, app);
        result
    }

    fn schedule(&mut self, at: Nanos, action: Action) {
        self.actions.push(at, action);
    }

    /// Time of the next action, if any.
    pub fn next_time(&self) -> Option<Nanos> {
        self.actions.next
    }

    /// Runs every action up to and including time `until`; the clock ends at `until`.
    pub fn run_until(&mut self, until: Nanos, app: &mut impl App) {
        while self.next_time().is_some_and(|t| t <= until) {
            self.step(app);
        }
        self.now = self.now.max(until);
    }

    /// Runs until no action is pending (every endpoint idle) or `limit` is reached; returns
    /// whether the network went idle.
    pub fn run_until_idle(&mut self, limit: Nanos, app: &mut impl App) -> bool {
        while let Some(t) = self.next_time() {
            if t > limit {
                self.now = limit;
                return false;
            }
            self.step(app);
        }
        true
    }

    /// Executes the next action.
    pub fn step(&mut self, app: &mut impl App) {
        let Some((at, action)) = self.actions.pop() else { return };
        self.now = self.now.max(at);
        self.steps += 1;
        match action {
            Action::LinkFree(l) => {
                self.links[l as usize].free_pending = false;
                self.start_link(l as usize);
            }
            Action::Arrive(node, packet) => self.arrive(node as usize, packet, app),
            Action::Enqueue(l, packet) => self.enqueue(l as usize, packet),
            Action::Timer(host) => {
                let host = host as usize;
                let NodeKind::Host { endpoint, armed, timers, .. } = &mut self.nodes[host] else {
                    return;
                };
                // Arms folded into this action count as the stale actions they would have
                // been, so `steps` measures the same work as before the folding.
                if let Some(i) = timers.iter().position(|&(t, _)| t == at) {
                    self.steps += timers.swap_remove(i).1;
                }
                if *armed != Some(at) {
                    return;
                }
                *armed = None;
                endpoint.handle_timeout(Instant::from_nanos(self.now));
                self.drive(host, app);
            }
        }
    }

    fn arrive(&mut self, node: NodeId, packet: Packet, app: &mut impl App) {
        if let NodeKind::Switch { delay, routes, route_sets } = &self.nodes[node] {
            let set = routes.get(packet.dst as usize).copied().unwrap_or(NONE);
            let Some(choices) = route_sets.get(set as usize) else {
                self.pool.push(packet.bytes); // no route: dropped
                return;
            };
            let link = match choices.len() {
                1 => choices[0],
                n => choices[self.rng.below(n as u64) as usize],
            };
            let delay = *delay;
            if delay == 0 {
                self.enqueue(link, packet);
            } else {
                self.schedule(self.now + delay, Action::Enqueue(link as u32, packet));
            }
            return;
        }
        let from = self.addr(packet.src as usize);
        if self.tap.is_some() {
            let to = self.addr(node);
            if let Some(tap) = self.tap.as_mut() {
                tap(self.now, from, to, &packet.bytes[..packet.len as usize]);
            }
        }
        let NodeKind::Host { endpoint, .. } = &mut self.nodes[node] else { return };
        let now = Instant::from_nanos(self.now);
        if endpoint.handle_packet(now, from, &packet.bytes[..packet.len as usize]).is_err() {
            self.malformed += 1;
        }
        self.pool.push(packet.bytes);
        self.drive(node, app);
    }

    fn enqueue(&mut self, l: LinkId, packet: Packet) {
        let link = &mut self.links[l];
        let len = u64::from(packet.len);
        if link.limit.is_some_and(|limit| link.queued + len > limit) {
            link.stats.overflow_drops += 1;
            self.pool.push(packet.bytes);
            return;
        }
        // (The peak counts a packet that goes straight on the wire too.)
        link.stats.peak_queued = link.stats.peak_queued.max(link.queued + len);
        if link.waiting == 0 && self.now >= link.busy_until {
            // Idle with nothing waiting (most packets): straight on the wire.
            self.transmit(l, packet);
            return;
        }
        link.queued += len;
        let level = if link.fifo { 0 } else { usize::from(packet.priority).min(LEVELS - 1) };
        link.queues[level].push_back(packet);
        link.waiting |= 1 << level;
        self.start_link(l);
    }

    /// Starts sending the highest-priority waiting packet if the link is idle; if it is busy,
    /// makes sure a `LinkFree` action will look again when it is out. (Links with nothing
    /// waiting have no action scheduled: most packets find their link idle.)
    fn start_link(&mut self, l: LinkId) {
        let now = self.now;
        let link = &mut self.links[l];
        if link.waiting == 0 {
            return;
        }
        if now < link.busy_until {
            if !link.free_pending {
                link.free_pending = true;
                let at = link.busy_until;
                self.schedule(at, Action::LinkFree(l as u32));
            }
            return;
        }
        let level = (u8::BITS - 1 - link.waiting.leading_zeros()) as usize;
        let queue = &mut link.queues[level];
        let Some(packet) = queue.pop_front() else { return };
        if queue.is_empty() {
            link.waiting &= !(1 << level);
        }
        link.queued -= u64::from(packet.len);
        self.transmit(l, packet);
    }

    /// Puts a packet on idle link `l`: schedules its arrival, and a `LinkFree` action if
    /// others wait.
    fn transmit(&mut self, l: LinkId, mut packet: Packet) {
        let now = self.now;
        let link = &mut self.links[l];
        let len = u64::from(packet.len);
        link.stats.packets += 1;
        link.stats.bytes += len;
        let wire_bits = (len + u64::from(link.overhead)) * 8;
        let rate = link.rate_bps.max(1);
        // 64-bit arithmetic unless the product overflows (it never does for a packet).
        let tx_time = match wire_bits.checked_mul(1_000_000_000) {
            Some(x) => x / rate,
            None => (u128::from(wire_bits) * 1_000_000_000 / u128::from(rate)) as u64,
        };
        let done = now + tx_time;
        link.busy_until = done;
        // Others wait: look again when this one is out.
        let schedule_free = !link.free_pending && link.waiting != 0;
        link.free_pending |= schedule_free;
        let (to, delay, faults) = (link.to, link.delay, link.faults);
        if schedule_free {
            self.schedule(done, Action::LinkFree(l as u32));
        }
        if self.rng.chance(faults.loss) {
            self.links[l].stats.fault_drops += 1;
            self.pool.push(packet.bytes);
            return;
        }
        if self.rng.chance(faults.corrupt) && packet.len > 0 {
            let bit = self.rng.below(u64::from(packet.len) * 8);
            packet.bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        let mut arrive = done + delay;
        if self.rng.chance(faults.reorder) {
            arrive += self.rng.below(faults.reorder_delay.max(1));
        }
        if self.rng.chance(faults.duplicate) {
            self.schedule(arrive, Action::Arrive(to as u32, packet.clone()));
        }
        self.schedule(arrive, Action::Arrive(to as u32, packet));
    }

    /// Drives a host by the contract: drain packets into its uplink and events into the app,
    /// run timer work that is due, repeat until nothing is ready, then arm its deadline.
    fn drive(&mut self, host: NodeId, app: &mut impl App) {
        let mut timeout_ran = false;
        loop {
            let mut progressed = false;
            loop {
                let mut bytes = self.pool.pop().unwrap_or_default();
                if bytes.len() < self.packet_len {
                    bytes.resize(self.packet_len, 0);
                }
                let NodeKind::Host { endpoint, uplink, .. } = &mut self.nodes[host] else { return };
                let uplink = *uplink;
                let Some(t) = endpoint
                    .poll_transmit(Instant::from_nanos(self.now), &mut bytes)
                    .expect("the network's buffers hold every endpoint's packets")
                else {
                    self.pool.push(bytes);
                    break;
                };
                progressed = true;
                let (Some(uplink), Some(dst)) = (uplink, self.host_by_addr(t.to)) else {
                    self.pool.push(bytes);
                    continue;
                };
                let (src, dst, len) = (host as u32, dst as u32, t.len as u32);
                let packet = Packet { src, dst, len, priority: t.priority, bytes };
                self.enqueue(uplink, packet);
            }
            while let NodeKind::Host { endpoint, .. } = &mut self.nodes[host]
                && let Some(event) = endpoint.poll_event()
            {
                progressed = true;
                app.on_event(Instant::from_nanos(self.now), host, endpoint, event);
            }
            let NodeKind::Host { endpoint, armed, .. } = &mut self.nodes[host] else { return };
            let Some(deadline) = endpoint.poll_timeout().map(Instant::as_nanos) else { return };
            if deadline > self.now {
                if *armed != Some(deadline) {
                    *armed = Some(deadline);
                    self.arm(host, deadline);
                }
                return;
            }
            if timeout_ran && !progressed {
                // Due now yet nothing moves: look again a nanosecond later.
                let at = self.now + 1;
                *armed = Some(at);
                self.arm(host, at);
                return;
            }
            endpoint.handle_timeout(Instant::from_nanos(self.now));
            timeout_ran = true;
        }
    }

    /// Schedules a `Timer` action for `host` at `at`, unless one is already pending then.
    /// That one runs first (it was scheduled earlier) and a second would always find the
    /// host re-armed or disarmed, so it is only counted. Hosts often go back to the same
    /// deadline (the next tick after a pacer slot); without this, thousands of such stale
    /// actions would sit in the heap.
    fn arm(&mut self, host: NodeId, at: Nanos) {
        let NodeKind::Host { timers, .. } = &mut self.nodes[host] else { return };
        if let Some(entry) = timers.iter_mut().find(|(t, _)| *t == at) {
            entry.1 += 1;
            return;
        }
        timers.push((at, 0));
        self.schedule(at, Action::Timer(host as u32));
    }

    fn host_by_addr(&self, addr: SocketAddr) -> Option<NodeId> {
        self.by_addr.get(&addr).copied()
    }
}

/// A star: `hosts` hosts around one switch, each with a link of `rate_bps` both ways and
/// `delay` per hop. Host i has address 198.18.0.(i+1):4000. Returns the network, the host
/// ids and, per host, its (uplink, downlink).
pub fn star(
    seed: u64,
    endpoints: Vec<Endpoint>,
    rate_bps: u64,
    delay: Duration,
) -> (Network, Vec<NodeId>, Vec<(LinkId, LinkId)>) {
    let mut net = Network::new(seed);
    let switch = net.add_switch(0);
    let mut hosts = vec![];
    let mut links = vec![];
    for (i, ep) in endpoints.into_iter().enumerate() {
        let addr = SocketAddr::from(([198, 18, (i / 250) as u8, (i % 250 + 1) as u8], 4000));
        let h = net.add_host(addr, ep);
        let (up, down) = net.connect(h, switch, rate_bps, delay);
        hosts.push(h);
        links.push((up, down));
    }
    for (i, &h) in hosts.iter().enumerate() {
        net.set_route(switch, h, vec![links[i].1]);
    }
    (net, hosts, links)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use alloc::rc::Rc;
    use core::cell::RefCell;

    /// Two hosts on one link (0 -> 1) of 8 bits/ns: a 100-byte packet takes 100 ns.
    fn pair() -> (Network, LinkId, Rc<RefCell<Vec<u8>>>) {
        let mut net = Network::new(1);
        let a = net.add_host(
            SocketAddr::from(([198, 18, 0, 1], 1)),
            Endpoint::new(Config::default()).unwrap(),
        );
        let b = net.add_host(
            SocketAddr::from(([198, 18, 0, 2], 1)),
            Endpoint::new(Config::default()).unwrap(),
        );
        let l = net.add_link(a, b, 8_000_000_000, 0);
        let seen = Rc::new(RefCell::new(Vec::new()));
        let log = seen.clone();
        // Each test packet's first byte names it; the host drops it as malformed.
        net.tap = Some(Box::new(move |_, _, _, bytes: &[u8]| log.borrow_mut().push(bytes[0])));
        (net, l, seen)
    }

    fn packet(name: u8, priority: u8) -> Packet {
        Packet { src: 0, dst: 1, priority, len: 100, bytes: vec![name; 100] }
    }

    #[test]
    fn the_agenda_runs_actions_by_time_then_schedule_order() {
        let mut agenda = Agenda::new();
        let r = RING as u64;
        // (time, name): far ones (a ring or more ahead) and near ones at the same times.
        let first = [(5, 0), (3 * r, 1), (5, 2), (r + 7, 3), (0, 4), (3 * r, 5)];
        for (at, name) in first {
            agenda.push(at, Action::Timer(name));
        }
        let mut order = Vec::new();
        let pop = |agenda: &mut Agenda| match agenda.pop() {
            Some((at, Action::Timer(name))) => (at, name),
            other => panic!("{other:?}"),
        };
        for _ in 0..3 {
            order.push(pop(&mut agenda));
        }
        // Scheduled later, at times already pending near and far, and one whose bucket
        // comes before the current one in the ring.
        for (at, name) in [(r + 7, 6), (3 * r, 7), (5, 8), (r + 2, 9)] {
            agenda.push(at, Action::Timer(name));
        }
        while agenda.next.is_some() {
            order.push(pop(&mut agenda));
        }
        let want = [(0, 4), (5, 0), (5, 2), (5, 8), (r + 2, 9), (r + 7, 3), (r + 7, 6)];
        let far = [(3 * r, 1), (3 * r, 5), (3 * r, 7)];
        assert_eq!(order, [&want[..], &far[..]].concat());
    }

    #[test]
    fn queues_serve_strictly_by_priority() {
        let (mut net, l, seen) = pair();
        // The first goes on the wire at once; the rest wait and leave highest level first,
        // in arrival order within a level.
        for (name, priority) in [(0, 0), (1, 1), (2, 7), (3, 3), (4, 7), (5, 0)] {
            net.enqueue(l, packet(name, priority));
        }
        assert_eq!(net.link(l).queued_bytes(), 500);
        net.run_until_idle(1_000_000, &mut Collect::default());
        assert_eq!(*seen.borrow(), [0, 2, 4, 3, 1, 5]);
        // Back to back: six packets of 100 ns each.
        assert_eq!(net.now(), 600);
        assert_eq!(net.link(l).stats.packets, 6);
        assert_eq!(net.link(l).stats.peak_queued, 500);
        assert_eq!(net.malformed, 6);
    }

    #[test]
    fn a_fifo_link_ignores_priorities() {
        let (mut net, l, seen) = pair();
        net.link_mut(l).fifo = true;
        for (name, priority) in [(0, 0), (1, 1), (2, 7), (3, 3)] {
            net.enqueue(l, packet(name, priority));
        }
        net.run_until_idle(1_000_000, &mut Collect::default());
        assert_eq!(*seen.borrow(), [0, 1, 2, 3]);
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let (mut net, l, seen) = pair();
        net.link_mut(l).limit = Some(250);
        for name in 0..5 {
            net.enqueue(l, packet(name, 7));
        }
        // One on the wire, two waiting (200 bytes), two dropped for want of room.
        assert_eq!(net.link(l).stats.overflow_drops, 2);
        net.run_until_idle(1_000_000, &mut Collect::default());
        assert_eq!(*seen.borrow(), [0, 1, 2]);
        // Room again once the queue drains.
        net.enqueue(l, packet(9, 0));
        net.run_until_idle(1_000_000, &mut Collect::default());
        assert_eq!(*seen.borrow(), [0, 1, 2, 9]);
    }
}
