//! `--netns`: two hosts on one link. A server namespace and a client namespace joined by a
//! veth pair of a given MTU, so that packets cross a device into a second network stack at
//! that MTU rather than loopback's. veth passes GSO batches whole, as NICs with
//! segmentation offload do.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;

use homa_io::Socket;

use crate::error::Error;
use crate::netns::{self, Teardown, sh};
use crate::server::{Served, net_error, serve};

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

/// An echo server at one end of a [`Veth`], served by two threads, and a client socket at
/// the other.
pub(crate) struct Echo {
    pub(crate) server: Arc<Socket>,
    pub(crate) client: Arc<Socket>,
    threads: Vec<JoinHandle<()>>,
}

impl Veth {
    /// Starts an echo server on `port` in the server's namespace and opens a client in the
    /// client's, both with the default configuration.
    pub(crate) fn echo(&self, port: u16) -> Result<Echo, Error> {
        let at = SocketAddr::new(self.server_ip, port);
        let server =
            Arc::new(self.at_server(|| {
                Socket::builder().bind(at).map_err(net_error("the server socket"))
            })?);
        let client = Arc::new(self.at_client(|| {
            Socket::builder().client(self.client_ip).map_err(net_error("the client socket"))
        })?);
        let served = Arc::new(Served::default());
        let threads = (0..2)
            .map(|_| {
                let (server, served) = (Arc::clone(&server), Arc::clone(&served));
                std::thread::spawn(move || serve(&server, &served, None))
            })
            .collect();
        Ok(Echo { server, client, threads })
    }
}

impl Echo {
    /// Shuts the server down and waits for its threads.
    pub(crate) fn stop(self) {
        self.server.shutdown();
        for t in self.threads {
            let _ = t.join();
        }
    }
}
