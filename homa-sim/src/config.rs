//! What a simulation runs: the fabric, the workload and its load, how messages are exchanged
//! and measured, and the endpoints' configuration.

use homa_core::Config;
use homa_core::workload::Workload;
use serde::Serialize;

use crate::fabric::Topology;
use crate::protocol;

/// How messages are exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One-way messages, as in the paper: the receiver discards each request once delivered
    /// and the sender aborts its RPC, so no response traffic exists.
    OneWay,
    /// Request/response: the server echoes a response as long as the request; completion is
    /// when the response arrives.
    Rpc,
}

/// When to stop generating measured messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Measure this many messages (after the warm-up ones).
    Messages(u64),
    /// Generate messages for this many nanoseconds of simulated time; those created after
    /// the warm-up share of it are measured.
    Duration(u64),
}

/// What happens once the measured messages have all been created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tail {
    /// Background messages keep arriving (for at most as long again as the measurement)
    /// while the measured ones finish, so they all finish under load.
    Loaded,
    /// Arrivals stop at once and the network drains, as in HomaSimulation's runs: the last
    /// measured messages finish on an emptying network.
    Drain,
}

/// Everything a run depends on. The same value gives the same [`Report`](crate::Report).
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The fabric.
    pub topology: Topology,
    /// Message sizes and their probabilities.
    pub workload: Workload,
    /// Offered network load: the share of host link capacity used, counting every header,
    /// Ethernet framing and GRANT packets (spec/homa-results.md §2).
    pub load: f64,
    /// How messages are exchanged.
    pub mode: Mode,
    /// When to stop creating measured messages.
    pub stop: Stop,
    /// Share of the run (messages or time) before measuring starts.
    pub warmup: f64,
    /// How measured messages finish once all are created.
    pub tail: Tail,
    /// Seed of all randomness: message arrivals, sizes and hosts, the endpoints, the network.
    pub seed: u64,
    /// Every host's endpoint configuration (its `seed` is replaced per host).
    pub endpoint: Config,
    /// Upper bounds of the message-size bins; empty = the paper's bins for its workloads,
    /// bins of about 1 % of messages each otherwise.
    pub bins: Vec<u64>,
    /// Also run the same messages through an ideal SRPT scheduler (one-way mode only) and
    /// report its slowdowns beside Homa's.
    pub oracle: bool,
}

impl SimConfig {
    /// The paper's setup for `workload` at `load`: its topology, 8 priorities and its degree of
    /// overcommitment for the workload (4 for workloads it did not use), one-way messages.
    pub fn paper(workload: Workload, load: f64) -> SimConfig {
        let overcommit = protocol::paper_overcommit(workload.name()).unwrap_or(4);
        let topology = Topology::paper();
        let mbps = (topology.host_bps / 1_000_000) as u32;
        let endpoint = protocol::paper_config(&workload, mbps, 8, overcommit, overcommit);
        SimConfig {
            topology,
            workload,
            load,
            mode: Mode::OneWay,
            stop: Stop::Messages(200_000),
            warmup: 0.1,
            tail: Tail::Loaded,
            seed: 1,
            endpoint,
            bins: Vec::new(),
            oracle: false,
        }
    }
}
