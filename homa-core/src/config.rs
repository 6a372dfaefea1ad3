//! Tunables, named and defaulted as the Linux module's sysctls (`net.homa.*`, spec §2.7),
//! plus the limits that keep memory bounded whatever peers send.

use core::fmt;

use alloc::string::String;

use crate::time::{Duration, NANOS_PER_USEC};
use crate::value::{Map, Value};
use crate::wire::{self, MAX_MESSAGE_LENGTH, MAX_PRIORITIES};

/// Bytes of Ethernet framing per packet the pacer counts on top of the IP packet (preamble,
/// header, FCS and inter-frame gap: the module's `HOMA_ETH_OVERHEAD`).
pub const ETH_OVERHEAD: u32 = 42;
/// Most RPCs the grant scheduler grants to at once (`HOMA_MAX_GRANTS`).
pub const MAX_OVERCOMMIT: u8 = 8;

/// Declares `Config`, its `Default` and [`FIELDS`] from one list: each field's doc comment,
/// name, type, default and bounds are written once, and every binding reads them from the
/// table.
macro_rules! config {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $ty:tt = $default:expr, $min:expr, $max:expr;
    )*) => {
        /// Configuration of one [`Endpoint`](crate::Endpoint). Build it with struct update
        /// syntax from [`Config::default`]; [`Config::validate`] (run by `Endpoint::new`)
        /// explains any bad value. [`FIELDS`] describes every field (name, type, doc,
        /// bounds) for bindings and tools.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Config {
            $( $(#[doc = $doc])* pub $name: $ty, )*
        }

        impl Default for Config {
            fn default() -> Config {
                Config { $( $name: $default, )* }
            }
        }

        /// Every `Config` field, in declaration order.
        pub const FIELDS: &[Field] = &[$(
            Field {
                name: stringify!($name),
                doc: &[$($doc),*],
                kind: config!(@kind $ty),
                min: $min,
                max: $max,
                get: |c| config!(@get $ty, c.$name),
                set: |c, v| {
                    c.$name = config!(@set $ty, stringify!($name), v, $min, $max)?;
                    Ok(())
                },
            },
        )*];
    };
    (@kind [u32; 8]) => { Kind::Cutoffs };
    (@kind u8) => { Kind::U8 };
    (@kind u16) => { Kind::U16 };
    (@kind u32) => { Kind::U32 };
    (@kind u64) => { Kind::U64 };
    (@get [u32; 8], $e:expr) => { Value::from($e) };
    (@get $ty:tt, $e:expr) => { Value::from($e) };
    (@set [u32; 8], $name:expr, $v:expr, $min:expr, $max:expr) => {
        cutoffs_from($name, $v, $min, $max)
    };
    (@set $ty:tt, $name:expr, $v:expr, $min:expr, $max:expr) => {
        int_from($name, $v, $min, $max).map(|n| n as $ty)
    };
}

config! {
    // --- Sender ---
    /// Bytes of each message sent before any grant arrives (announced in DATA `incoming`).
    unsched_bytes: u32 = 40_000, 0, u32::MAX as u64;
    /// Largest IP packet (the route MTU), for packetisation.
    mtu: u32 = 1500, 1, 65_535;
    /// Bytes of headers below Homa in every packet: 20 for raw IPv4, 40 for raw IPv6, 28 for
    /// UDP over IPv4, 48 for UDP over IPv6. Payload per DATA = `mtu - outer_header_bytes - 56`.
    outer_header_bytes: u32 = 20, 0, 65_535;
    /// Uplink speed in Mbit/s, for the pacer.
    link_mbps: u32 = 25_000, 1, u32::MAX as u64;
    /// The pacer holds data back while the estimated NIC queue exceeds this many µs.
    max_nic_est_backlog_usecs: u32 = 5, 0, u32::MAX as u64;
    /// Full packets the pacer releases per wake-up: the estimated NIC queue may reach the
    /// larger of `max_nic_est_backlog_usecs` and two batches, and a throttled sender is due
    /// again once a batch has drained, so a driver wakes once a batch, not once a packet
    /// (the module's pacer is a kernel thread that polls). 0 = the module's behaviour.
    pacer_batch_packets: u32 = 8, 0, 1024;
    /// Thousandths of pacer picks that go to the oldest message instead of the shortest.
    pacer_fifo_fraction: u32 = 50, 0, 1000;
    /// Messages with at most this many bytes left are never held back by the pacer.
    defer_min_bytes: u32 = 1000, 0, u32::MAX as u64;
    /// Bytes of outgoing messages an endpoint holds at once (`wmem_max`); beyond it,
    /// `send_request` / `send_response` fail with `ApiError::TxBufferFull`.
    wmem_max: u64 = 100_000_000, 1, u64::MAX;

    // --- Receiver (grants) ---
    /// Fixed per-message grant window in bytes; 0 = dynamic, `max_incoming / (active + 1)`.
    window: u32 = 0, 0, u32::MAX as u64;
    /// Cap on the bytes the messages being granted to still expect (granted, unscheduled
    /// bytes included, and not received; not those a silent sender was asked to resend);
    /// 0 = sized for `link_mbps`, see [`Config::incoming_cap`].
    max_incoming: u32 = 0, 0, u32::MAX as u64;
    /// Most messages granted to at once (at most 8).
    max_overcommit: u8 = 8, 1, MAX_OVERCOMMIT as u64;
    /// Most messages of one peer granted to at once. A peer's messages share its uplink, so
    /// granting several of them at once interleaves them (each finishes later) and takes
    /// slots from other peers. A message in its last round trip (`unsched_bytes` left to
    /// receive) hands its peer's turn to the next, so the next one's data follows without
    /// a gap. The paper's scheduler granted one message per sender, as did the module's
    /// former sysctl `max_rpcs_per_peer` (default 1; unlike [`Config::max_rpcs_per_peer`],
    /// a grant limit); today's module allows `max_overcommit`.
    max_active_per_peer: u8 = 1, 1, MAX_OVERCOMMIT as u64;
    /// Bytes granted by each FIFO (anti-starvation) grant.
    fifo_grant_increment: u32 = 50_000, 0, u32::MAX as u64;
    /// Thousandths of `link_mbps` reserved for FIFO grants (at most 500).
    grant_fifo_fraction: u32 = 50, 0, 500;

    // --- Priorities ---
    /// Priority levels in use (1..=8). Control packets use the highest.
    num_priorities: u8 = 8, 1, MAX_PRIORITIES as u64;
    /// This receiver's unscheduled cutoffs: entry i is the largest message that senders should
    /// send at level i; the first entry >= 1,000,000 marks the lowest unscheduled level (it
    /// takes messages of any length, even past 1,000,000 bytes with a raised
    /// `max_message_length`), and the levels below it carry scheduled data. Entry 0 is
    /// treated as infinity.
    unsched_cutoffs: [u32; 8] = [0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200], 0, u32::MAX as u64;
    /// Version of `unsched_cutoffs`, echoed by senders; change it when the cutoffs change.
    cutoff_version: u16 = 1, 0, u16::MAX as u64;

    // --- Timers (in ticks) ---
    /// Length of a timer tick in µs (the module's timer runs every millisecond).
    tick_usecs: u32 = 1000, 1, u32::MAX as u64;
    /// Silent ticks before the first RESEND.
    resend_ticks: u32 = 5, 1, u32::MAX as u64;
    /// Ticks between RESENDs; a server asking for a silent request doubles it after each.
    resend_interval: u32 = 5, 1, u32::MAX as u64;
    /// Silent ticks before an RPC is abandoned. Silence is counted in ticks the endpoint
    /// ran (a stalled process does not count the time it was stopped).
    timeout_ticks: u32 = 100, 1, u32::MAX as u64;
    /// Ticks after a response is sent before the server asks for an ACK.
    request_ack_ticks: u32 = 2, 0, u32::MAX as u64;
    /// Ticks a server keeps a response its client is not done with before it forgets the
    /// RPC: asking for an ACK (NEED_ACK every tick) once it is sent, or waiting silently for
    /// grants for the rest of it. Not in the module, which waits forever: this bounds the
    /// memory a vanished client can pin.
    ack_timeout_ticks: u32 = 1000, 1, u32::MAX as u64;

    // --- Limits against hostile or broken peers ---
    /// Longest message sent or accepted. The module's limit, 1,000,000
    /// (`HOMA_MAX_MESSAGE_LENGTH`), is the default; a peer that has not raised it too rejects
    /// longer messages, so raise it only among endpoints configured alike (e.g. a simulation
    /// of the paper's workloads, whose messages reach 30 MB).
    max_message_length: u32 = MAX_MESSAGE_LENGTH, 1, i32::MAX as u64;
    /// Peers tracked at once; packets that would need another are dropped and counted.
    max_peers: u32 = 10_000, 1, u32::MAX as u64;
    /// Server RPCs one peer may hold open on this endpoint.
    max_rpcs_per_peer: u32 = 10_000, 1, u32::MAX as u64;
    /// Bytes of incoming messages being reassembled at once, across all RPCs. A message is
    /// accepted only if its whole length fits; its buffer is allocated then, never before.
    max_rx_bytes: u64 = 1 << 30, 1, u64::MAX;
    /// Bytes one host (an IP address, from any of its ports) may make this endpoint hold at
    /// once: its messages being received, and the responses to its requests until it
    /// acknowledges them. A quarter of `max_rx_bytes`, so that one hostile or runaway host
    /// cannot take all the memory. A new message beyond it waits, as one beyond
    /// `max_rx_bytes` does (a request's client hears BUSY).
    max_bytes_per_host: u64 = 1 << 28, 1, u64::MAX;
    /// Holes one message's reassembly may track; a packet needing more is dropped (the
    /// sender resends it later).
    max_gaps: u32 = 1024, 0, u32::MAX as u64;
    /// Control packets waiting for `poll_transmit`; further ones are dropped and counted.
    /// A driver that hands in a batch of packets before draining needs room for what the
    /// batch causes (homa-io: a receive batch holds up to 32 datagrams of up to 64 packets).
    max_pending_control: u32 = 65_536, 1, u32::MAX as u64;

    /// The first id this endpoint gives a request (even, then +2 each). The module numbers
    /// RPCs per host; several endpoints sharing one address toward the same servers (raw IP
    /// sockets of one host) need disjoint ranges, e.g. a random even start each.
    first_client_id: u64 = 2, 2, u64::MAX - 1;

    /// Seed for hashing (the core never reads an RNG or the environment).
    seed: u64 = 0, 0, u64::MAX;
}

/// The type of a [`Field`]'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An integer stored as a `u8`.
    U8,
    /// An integer stored as a `u16`.
    U16,
    /// An integer stored as a `u32`.
    U32,
    /// An integer stored as a `u64`.
    U64,
    /// Eight `u32`s: [`Config::unsched_cutoffs`].
    Cutoffs,
}

/// One `Config` field, for bindings and tools that set fields by name ([`FIELDS`]).
#[derive(Clone, Copy)]
pub struct Field {
    /// The field's name (the module's sysctl name, where it has one).
    pub name: &'static str,
    /// The lines of its doc comment (each with the space that follows `///`).
    pub doc: &'static [&'static str],
    /// The type of its values.
    pub kind: Kind,
    /// Bounds of its values (of each entry, for `Cutoffs`). [`Config::validate`] also checks
    /// rules between fields.
    pub min: u64,
    /// Largest value it takes (of each entry, for `Cutoffs`).
    pub max: u64,
    /// Its value in `config`.
    pub get: fn(&Config) -> Value,
    /// Sets it from `value` (an integer within the bounds, or for `Cutoffs` a list of 8);
    /// anything else changes nothing and says why.
    pub set: fn(&mut Config, &Value) -> Result<(), ConfigError>,
}

impl fmt::Debug for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Field")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish()
    }
}

impl Field {
    /// The field named `name`.
    pub fn named(name: &str) -> Option<&'static Field> {
        FIELDS.iter().find(|f| f.name == name)
    }

    /// Whether `value` is one this field takes (its kind, within its bounds).
    pub fn check(&self, value: &Value) -> Result<(), ConfigError> {
        match self.kind {
            Kind::Cutoffs => cutoffs_from(self.name, value, self.min, self.max).map(drop),
            _ => int_from(self.name, value, self.min, self.max).map(drop),
        }
    }
}

fn int_from(field: &'static str, v: &Value, min: u64, max: u64) -> Result<u64, ConfigError> {
    let Value::Int(i) = *v else {
        return Err(ConfigError { field, problem: Problem::NotAnInteger });
    };
    u64::try_from(i)
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or(ConfigError { field, problem: Problem::OutOfRange { min, max } })
}

fn cutoffs_from(
    field: &'static str,
    v: &Value,
    min: u64,
    max: u64,
) -> Result<[u32; 8], ConfigError> {
    let list = v
        .as_list()
        .filter(|l| l.len() == 8)
        .ok_or(ConfigError { field, problem: Problem::Rule("must be a list of 8 integers") })?;
    let mut out = [0u32; 8];
    for (slot, x) in out.iter_mut().zip(list) {
        *slot = int_from(field, x, min, max)? as u32;
    }
    Ok(out)
}

/// Sets the fields `fields` names (by [`Field::name`]) on `config`, then checks the rules
/// between fields ([`Config::validate`]): how bindings take a configuration from their
/// language's objects.
pub fn apply(config: &mut Config, fields: &Map) -> Result<(), ApplyError> {
    for (name, value) in fields.iter() {
        let field = Field::named(name).ok_or_else(|| ApplyError::Unknown(name.into()))?;
        (field.set)(config, value).map_err(ApplyError::Invalid)?;
    }
    config.validate().map_err(ApplyError::Invalid)
}

/// Why [`apply`] refused a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// No field has this name.
    Unknown(String),
    /// A value out of range, or a rule between fields broken.
    Invalid(ConfigError),
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::Unknown(name) => {
                write!(f, "unknown option {name:?}; the options are ")?;
                for (i, field) in FIELDS.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}", field.name)?;
                }
                Ok(())
            }
            ApplyError::Invalid(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for ApplyError {}

/// A configuration value out of range, with the field's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The `Config` field at fault.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a [`ConfigError`]'s field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Outside the field's bounds (inclusive; [`Field::min`], [`Field::max`]).
    OutOfRange {
        /// Smallest value allowed.
        min: u64,
        /// Largest value allowed.
        max: u64,
    },
    /// Set from a value that is not an integer.
    NotAnInteger,
    /// It breaks a rule, in words (one that involves other fields, or more than bounds).
    Rule(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config `{}`: ", self.field)?;
        match self.problem {
            Problem::OutOfRange { min, max } => {
                write!(f, "must be between {} and {}", Grouped(min), Grouped(max))
            }
            Problem::NotAnInteger => f.write_str("must be an integer"),
            Problem::Rule(reason) => f.write_str(reason),
        }
    }
}

impl core::error::Error for ConfigError {}

/// A number with thousands separators from 10,000 on (as people write them).
struct Grouped(u64);

impl fmt::Display for Grouped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn groups(n: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if n < 1000 {
                return write!(f, "{n}");
            }
            groups(n / 1000, f)?;
            write!(f, ",{:03}", n % 1000)
        }
        if self.0 < 10_000 { write!(f, "{}", self.0) } else { groups(self.0, f) }
    }
}

fn check(ok: bool, field: &'static str, reason: &'static str) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError { field, problem: Problem::Rule(reason) }) }
}

impl Config {
    /// Checks every value; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for f in FIELDS {
            f.check(&(f.get)(self))?;
        }
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
        let lowest_unsched = usize::from(self.max_sched_prio()) + 1;
        let unsched = self.unsched_cutoffs.get(lowest_unsched..usize::from(self.num_priorities));
        check(
            unsched.is_none_or(|levels| levels.windows(2).all(|w| w[0] >= w[1])),
            "unsched_cutoffs",
            "unscheduled levels must have non-increasing cutoffs (higher level, shorter messages)",
        )?;
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
        check(
            self.first_client_id.is_multiple_of(2),
            "first_client_id",
            "must be even (client ids are even; 0 is not one)",
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

    /// The level this receiver's cutoffs give a message of `length` unscheduled bytes.
    pub(crate) fn unsched_level(&self, length: u32) -> u8 {
        let cutoffs = self.advertised_cutoffs();
        (1..self.num_priorities).rev().find(|&i| cutoffs[usize::from(i)] >= length).unwrap_or(0)
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

    /// Time a batch of `pacer_batch_packets` full packets takes on the link.
    pub(crate) fn pacer_batch(&self) -> Duration {
        let full = self.wire_bytes(self.max_packet_len());
        self.wire_time(full).saturating_mul(u64::from(self.pacer_batch_packets))
    }

    /// The cap on granted-but-unreceived bytes: `max_incoming`, or when that is 0, 128 µs
    /// of `link_mbps` (the module's 400,000 bytes at 25 Gbit/s) but at least 60,000 bytes.
    /// Granted bytes queue in front of the receiver, at the last switch and in its socket,
    /// FIFO with everything else: on a slower link the module's 400,000 bytes would be
    /// milliseconds of queue. The floor (480 µs at 1 Gbit/s) keeps a busy host's user-space
    /// round trip covered on slow links.
    pub fn incoming_cap(&self) -> u32 {
        if self.max_incoming != 0 {
            return self.max_incoming;
        }
        let link_time = u64::from(self.link_mbps) * 128 / 8;
        link_time.clamp(60_000, u64::from(u32::MAX)) as u32
    }

    /// The grant window for `active` messages being granted to.
    pub(crate) fn grant_window(&self, active: usize) -> u32 {
        if self.window != 0 { self.window } else { self.incoming_cap() / (active as u32 + 1) }
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
    use alloc::string::ToString;

    #[test]
    fn apply_sets_fields_by_name_and_names_what_it_refuses() {
        let mut c = Config::default();
        let fields: Map = [("mtu", Value::from(9000u32)), ("timeout_ticks", Value::from(7u32))]
            .into_iter()
            .collect();
        apply(&mut c, &fields).unwrap();
        assert_eq!((c.mtu, c.timeout_ticks), (9000, 7));
        let unknown: Map = [("no_such", Value::from(1u32))].into_iter().collect();
        let e = apply(&mut c, &unknown).unwrap_err();
        assert_eq!(e, ApplyError::Unknown("no_such".into()));
        let text = e.to_string();
        assert!(text.starts_with("unknown option \"no_such\"; the options are "), "{text}");
        assert!(text.contains(", mtu,"), "{text}");
        let bad: Map = [("mtu", Value::from(10u32))].into_iter().collect();
        assert!(matches!(apply(&mut c, &bad), Err(ApplyError::Invalid(e)) if e.field == "mtu"));
    }

    #[test]
    fn the_incoming_cap_follows_the_link_unless_set() {
        let at = |link_mbps| Config { link_mbps, ..Config::default() }.incoming_cap();
        assert_eq!(at(25_000), 400_000, "the module's default at its link speed");
        assert_eq!(at(100_000), 1_600_000);
        assert_eq!(at(10_000), 160_000);
        assert_eq!(at(1_000), 60_000, "floor");
        let set = Config { link_mbps: 1_000, max_incoming: 400_000, ..Config::default() };
        assert_eq!(set.incoming_cap(), 400_000);
        assert_eq!(set.grant_window(1), 200_000);
    }

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
    fn the_field_table_reads_and_sets_every_field_by_name() {
        let mut c = Config::default();
        for f in FIELDS {
            let v = (f.get)(&c);
            (f.set)(&mut c, &v).unwrap();
            assert!(!f.doc.is_empty(), "{} has a doc comment", f.name);
        }
        assert_eq!(c, Config::default(), "get then set changes nothing");
        assert_eq!(FIELDS.len(), 33);
        let overcommit = Field::named("max_overcommit").unwrap();
        (overcommit.set)(&mut c, &Value::Int(3)).unwrap();
        assert_eq!(c.max_overcommit, 3);
        let e = (overcommit.set)(&mut c, &Value::Int(9)).unwrap_err();
        assert_eq!(e.problem, Problem::OutOfRange { min: 1, max: 8 });
        assert_eq!(e.to_string(), "invalid config `max_overcommit`: must be between 1 and 8");
        assert_eq!(c.max_overcommit, 3, "a refused value changes nothing");
        let e = (overcommit.set)(&mut c, &Value::from("3")).unwrap_err();
        assert_eq!(e.problem, Problem::NotAnInteger);
        let length = Field::named("max_message_length").unwrap();
        let e = (length.set)(&mut c, &Value::Int(1 << 31)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config `max_message_length`: must be between 1 and 2,147,483,647"
        );
        let cutoffs = Field::named("unsched_cutoffs").unwrap();
        assert_eq!(cutoffs.kind, Kind::Cutoffs);
        (cutoffs.set)(&mut c, &Value::from([0u32, 1_000_000, 500, 0, 0, 0, 0, 0])).unwrap();
        assert_eq!(c.unsched_cutoffs[2], 500);
        assert!((cutoffs.set)(&mut c, &Value::from([1u32; 7])).is_err());
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
