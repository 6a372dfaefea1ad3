//! The paper's protocol settings mapped onto `homa_core::Config`, and the bytes a message
//! puts on the wire (the packets and cutoffs themselves come from `homa_core::workload`).

use homa_core::Config;
use homa_core::wire::{self, MAX_MESSAGE_LENGTH};
use homa_core::workload::Workload;
pub use homa_core::workload::{
    cutoffs_for_workload, data_packets, data_wire_bytes, grant_wire_bytes, grants_for,
};

/// RTTbytes of the paper's simulations: one full packet one way and a grant back at 10 Gbit/s.
pub const PAPER_RTT_BYTES: u32 = 10_000;
/// Unscheduled bytes per message in the paper: the first packet (1,442 B) plus 7,886 B.
pub const PAPER_UNSCHED_BYTES: u32 = 9_328;
/// Message bytes per full DATA packet in the paper's simulator.
pub const PAPER_PAYLOAD: u32 = 1_442;
/// Silent ticks before a RESEND in a simulation (the paper's simulator had no RESEND; see
/// [`paper_config`]).
pub const SIM_RESEND_TICKS: u32 = 100;

/// The degree of overcommitment (= scheduled priority levels) the paper used for a workload.
pub fn paper_overcommit(workload: &str) -> Option<u8> {
    match workload.to_ascii_lowercase().as_str() {
        "w1" => Some(1),
        "w2" => Some(3),
        "w3" => Some(4),
        "w4" | "w5" => Some(7),
        _ => None,
    }
}

/// An endpoint configured as the paper's simulated Homa, for `workload`:
///
/// - `mtu` 1,518 with a 20-byte IPv4 header, so a full DATA packet carries 1,442 message
///   bytes, as in the paper;
/// - `unsched_bytes` 9,328; a fixed grant `window` of RTTbytes (10,000) per message, the
///   paper's `maxOutstandingRecvBytes`, instead of the module's dynamic window;
/// - `max_overcommit` = `overcommit`, and `max_active_per_peer` too: one receiver may grant
///   to several messages of one sender, as today's module does (the paper's simulator
///   granted one message per sender, our default elsewhere; `homa sim --per-peer 1`);
/// - `max_incoming` effectively unlimited, because the paper had no cap beyond the
///   per-message window (a cap would also count the unscheduled bytes of messages waiting
///   for grants, which the paper never limited);
/// - no FIFO grants and no FIFO picks in the pacer (the 2018 design is pure SRPT);
/// - `max_nic_est_backlog_usecs` 0 and `pacer_batch_packets` 0: a packet goes to the NIC
///   only when the NIC is idle, as in the paper's simulator, so the sender's SRPT choice is
///   made at the last moment;
/// - `sched_levels` of the `priorities` levels for scheduled packets, the rest unscheduled
///   with cutoffs from [`cutoffs_for_workload`];
/// - `max_message_length` raised to the workload's longest message (the paper's simulator
///   had no limit; the module's is 1,000,000 bytes);
/// - RESEND after 100 silent ticks (100 ms) instead of the module's 5, and RPCs timing out
///   after 400 instead of 100 (`resend_interval` stays 5): the paper's simulator had no loss
///   recovery, and this fabric loses nothing unless given a buffer limit, so a RESEND can only
///   duplicate data that waits in a queue behind higher priorities (W5's longest messages
///   wait over 5 ms at 80 % load);
/// - generous memory limits (`wmem_max`, `max_rx_bytes`, peers), as a simulation only
///   measures the protocol.
pub fn paper_config(
    workload: &Workload,
    link_mbps: u32,
    priorities: u8,
    overcommit: u8,
    sched_levels: u8,
) -> Config {
    let base = Config {
        mtu: PAPER_PAYLOAD + wire::data::HEADER_LEN as u32 + 20,
        outer_header_bytes: 20,
        link_mbps,
        unsched_bytes: PAPER_UNSCHED_BYTES,
        window: PAPER_RTT_BYTES,
        max_incoming: 1 << 30,
        max_overcommit: overcommit,
        max_active_per_peer: overcommit,
        grant_fifo_fraction: 0,
        pacer_fifo_fraction: 0,
        max_nic_est_backlog_usecs: 0,
        pacer_batch_packets: 0,
        num_priorities: priorities,
        wmem_max: 1 << 40,
        max_rx_bytes: 1 << 40,
        max_bytes_per_host: 1 << 40,
        max_peers: 1 << 20,
        max_rpcs_per_peer: 1 << 20,
        max_message_length: longest_message(workload),
        ..Config::default()
    };
    let base = with_resend_ticks(base, SIM_RESEND_TICKS);
    let unsched_levels = priorities.saturating_sub(sched_levels).max(1);
    Config { unsched_cutoffs: cutoffs_for_workload(workload, &base, unsched_levels), ..base }
}

/// The `max_message_length` a simulation of `workload` needs: its longest message, and at
/// least the module's limit (so that configurations stay alike where that suffices).
fn longest_message(workload: &Workload) -> u32 {
    workload.longest().clamp(u64::from(MAX_MESSAGE_LENGTH), i32::MAX as u64) as u32
}

/// `config` asking for missing data after `ticks` silent ticks, and giving an RPC up after
/// four times as long, or the module's 100 ticks if that is longer.
pub fn with_resend_ticks(config: Config, ticks: u32) -> Config {
    let timeout_ticks = Config::default().timeout_ticks.max(ticks.saturating_mul(4));
    Config { resend_ticks: ticks, timeout_ticks, ..config }
}

/// Mean bytes one message puts on host links (the sender's uplink, and the receiver's
/// downlink alike): its DATA packets and the GRANTs that pull them, with every header and
/// Ethernet framing. In `Rpc` mode the response (as long as the request) counts too.
pub fn wire_bytes_per_message(workload: &Workload, config: &Config, mode: crate::Mode) -> f64 {
    let grant = u64::from(grant_wire_bytes(config));
    let one_way = workload.expect(|s| {
        let data: u64 =
            data_packets(s, config).map(|p| u64::from(data_wire_bytes(p, config))).sum();
        (data + grants_for(s, config) * grant) as f64
    });
    match mode {
        crate::Mode::OneWay => one_way,
        crate::Mode::Rpc => 2.0 * one_way,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper(w: &str) -> Config {
        let workload = Workload::builtin(w).unwrap();
        let oc = paper_overcommit(w).unwrap();
        paper_config(&workload, 10_000, 8, oc, oc)
    }

    #[test]
    fn packets_follow_the_cores_split() {
        let c = paper("w3");
        assert_eq!(c.max_payload(), 1442);
        let p: Vec<u32> = data_packets(10_000, &c).collect();
        assert_eq!(p, [1442, 1442, 1442, 1442, 1442, 1442, 676, 672]);
        assert_eq!(data_packets(1, &c).collect::<Vec<_>>(), [1]);
        // A message over the module's 1,000,000-byte limit is one message: one short packet
        // ends its unscheduled part, one its end.
        let p: Vec<u32> = data_packets(2_500_000, &c).collect();
        assert_eq!(p.iter().map(|&b| u64::from(b)).sum::<u64>(), 2_500_000);
        assert_eq!(p.iter().filter(|&&b| b != 1442).count(), 2);
    }

    #[test]
    fn the_longest_message_fits() {
        assert_eq!(paper("w1").max_message_length, 1_000_000);
        assert_eq!(paper("w5").max_message_length, 29_400_000);
        let g = grants_for(29_400_000, &paper("w5"));
        assert!(g.abs_diff((29_400_000 - 9_328u64).div_ceil(1442)) <= 8, "{g}");
    }

    #[test]
    fn grants_cover_the_scheduled_bytes() {
        let c = paper("w3");
        assert_eq!(grants_for(9_328, &c), 0);
        // 10,000 bytes: the first packet already lets the receiver grant the rest.
        assert_eq!(grants_for(10_000, &c), 1);
        // A long message: about one grant per scheduled packet.
        let g = grants_for(1_000_000, &c);
        let scheduled_packets = (1_000_000 - 9_328u64).div_ceil(1442);
        assert!(g.abs_diff(scheduled_packets) <= 8, "{g} vs {scheduled_packets}");
    }

    #[test]
    fn cutoffs_balance_bytes_and_mark_the_scheduled_levels() {
        // W3, 4 scheduled levels: unscheduled levels 7..4, cutoffs ascending toward level 4.
        let c = paper("w3");
        let t = c.unsched_cutoffs;
        assert_eq!(&t[..4], &[0, 0, 0, 0]);
        assert_eq!(t[4], 1_000_000);
        assert!(t[7] < t[6] && t[6] < t[5] && t[5] < 1_000_000, "{t:?}");
        assert_eq!(c.max_sched_prio(), 3);
        c.validate().unwrap();
        // W1 (overcommitment 1): seven unscheduled levels, level 0 scheduled.
        let c1 = paper("w1");
        assert_eq!(c1.unsched_cutoffs[1], 1_000_000);
        assert_eq!(c1.max_sched_prio(), 0);
        c1.validate().unwrap();
        // W5 (overcommitment 7): one unscheduled level.
        let c5 = paper("w5");
        assert_eq!(c5.unsched_cutoffs, [0, 0, 0, 0, 0, 0, 0, 1_000_000]);
        assert_eq!(c5.max_sched_prio(), 6);
    }

    #[test]
    fn cutoffs_split_a_uniform_workload_evenly() {
        // Four equally likely sizes of one full packet each carry equal bytes; grants none.
        let w = Workload::parse("u", "100 0.25\n200 0.5\n300 0.75\n400 1\n").unwrap();
        let c = Config { num_priorities: 4, ..paper("w3") };
        let t = cutoffs_for_workload(&w, &c, 2);
        // Bytes on the wire grow with size, so the halfway point of the bytes falls at 300.
        assert_eq!(t, [0, 0, 1_000_000, 300, 0, 0, 0, 0]);
        let t1 = cutoffs_for_workload(&w, &c, 1);
        assert_eq!(t1, [0, 0, 0, 1_000_000, 0, 0, 0, 0]);
        // One priority level: everything shares it.
        let one = Config { num_priorities: 1, ..c };
        assert_eq!(cutoffs_for_workload(&w, &one, 1), [1_000_000, 0, 0, 0, 0, 0, 0, 0]);
    }
}
