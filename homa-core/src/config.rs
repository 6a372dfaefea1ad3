//! Tunables, named and defaulted as the Linux module's sysctls (`net.homa.*`, spec §2.7),
//! plus the limits that keep memory bounded whatever peers send.

use core::fmt;

use crate::time::{Duration, NANOS_PER_USEC};
use crate::wire::{self, MAX_MESSAGE_LENGTH, MAX_PRIORITIES};

/// Bytes of Ethernet framing per packet the pacer counts on top of the IP packet (preamble,
/// header, FCS and inter-frame gap: the module's `HOMA_ETH_OVERHEAD`).
pub const ETH_OVERHEAD: u32 = 42;
/// Most RPCs the grant scheduler grants to at once (`HOMA_MAX_GRANTS`).
pub const MAX_OVERCOMMIT: u8 = 8;

/// Configuration of one [`Endpoint`](crate::Endpoint). Build it with struct update syntax
/// from [`Config::default`]; [`Config::validate`] (run by `Endpoint::new`) explains any bad value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    // --- Sender ---
    /// Bytes of each message sent before any grant arrives (announced in DATA `incoming`).
    pub unsched_bytes: u32,
    /// Largest IP packet (the route MTU), for packetisation.
    pub mtu: u32,
    /// Bytes of headers below Homa in every packet: 20 for raw IPv4, 40 for raw IPv6, 28 for
    /// UDP over IPv4, 48 for UDP over IPv6. Payload per DATA = `mtu - outer_header_bytes - 56`.
    pub outer_header_bytes: u32,
    /// Uplink speed in Mbit/s, for the pacer.
    pub link_mbps: u32,
    /// The pacer holds data back while the estimated NIC queue exceeds this many µs.
    pub max_nic_est_backlog_usecs: u32,
    /// Thousandths of pacer picks that go to the oldest message instead of the shortest.
    pub pacer_fifo_fraction: u32,
    /// Messages with at most this many bytes left are never held back by the pacer.
    pub defer_min_bytes: u32,
    /// Bytes of outgoing messages an endpoint holds at once (`wmem_max`); beyond it,
    /// `send_request` / `send_response` fail with `ApiError::TxBufferFull`.
    pub wmem_max: u64,

    // --- Receiver (grants) ---
    /// Fixed per-message grant window in bytes; 0 = dynamic, `max_incoming / (active + 1)`.
    pub window: u32,
    /// Cap on granted-but-unreceived bytes across all incoming messages.
    pub max_incoming: u32,
    /// Most messages granted to at once (at most 8).
    pub max_overcommit: u8,
    /// Bytes granted by each FIFO (anti-starvation) grant.
    pub fifo_grant_increment: u32,
    /// Thousandths of `link_mbps` reserved for FIFO grants (at most 500).
    pub grant_fifo_fraction: u32,

    // --- Priorities ---
    /// Priority levels in use (1..=8). Control packets use the highest.
    pub num_priorities: u8,
    /// This receiver's unscheduled cutoffs: entry i is the largest message that senders should
    /// send at level i; the first entry >= 1,000,000 marks the lowest unscheduled level (it
    /// takes messages of any length, even past 1,000,000 bytes with a raised
    /// `max_message_length`), and the levels below it carry scheduled data. Entry 0 is
    /// treated as infinity.
    pub unsched_cutoffs: [u32; MAX_PRIORITIES as usize],
    /// Version of `unsched_cutoffs`, echoed by senders; change it when the cutoffs change.
    pub cutoff_version: u16,

    // --- Timers (in ticks) ---
    /// Length of a timer tick in µs (the module's timer runs every millisecond).
    pub tick_usecs: u32,
    /// Silent ticks before the first RESEND.
    pub resend_ticks: u32,
    /// Ticks between RESENDs.
    pub resend_interval: u32,
    /// Silent ticks before an RPC is abandoned.
    pub timeout_ticks: u32,
    /// Ticks after a response is sent before the server asks for an ACK.
    pub request_ack_ticks: u32,
    /// Ticks a server keeps a response its client is not done with before it forgets the
    /// RPC: asking for an ACK (NEED_ACK every tick) once it is sent, or waiting silently for
    /// grants for the rest of it. Not in the module, which waits forever: this bounds the
    /// memory a vanished client can pin.
    pub ack_timeout_ticks: u32,

    // --- Limits against hostile or broken peers ---
    /// Longest message sent or accepted, 1..=2^31-1. The module's limit, 1,000,000
    /// (`HOMA_MAX_MESSAGE_LENGTH`), is the default; a peer that has not raised it too rejects
    /// longer messages, so raise it only among endpoints configured alike (e.g. a simulation
    /// of the paper's workloads, whose messages reach 30 MB).
    pub max_message_length: u32,
    /// Peers tracked at once; packets that would need another are dropped and counted.
    pub max_peers: u32,
    /// Server RPCs one peer may hold open on this endpoint.
    pub max_rpcs_per_peer: u32,
    /// Bytes of incoming messages being reassembled at once, across all RPCs. A message is
    /// accepted only if its whole length fits; its buffer is allocated then, never before.
    pub max_rx_bytes: u64,
    /// Holes one message's reassembly may track; a packet needing more is dropped (the
    /// sender resends it later).
    pub max_gaps: u32,
    /// Control packets waiting for `poll_transmit`; further ones are dropped and counted.
    /// A driver that hands in a batch of packets before draining needs room for what the
    /// batch causes (homa-io: a receive batch holds up to 32 datagrams of up to 64 packets).
    pub max_pending_control: u32,

    /// The first id this endpoint gives a request (then +2 each). The module numbers RPCs
    /// per host; several endpoints sharing one address toward the same servers (raw IP
    /// sockets of one host) need disjoint ranges, e.g. a random even start each.
    pub first_client_id: u64,

    /// Seed for hashing (the core never reads an RNG or the environment).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            unsched_bytes: 40_000,
            mtu: 1500,
            outer_header_bytes: 20,
            link_mbps: 25_000,
            max_nic_est_backlog_usecs: 5,
            pacer_fifo_fraction: 50,
            defer_min_bytes: 1000,
            wmem_max: 100_000_000,
            window: 0,
            max_incoming: 400_000,
            max_overcommit: 8,
            fifo_grant_increment: 50_000,
            grant_fifo_fraction: 50,
            num_priorities: 8,
            unsched_cutoffs: [0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200],
            cutoff_version: 1,
            tick_usecs: 1000,
            resend_ticks: 5,
            resend_interval: 5,
            timeout_ticks: 100,
            request_ack_ticks: 2,
            ack_timeout_ticks: 1000,
            max_message_length: MAX_MESSAGE_LENGTH,
            max_peers: 10_000,
            max_rpcs_per_peer: 10_000,
            max_rx_bytes: 1 << 30,
            max_gaps: 1024,
            max_pending_control: 65_536,
            first_client_id: 2,
            seed: 0,
        }
    }
}

/// A configuration value out of range, with the field's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The `Config` field at fault.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config `{}`: {}", self.field, self.reason)
    }
}

impl core::error::Error for ConfigError {}

fn check(ok: bool, field: &'static str, reason: &'static str) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError { field, reason }) }
}

impl Config {
    /// Checks every value; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let max_payload = self
            .mtu
            .checked_sub(self.outer_header_bytes)
            .and_then(|homa| homa.checked_sub(wire::data::HEADER_LEN as u32));
        check(
            max_payload.is_some_and(|p| p > 0)
                && self.mtu >= self.outer_header_bytes.saturating_add(80),
            "mtu",
            "too small for a DATA header (56 bytes) plus payload, or an 80-byte ACK",
        )?;
        check(self.mtu <= 65_535, "mtu", "must be at most 65535")?;
        check(self.link_mbps > 0, "link_mbps", "must be positive")?;
        check(self.pacer_fifo_fraction <= 1000, "pacer_fifo_fraction", "must be at most 1000")?;
        check(self.max_incoming > 0, "max_incoming", "must be positive")?;
        check(
            (1..=MAX_OVERCOMMIT).contains(&self.max_overcommit),
            "max_overcommit",
            "must be 1..=8",
        )?;
        check(self.grant_fifo_fraction <= 500, "grant_fifo_fraction", "must be at most 500")?;
        check(
            (1..=MAX_PRIORITIES).contains(&self.num_priorities),
            "num_priorities",
            "must be 1..=8",
        )?;
        let lowest_unsched = usize::from(self.max_sched_prio()) + 1;
        let unsched = self.unsched_cutoffs.get(lowest_unsched..usize::from(self.num_priorities));
        check(
            unsched.is_none_or(|levels| levels.windows(2).all(|w| w[0] >= w[1])),
            "unsched_cutoffs",
            "unscheduled levels must have non-increasing cutoffs (higher level, shorter messages)",
        )?;
        check(self.tick_usecs > 0, "tick_usecs", "must be positive")?;
        check(self.resend_ticks > 0, "resend_ticks", "must be positive")?;
        check(self.resend_interval > 0, "resend_interval", "must be positive")?;
        check(
            self.timeout_ticks > self.resend_ticks,
            "timeout_ticks",
            "must exceed resend_ticks, or nothing is ever resent",
        )?;
        check(
            self.ack_timeout_ticks > self.request_ack_ticks,
            "ack_timeout_ticks",
            "must exceed request_ack_ticks, or no NEED_ACK is ever sent",
        )?;
        check(self.max_peers > 0, "max_peers", "must be positive")?;
        check(self.max_rpcs_per_peer > 0, "max_rpcs_per_peer", "must be positive")?;
        check(
            (1..=i32::MAX as u32).contains(&self.max_message_length),
            "max_message_length",
            "must be 1..=2147483647",
        )?;
        check(
            self.max_rx_bytes >= u64::from(self.max_message_length),
            "max_rx_bytes",
            "must hold at least one message of max_message_length bytes",
        )?;
        check(
            self.wmem_max >= u64::from(self.max_message_length),
            "wmem_max",
            "must hold at least one message of max_message_length bytes",
        )?;
        check(self.max_pending_control > 0, "max_pending_control", "must be positive")?;
        check(
            self.first_client_id != 0 && self.first_client_id.is_multiple_of(2),
            "first_client_id",
            "client ids are even and not 0",
        )?;
        Ok(())
    }

    /// Message bytes in a full DATA packet.
    pub fn max_payload(&self) -> u32 {
        self.mtu - self.outer_header_bytes - wire::data::HEADER_LEN as u32
    }

    /// Largest Homa packet (header plus payload) this endpoint emits; `poll_transmit` buffers
    /// must be at least this long.
    pub fn max_packet_len(&self) -> usize {
        (self.mtu - self.outer_header_bytes) as usize
    }

    /// Highest level for scheduled data: one below the lowest unscheduled level
    /// (the module's read-only `max_sched_prio`).
    pub fn max_sched_prio(&self) -> u8 {
        (1..self.num_priorities)
            .rev()
            .find(|&i| self.unsched_cutoffs[usize::from(i)] >= MAX_MESSAGE_LENGTH)
            .map_or(0, |i| i - 1)
    }

    /// The cutoff table as sent in CUTOFFS: levels beyond `num_priorities` zeroed, entry 0
    /// as configured (receivers read it as infinity; the module sends its initial 0).
    pub fn advertised_cutoffs(&self) -> [u32; MAX_PRIORITIES as usize] {
        let mut c = self.unsched_cutoffs;
        for slot in c.iter_mut().skip(usize::from(self.num_priorities)) {
            *slot = 0;
        }
        c
    }

    /// Duration of one timer tick.
    pub fn tick(&self) -> Duration {
        u64::from(self.tick_usecs) * NANOS_PER_USEC
    }

    /// Bytes a Homa packet of `packet_len` bytes (common header on) takes on the link: plus
    /// the outer (IP) header and Ethernet framing. The pacer counts this for every packet.
    pub fn wire_bytes(&self, packet_len: usize) -> u32 {
        packet_len as u32 + self.outer_header_bytes + ETH_OVERHEAD
    }

    /// Time to put `wire_bytes` on the link.
    pub(crate) fn wire_time(&self, wire_bytes: u32) -> Duration {
        // bytes * 8 bits / (Mbit/s) = µs; in ns: bytes * 8000 / mbps.
        u64::from(wire_bytes) * 8000 / u64::from(self.link_mbps)
    }

    /// The grant window for `active` messages being granted to.
    pub(crate) fn grant_window(&self, active: usize) -> u32 {
        if self.window != 0 { self.window } else { self.max_incoming / (active as u32 + 1) }
    }

    /// Time between FIFO grants: the time to send `fifo_grant_increment` bytes at
    /// `grant_fifo_fraction` of the link rate. `None` when FIFO grants are off.
    pub(crate) fn fifo_grant_interval(&self) -> Option<Duration> {
        let fifo_mbps = u64::from(self.link_mbps) * u64::from(self.grant_fifo_fraction) / 1000;
        if fifo_mbps == 0 || self.fifo_grant_increment == 0 {
            return None;
        }
        Some(u64::from(self.fifo_grant_increment) * 8000 / fifo_mbps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_modules_and_valid() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.max_payload(), 1424);
        assert_eq!(c.max_sched_prio(), 3);
        assert_eq!(c.advertised_cutoffs(), [0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200]);
        assert_eq!(c.grant_window(1), 200_000);
        // 50,000 bytes at 5 % of 25 Gbit/s = 320 µs.
        assert_eq!(c.fifo_grant_interval(), Some(320_000));
        // A full 1,500-byte packet plus Ethernet framing at 25 Gbit/s.
        assert_eq!(c.wire_time(1542), 493);
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = |c: Config| c.validate().unwrap_err().field;
        assert_eq!(bad(Config { max_overcommit: 9, ..Config::default() }), "max_overcommit");
        assert_eq!(bad(Config { max_overcommit: 0, ..Config::default() }), "max_overcommit");
        assert_eq!(bad(Config { mtu: 99, ..Config::default() }), "mtu");
        assert_eq!(bad(Config { num_priorities: 9, ..Config::default() }), "num_priorities");
        let cutoffs = [0, 0, 0, 0, 1_000_000, 200, 2_800, 15_000];
        assert_eq!(
            bad(Config { unsched_cutoffs: cutoffs, ..Config::default() }),
            "unsched_cutoffs"
        );
        assert_eq!(bad(Config { link_mbps: 0, ..Config::default() }), "link_mbps");
        assert_eq!(bad(Config { timeout_ticks: 5, ..Config::default() }), "timeout_ticks");
        assert_eq!(bad(Config { first_client_id: 3, ..Config::default() }), "first_client_id");
        assert_eq!(bad(Config { first_client_id: 0, ..Config::default() }), "first_client_id");
        let length = |max_message_length| Config { max_message_length, ..Config::default() };
        assert_eq!(bad(length(0)), "max_message_length");
        assert_eq!(bad(length(1 << 31)), "max_message_length");
        // The default max_rx_bytes (1 GiB) cannot hold a message of 2^31 - 1 bytes.
        assert_eq!(bad(length(i32::MAX as u32)), "max_rx_bytes");
        let big = Config { max_rx_bytes: 1 << 31, wmem_max: 1 << 31, ..length(i32::MAX as u32) };
        assert_eq!(big.validate(), Ok(()));
    }

    #[test]
    fn max_sched_prio_follows_the_cutoffs() {
        let one_level = Config { num_priorities: 1, ..Config::default() };
        assert_eq!(one_level.max_sched_prio(), 0);
        let c = Config {
            unsched_cutoffs: [0, 1_000_000, 500, 0, 0, 0, 0, 0],
            num_priorities: 3,
            ..Config::default()
        };
        assert_eq!(c.max_sched_prio(), 0);
        assert_eq!(c.advertised_cutoffs(), [0, 1_000_000, 500, 0, 0, 0, 0, 0]);
    }
}
