//! `--netns`: two hosts on one link. A server namespace and a client namespace joined by a
//! veth pair of a given MTU, so that packets cross a device into a second network stack at
//! that MTU rather than loopback's. veth passes GSO batches whole, as NICs with
//! segmentation offload do.

use std::net::{IpAddr, Ipv4Addr};

use crate::error::Error;
use crate::netns::{self, Teardown, sh};

/// One link: its namespaces, the ends' addresses, its MTU.
#[derive(Debug)]
pub(crate) struct Veth {
    pub(crate) server_ns: String,
    pub(crate) client_ns: String,
    pub(crate) server_ip: IpAddr,
    pub(crate) client_ip: IpAddr,
    pub(crate) mtu: u32,
}

impl Veth {
    /// Creates link `k` (1..=254, unique in this process) with `mtu`; `teardown` removes it.
    pub(crate) fn create(teardown: &Teardown, k: u8, mtu: u32) -> Result<Veth, Error> {
        let id = format!("hb{}", std::process::id() % 100_000);
        let (server_ns, client_ns) = (format!("{id}s{k}"), format!("{id}c{k}"));
        for ns in [&server_ns, &client_ns] {
            teardown.add(ns.clone());
            sh("ip", &["netns", "add", ns])?;
        }
        sh(
            "ip",
            &[
                "-n", &server_ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
                "netns", &client_ns,
            ],
        )?;
        let ip = |host| IpAddr::V4(Ipv4Addr::new(198, 18, k, host));
        let (server_ip, client_ip) = (ip(1), ip(2));
        let mtu_arg = mtu.to_string();
        for (ns, addr) in [(&server_ns, server_ip), (&client_ns, client_ip)] {
            sh("ip", &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            sh("ip", &["-n", ns, "link", "set", "eth0", "mtu", &mtu_arg, "up"])?;
            sh("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(Veth { server_ns, client_ns, server_ip, client_ip, mtu })
    }

    /// Runs `f` in the server's namespace (sockets it opens live there).
    pub(crate) fn at_server<T: Send>(
        &self,
        f: impl FnOnce() -> Result<T, Error> + Send,
    ) -> Result<T, Error> {
        netns::run_in(&self.server_ns, &[], f)
    }

    /// Runs `f` in the client's namespace.
    pub(crate) fn at_client<T: Send>(
        &self,
        f: impl FnOnce() -> Result<T, Error> + Send,
    ) -> Result<T, Error> {
        netns::run_in(&self.client_ns, &[], f)
    }
}
