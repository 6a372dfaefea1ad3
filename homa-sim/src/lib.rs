//! A discrete-event datacenter simulator that runs the real Homa protocol engine.
//!
//! Every host is a [`homa_core::Endpoint`] on the engine's deterministic test network
//! ([`homa_core::testnet`]); this crate only builds the fabric (hosts, top-of-rack and spine
//! switches, links with eight strict-priority queues, per-packet spraying), generates the
//! workload (Poisson arrivals, uniformly random destinations, message sizes from a CDF) and
//! measures: each message's slowdown (completion time over the best time for its size on an
//! idle fabric) per size bin, loads, queues and drops.
//!
//! [`SimConfig::paper`] is the setup of the SIGCOMM 2018 paper's simulations; `RESULTS.md`
//! compares its numbers with ours. With [`SimConfig::oracle`] the same messages also go
//! through an ideal SRPT scheduler (the paper's "SRPT-Oracle"), reported beside Homa's.
//! Workloads and [`cutoffs_for_workload`] (unscheduled priority cutoffs for any workload) come
//! from [`homa_core::workload`], for real endpoints too.
//!
//! ```
//! use homa_sim::{SimConfig, Stop, Workload, run};
//!
//! let mut cfg = SimConfig::paper(Workload::builtin("w3").unwrap(), 0.5);
//! cfg.topology.hosts = 16; // one rack, to keep the example fast
//! cfg.stop = Stop::Messages(500);
//! let report = run(&cfg, &mut |_| {}).unwrap();
//! assert_eq!(report.measured.completed, 500);
//! assert!(report.slowdown.median >= 1.0);
//! ```

#![warn(missing_docs)]

mod config;
mod fabric;
mod message;
mod oracle;
pub mod paper;
#[cfg(feature = "plot")]
pub mod plot;
mod protocol;
pub mod report;
mod run;

pub use config::{Mode, SimConfig, Stop, Tail};
pub use fabric::{Fabric, PortKind, Topology, host_addr, host_of};
pub use homa_core::workload::{Workload, WorkloadError};
pub use protocol::{
    PAPER_PAYLOAD, PAPER_RTT_BYTES, PAPER_UNSCHED_BYTES, SIM_RESEND_TICKS, cutoffs_for_workload,
    data_packets, data_wire_bytes, grant_wire_bytes, grants_for, paper_config, paper_overcommit,
    wire_bytes_per_message, with_resend_ticks,
};
pub use report::Report;
pub use run::{Progress, run};
