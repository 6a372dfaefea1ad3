//! The lab `homa incast` runs in: one network namespace per host (the server, the probe
//! client, the load clients) and a bridge namespace joining them through veth pairs. The
//! bridge's port toward the server is the bottleneck: an HTB qdisc that acts as a switch
//! port with eight strict-priority queues, one per Homa priority level (the top three TOS
//! bits), each a byte-limited FIFO. Everything is removed on drop (and by [`Teardown`] on
//! SIGINT or SIGTERM).

use std::net::{IpAddr, Ipv4Addr};

use serde_json::Value;

use crate::error::Error;
use crate::netns;
pub(super) use crate::netns::{Teardown, pin, sh};

/// One host of the lab: its namespace, address, and the CPUs its threads run on (empty:
/// any, as the rest of this process).
#[derive(Debug, Clone)]
pub(super) struct Host {
    pub(super) ns: String,
    pub(super) ip: IpAddr,
    pub(super) cpus: Vec<usize>,
}

/// The bottleneck's shape.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub(super) link_mbps: u32,
    /// Bytes each priority queue holds before it drops.
    pub(super) buffer_bytes: u32,
}

/// The hosts and the bridge; removed on drop unless kept.
#[derive(Debug)]
pub(super) struct Topology {
    pub(super) server: Host,
    pub(super) probe: Host,
    pub(super) clients: Vec<Host>,
    bridge: String,
    shape: Shape,
    teardown: Teardown,
    /// nftables counts the top class's packets on their way to the bottleneck.
    watching: bool,
}

/// The bridge's port toward the server, where the bottleneck qdisc sits.
const BOTTLENECK: &str = "v0";

/// Homa priority levels, and so queues at the bottleneck.
pub(super) const LEVELS: usize = 8;

impl Topology {
    /// Creates the lab: `clients` load clients, a probe client and a server, with names
    /// unique to this process. With `own_cpu`, the server and the probe host run on the
    /// last CPU and the load clients on the others (see [`own_cpu_plan`]).
    pub(super) fn create(
        clients: usize,
        shape: Shape,
        teardown: Teardown,
        own_cpu: bool,
    ) -> Result<Topology, Error> {
        let (theirs, load) =
            if own_cpu { own_cpu_plan(&netns::cpus_allowed()?)? } else { (Vec::new(), Vec::new()) };
        let id = format!("hi{}", std::process::id() % 100_000);
        let bridge = format!("{id}b");
        // Each name is listed for removal before it exists: a signal in between must not
        // leave it behind.
        teardown.add(bridge.clone());
        sh("ip", &["netns", "add", &bridge])?;
        sh("ip", &["-n", &bridge, "link", "add", "br0", "type", "bridge"])?;
        sh("ip", &["-n", &bridge, "link", "set", "br0", "up"])?;
        let watching = watch_top_class(&bridge);
        let mut hosts = Vec::new();
        for k in 0..clients + 2 {
            let name = match k {
                0 => format!("{id}s"),
                1 => format!("{id}p"),
                _ => format!("{id}c{}", k - 2),
            };
            teardown.add(name.clone());
            sh("ip", &["netns", "add", &name])?;
            let port = format!("v{k}");
            sh(
                "ip",
                &[
                    "-n", &bridge, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &name,
                ],
            )?;
            // One packet per skb, as a switch sees them: a drop loses one packet, not a
            // GSO batch or a TSO segment of 64 KB.
            sh(
                "ip",
                &["-n", &bridge, "link", "set", &port, "master", "br0", "gso_max_segs", "1", "up"],
            )?;
            let ip = IpAddr::V4(Ipv4Addr::new(198, 19, 0, k as u8 + 1));
            sh("ip", &["-n", &name, "addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
            sh("ip", &["-n", &name, "link", "set", "eth0", "gso_max_segs", "1", "up"])?;
            sh("ip", &["-n", &name, "link", "set", "lo", "up"])?;
            let cpus = if k < 2 { theirs.clone() } else { load.clone() };
            hosts.push(Host { ns: name, ip, cpus });
        }
        let mut hosts = hosts.into_iter();
        let topo = Topology {
            server: hosts.next().expect("created"),
            probe: hosts.next().expect("created"),
            clients: hosts.collect(),
            bridge,
            shape,
            teardown,
            watching,
        };
        topo.wait_up()?;
        topo.reset_bottleneck()?;
        Ok(topo)
    }

    /// Every host, server first.
    pub(super) fn hosts(&self) -> impl Iterator<Item = &Host> {
        [&self.server, &self.probe].into_iter().chain(&self.clients)
    }

    /// The namespaces' names.
    pub(super) fn namespaces(&self) -> Vec<String> {
        std::iter::once(self.bridge.clone()).chain(self.hosts().map(|h| h.ns.clone())).collect()
    }

    /// Until the kernel marks a veth up it drops every frame: wait for the state.
    fn wait_up(&self) -> Result<(), Error> {
        let start = std::time::Instant::now();
        for h in self.hosts() {
            while !sh("ip", &["-n", &h.ns, "-o", "link", "show", "eth0"])?.contains("state UP") {
                if start.elapsed().as_secs() > 20 {
                    return Err(Error::Failed(format!("eth0 in {} never came up", h.ns)));
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// (Re)creates the bottleneck qdisc, with fresh counters: a parent class at the link
    /// rate, and per level a leaf that may borrow all of it, served in strict priority
    /// (HTB `prio` 0 is served first, so level 7 gets it), each with a byte FIFO.
    pub(super) fn reset_bottleneck(&self) -> Result<(), Error> {
        let tc = |args: &[&str]| -> Result<String, Error> {
            let mut all = vec!["netns", "exec", &self.bridge, "tc"];
            all.extend_from_slice(args);
            sh("ip", &all)
        };
        let _ = tc(&["qdisc", "del", "dev", BOTTLENECK, "root"]);
        let rate = format!("{}mbit", self.shape.link_mbps);
        // A burst of ten packets: HTB's timers then keep the link busy without letting
        // more than 10 packets through above the rate.
        let burst = "15140";
        tc(&["qdisc", "add", "dev", BOTTLENECK, "root", "handle", "1:", "htb", "default", "10"])?;
        tc(&[
            "class", "add", "dev", BOTTLENECK, "parent", "1:", "classid", "1:1", "htb", "rate",
            &rate, "ceil", &rate, "burst", burst, "cburst", burst, "quantum", "1514",
        ])?;
        for level in 0..LEVELS {
            let class = format!("1:1{level}");
            let prio = (LEVELS - 1 - level).to_string();
            tc(&[
                "class", "add", "dev", BOTTLENECK, "parent", "1:1", "classid", &class, "htb",
                "rate", "1mbit", "ceil", &rate, "burst", burst, "cburst", burst, "prio", &prio,
                "quantum", "1514",
            ])?;
            let limit = self.shape.buffer_bytes.to_string();
            tc(&[
                "qdisc",
                "add",
                "dev",
                BOTTLENECK,
                "parent",
                &class,
                "handle",
                &format!("1{level}:"),
                "bfifo",
                "limit",
                &limit,
            ])?;
            let tos = format!("{:#04x}", level << 5);
            tc(&[
                "filter", "add", "dev", BOTTLENECK, "parent", "1:", "protocol", "ip", "prio", "1",
                "u32", "match", "ip", "tos", &tos, "0xe0", "flowid", &class,
            ])?;
        }
        Ok(())
    }

    /// The bottleneck's counters per level.
    pub(super) fn queues(&self) -> Result<[Queue; LEVELS], Error> {
        let out = sh(
            "ip",
            &["netns", "exec", &self.bridge, "tc", "-s", "-j", "qdisc", "show", "dev", BOTTLENECK],
        )?;
        let qdiscs: Value = serde_json::from_str(&out)
            .map_err(|e| Error::Failed(format!("reading tc's JSON: {e}")))?;
        let mut queues = [Queue::default(); LEVELS];
        for q in qdiscs.as_array().into_iter().flatten() {
            let Some(level) = q["handle"]
                .as_str()
                .and_then(|h| h.strip_prefix('1')?.strip_suffix(':')?.parse::<usize>().ok())
                .filter(|&l| l < LEVELS && q["kind"] == "bfifo")
            else {
                continue;
            };
            let n = |k: &str| q[k].as_u64().unwrap_or(0);
            queues[level] =
                Queue { packets: n("packets"), drops: n("drops"), backlog_bytes: n("backlog") };
        }
        Ok(queues)
    }

    /// The top class's packets toward the bottleneck so far, and of them those longer than
    /// [`LONG_PACKET`] (none without nftables).
    pub(super) fn top_class(&self) -> Option<TopClass> {
        if !self.watching {
            return None;
        }
        let args = ["netns", "exec", &self.bridge, "nft", "list", "chain", "bridge", NFT_TABLE];
        let out = sh("ip", &[&args[..], &["forward"]].concat()).ok()?;
        let mut counts = out.lines().filter_map(|l| {
            let (_, rest) = l.split_once("counter packets ")?;
            rest.split_whitespace().next()?.parse().ok()
        });
        Some(TopClass { long: counts.next()?, all: counts.next()? })
    }

    /// Leaves the namespaces in place (`--keep`); returns their names.
    pub(super) fn keep(&self) -> Vec<String> {
        self.teardown.keep()
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.teardown.run();
    }
}

/// Longer than any packet of a short message (up to 1 KB, with Homa's, UDP's and IP's
/// headers): the top class should carry none.
pub(super) const LONG_PACKET: u32 = 1200;

const NFT_TABLE: &str = "homa_incast";

/// Counts in `bridge` the top class's packets toward the bottleneck, and the long ones;
/// false (and a warning) when nftables is missing.
fn watch_top_class(bridge: &str) -> bool {
    let nft = |args: &[&str]| sh("ip", &[&["netns", "exec", bridge, "nft"], args].concat());
    let chain = "{ type filter hook forward priority 0; }";
    let matched = ["oifname", BOTTLENECK, "ip", "dscp", "cs7"];
    let long = LONG_PACKET.to_string();
    let installed = nft(&["add", "table", "bridge", NFT_TABLE])
        .and_then(|_| nft(&["add", "chain", "bridge", NFT_TABLE, "forward", chain]))
        .and_then(|_| {
            let rule = [&["add", "rule", "bridge", NFT_TABLE, "forward"], &matched[..]].concat();
            nft(&[&rule[..], &["meta", "length", "gt", &long, "counter"]].concat())?;
            nft(&[&rule[..], &["counter"]].concat())
        });
    match installed {
        Ok(_) => true,
        Err(e) => {
            let why = match e {
                Error::Io { what, source } => format!("{what}: {source}"),
                Error::Failed(what) | Error::Input(what) => what,
                Error::Reported => String::new(),
            };
            tracing::warn!("the top class's packet lengths go uncounted: {why}");
            false
        }
    }
}

/// The top class's packets toward the bottleneck: all, and those over [`LONG_PACKET`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TopClass {
    pub(super) all: u64,
    pub(super) long: u64,
}

/// One priority queue of the bottleneck.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Queue {
    pub(super) packets: u64,
    pub(super) drops: u64,
    pub(super) backlog_bytes: u64,
}

/// The CPUs of `--own-cpu`: the last one for the server and the probe host, the others
/// for the load clients (and this command's own threads). On a machine with few CPUs the
/// lab's hosts otherwise take CPU time from each other, as real hosts do not: this keeps
/// the load's CPU work off the probe's path.
pub(super) fn own_cpu_plan(allowed: &[usize]) -> Result<(Vec<usize>, Vec<usize>), Error> {
    match allowed.split_last() {
        Some((&last, rest)) if !rest.is_empty() => Ok((vec![last], rest.to_vec())),
        _ => Err(Error::Input("--own-cpu needs at least two CPUs".into())),
    }
}

/// Runs `f` on a thread inside `host`'s network namespace and on its CPUs: sockets it
/// opens, and threads and processes it starts, live there.
pub(super) fn in_netns<T: Send>(
    host: &Host,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<T, Error> {
    netns::run_in(&host.ns, &host.cpus, f)
}

/// TCP's retransmitted segments so far in namespace `ns` (`RetransSegs`, /proc/net/snmp).
pub(super) fn tcp_retransmissions(ns: &str) -> Result<u64, Error> {
    let snmp = sh("ip", &["netns", "exec", ns, "cat", "/proc/net/snmp"])?;
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next(), tcp.next());
    let found = names.zip(values).and_then(|(n, v)| {
        let i = n.split_whitespace().position(|w| w == "RetransSegs")?;
        v.split_whitespace().nth(i)?.parse().ok()
    });
    found.ok_or_else(|| Error::Failed(format!("no Tcp RetransSegs in /proc/net/snmp of {ns}")))
}

#[cfg(test)]
mod tests {
    use super::own_cpu_plan;

    #[test]
    fn own_cpu_gives_the_last_cpu_to_the_server_and_probe_host() {
        assert_eq!(own_cpu_plan(&[0, 1]).unwrap(), (vec![1], vec![0]));
        assert_eq!(own_cpu_plan(&[2, 5, 7]).unwrap(), (vec![7], vec![2, 5]));
        assert!(own_cpu_plan(&[3]).is_err());
        assert!(own_cpu_plan(&[]).is_err());
    }
}
