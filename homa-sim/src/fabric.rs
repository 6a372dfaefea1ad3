//! A two-level datacenter fabric on the engine's test network: hosts in racks under top-of-rack
//! switches, every ToR linked to every spine, packets sprayed across spines one by one.

use core::net::SocketAddr;

use homa_core::Endpoint;
use homa_core::testnet::{LinkId, Network, NodeId};
use serde::Serialize;

/// Shape, speeds and delays of the fabric. Delays are in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Topology {
    /// Number of hosts.
    pub hosts: usize,
    /// Hosts under each ToR (the last rack may hold fewer).
    pub hosts_per_rack: usize,
    /// Spine (aggregation) switches; each ToR has one uplink to each.
    pub spines: usize,
    /// Host <-> ToR links, bits per second.
    pub host_bps: u64,
    /// ToR <-> spine links, bits per second.
    pub fabric_bps: u64,
    /// Propagation delay of every link.
    pub link_delay: u64,
    /// Fixed forwarding delay of every switch, on top of store-and-forward.
    pub switch_delay: u64,
    /// Host delay between the transport emitting a packet and the wire (software + NIC).
    pub host_send_delay: u64,
    /// Host delay between the wire and the transport seeing a packet.
    pub host_recv_delay: u64,
    /// Bytes each packet occupies on a link beyond the Homa packet: IP header and Ethernet
    /// framing (header, FCS, preamble, inter-frame gap).
    pub wire_overhead: u32,
    /// Host NICs serve their queue by priority, as the paper's sender picks the next packet
    /// (control first, then by priority) when its NIC is free; `false` is one FIFO queue, as
    /// most real NICs (the core emits control packets and messages of at most
    /// `defer_min_bytes` without pacing, so they queue in the NIC in emission order).
    pub nic_priority: bool,
    /// Byte limit of each switch output port's queues together (all 8 levels); `None` is
    /// unlimited. Packets that do not fit are dropped and counted; they are recovered by
    /// RESEND, which `paper_config` delays to 100 ms (lower `Config::resend_ticks` here).
    pub buffer_bytes: Option<u64>,
}

impl Topology {
    /// The SIGCOMM 2018 simulations (HomaSimulation's `homaTransportConfig.ini`): 144 hosts in
    /// 9 racks of 16, 4 spines, 10 Gbit/s host links, 40 Gbit/s fabric links, no propagation
    /// delay, 0.25 µs per switch, store-and-forward, 1.5 µs of host delay per one-way trip
    /// (0.5 µs software and 0.5 µs NIC on send, 0.5 µs software on receive), infinite buffers.
    pub fn paper() -> Topology {
        Topology {
            hosts: 144,
            hosts_per_rack: 16,
            spines: 4,
            host_bps: 10_000_000_000,
            fabric_bps: 40_000_000_000,
            link_delay: 0,
            switch_delay: 250,
            host_send_delay: 1000,
            host_recv_delay: 500,
            wire_overhead: 20 + homa_core::config::ETH_OVERHEAD,
            nic_priority: true,
            buffer_bytes: None,
        }
    }

    /// Number of racks, one ToR each.
    pub fn racks(&self) -> usize {
        self.hosts.div_ceil(self.hosts_per_rack)
    }

    /// The rack that holds `host`.
    pub fn rack_of(&self, host: usize) -> usize {
        host / self.hosts_per_rack
    }

    /// The links a packet from `src` to `dst` crosses, as (rate, delay after the link until
    /// the next transmitter may start: propagation plus the next node's fixed delay).
    pub fn path(&self, src: usize, dst: usize) -> Vec<(u64, u64)> {
        let (d, sw) = (self.link_delay, self.switch_delay);
        let first = (self.host_bps, self.host_send_delay + d + sw);
        let last = (self.host_bps, d + self.host_recv_delay);
        if self.rack_of(src) == self.rack_of(dst) || self.spines == 0 {
            vec![first, last]
        } else {
            vec![first, (self.fabric_bps, d + sw), (self.fabric_bps, d + sw), last]
        }
    }

    /// The best time for a message's packets to reach `dst` from `src` on an idle fabric, in
    /// nanoseconds. `packets` gives each packet's bytes on the wire and the time the sender's
    /// pacer releases it (relative to the first). Links are store-and-forward; between the
    /// two host links, packets sprayed over several spines do not wait for each other, and
    /// the receiver's ToR sends them on in the order they arrive (which is best for the
    /// last arrival).
    pub fn idle_time(&self, src: usize, dst: usize, packets: &[(u32, f64)]) -> f64 {
        let path = self.path(src, dst);
        let sprayed = path.len() > 2 && self.spines > 1;
        let ser = |bytes: u32, bps: u64| f64::from(bytes) * 8e9 / bps as f64;
        let mut free = vec![0.0f64; path.len()];
        let mut at_last_hop = Vec::with_capacity(packets.len());
        for &(bytes, release) in packets {
            let mut t = release;
            for (hop, &(bps, delay)) in path[..path.len() - 1].iter().enumerate() {
                let start = if sprayed && hop > 0 { t } else { t.max(free[hop]) };
                free[hop] = start + ser(bytes, bps);
                t = free[hop] + delay as f64;
            }
            at_last_hop.push((t, bytes));
        }
        if sprayed {
            at_last_hop.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let (bps, delay) = path[path.len() - 1];
        let mut done = 0.0f64;
        for (t, bytes) in at_last_hop {
            done = t.max(done) + ser(bytes, bps);
        }
        done + delay as f64
    }

    /// Checks the shape; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.hosts < 2 {
            return Err("at least 2 hosts are needed".into());
        }
        if self.hosts_per_rack == 0 {
            return Err("hosts per rack must be positive".into());
        }
        if self.racks() > 1 && self.spines == 0 {
            return Err("more than one rack needs at least one spine".into());
        }
        if self.host_bps == 0 || self.fabric_bps == 0 {
            return Err("link rates must be positive".into());
        }
        if self.hosts > 1 << 17 {
            return Err("at most 131072 hosts".into());
        }
        Ok(())
    }
}

/// What a switch output port connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PortKind {
    /// ToR to host.
    TorDown,
    /// ToR to spine.
    TorUp,
    /// Spine to ToR.
    SpineDown,
}

/// A built fabric: the network and the links that matter for measurements.
#[derive(Debug)]
pub struct Fabric {
    /// The simulated network: hosts, switches, links and routes.
    pub net: Network,
    /// Host i is node i.
    pub hosts: usize,
    /// Per host, its link to its ToR.
    pub host_up: Vec<LinkId>,
    /// Per host, its ToR's link to it.
    pub host_down: Vec<LinkId>,
    /// Every switch output port, with what it connects and the switch's index within its kind.
    pub switch_ports: Vec<(LinkId, PortKind, usize)>,
}

/// The transport address of host `i`: 198.18.0.0/15, port 4000.
pub fn host_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([198, 18 + (i >> 16) as u8, (i >> 8) as u8, i as u8], 4000))
}

/// The inverse of [`host_addr`].
pub fn host_of(addr: SocketAddr) -> Option<usize> {
    match addr {
        SocketAddr::V4(a) => {
            let [a0, a1, a2, a3] = a.ip().octets();
            (a0 == 198 && (18..=19).contains(&a1))
                .then(|| (usize::from(a1 - 18) << 16) | (usize::from(a2) << 8) | usize::from(a3))
        }
        SocketAddr::V6(_) => None,
    }
}

impl Fabric {
    /// Builds the fabric with `endpoints[i]` at host i. Switch fixed delays are folded into
    /// the propagation delay of the link entering the switch (the same timing, one event
    /// fewer per hop); host delays into the host's own links.
    pub fn build(topo: &Topology, endpoints: Vec<Endpoint>, seed: u64) -> Fabric {
        assert_eq!(endpoints.len(), topo.hosts);
        let mut net = Network::new(seed);
        let hosts: Vec<NodeId> = endpoints
            .into_iter()
            .enumerate()
            .map(|(i, ep)| net.add_host(host_addr(i), ep))
            .collect();
        let tors: Vec<NodeId> = (0..topo.racks()).map(|_| net.add_switch(0)).collect();
        let spines: Vec<NodeId> = if topo.racks() > 1 {
            (0..topo.spines).map(|_| net.add_switch(0)).collect()
        } else {
            Vec::new()
        };
        let (d, sw) = (topo.link_delay, topo.switch_delay);
        let mut switch_ports = Vec::new();
        let mut link =
            |net: &mut Network, from, to, bps, delay, port: Option<(PortKind, usize)>| {
                let l = net.add_link(from, to, bps, delay);
                let link = net.link_mut(l);
                link.overhead = topo.wire_overhead;
                if let Some((kind, index)) = port {
                    link.limit = topo.buffer_bytes;
                    switch_ports.push((l, kind, index));
                }
                l
            };
        let (mut host_up, mut host_down) = (Vec::new(), Vec::new());
        for (i, &h) in hosts.iter().enumerate() {
            let r = topo.rack_of(i);
            let tor = tors[r];
            let up_delay = topo.host_send_delay + d + sw;
            let up = link(&mut net, h, tor, topo.host_bps, up_delay, None);
            net.link_mut(up).fifo = !topo.nic_priority;
            host_up.push(up);
            let down = d + topo.host_recv_delay;
            host_down.push(link(
                &mut net,
                tor,
                h,
                topo.host_bps,
                down,
                Some((PortKind::TorDown, r)),
            ));
        }
        // ups[r][s]: ToR r to spine s; downs[s][r]: spine s to ToR r.
        let mut ups = vec![Vec::new(); tors.len()];
        let mut downs = vec![Vec::new(); spines.len()];
        for (r, &tor) in tors.iter().enumerate() {
            for (s, &spine) in spines.iter().enumerate() {
                let bps = topo.fabric_bps;
                ups[r].push(link(&mut net, tor, spine, bps, d + sw, Some((PortKind::TorUp, r))));
                downs[s].push(link(
                    &mut net,
                    spine,
                    tor,
                    bps,
                    d + sw,
                    Some((PortKind::SpineDown, s)),
                ));
            }
        }
        for (i, &h) in hosts.iter().enumerate() {
            let r = topo.rack_of(i);
            for (t, &tor) in tors.iter().enumerate() {
                let route = if t == r { vec![host_down[i]] } else { ups[t].clone() };
                net.set_route(tor, h, route);
            }
            for (s, &spine) in spines.iter().enumerate() {
                net.set_route(spine, h, vec![downs[s][r]]);
            }
        }
        switch_ports.sort_by_key(|&(l, kind, index)| (kind as u8, index, l));
        Fabric { net, hosts: hosts.len(), host_up, host_down, switch_ports }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for i in [0, 1, 143, 255, 256, 1023, 70_000] {
            assert_eq!(host_of(host_addr(i)), Some(i));
        }
    }

    #[test]
    fn idle_time_is_serialisation_plus_hops() {
        let t = Topology::paper();
        // One 1,000-byte packet across the spine: 0.8 µs at 10G twice, 0.2 µs at 40G twice,
        // three switches, 1.5 µs of hosts.
        let one = t.idle_time(0, 16, &[(1000, 0.0)]);
        assert!((one - (800.0 * 2.0 + 200.0 * 2.0 + 750.0 + 1500.0)).abs() < 1e-6, "{one}");
        // In a rack: two links, one switch.
        let local = t.idle_time(0, 1, &[(1000, 0.0)]);
        assert!((local - (1600.0 + 250.0 + 1500.0)).abs() < 1e-6, "{local}");
        // A stream is paced by the host link; the fabric adds only the last packet's hops.
        let many = t.idle_time(0, 16, &[(1000, 0.0); 10]);
        assert!((many - one - 9.0 * 800.0).abs() < 1e-6, "{many}");
        // A short last packet sprayed over another spine may overtake: the ToR sends it first.
        let pair = t.idle_time(0, 16, &[(1000, 0.0), (100, 0.0)]);
        let in_order = 800.0 * 2.0 + 200.0 * 2.0 + 750.0 + 1500.0 + 80.0;
        // It overtakes: done 80 ns sooner than in order (its 10G downlink time).
        assert!((pair - (in_order - 80.0)).abs() < 1e-6, "{pair} vs {in_order}");
    }
}
