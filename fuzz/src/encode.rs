//! The inverse of the decoding `#[derive(Arbitrary)]` gives the targets' inputs (arbitrary
//! 1.x), so seed inputs can be written as values rather than bytes. Tests only.
//!
//! The format: integers are their little-endian bytes; a `bool` is a byte whose low bit is
//! the value; `Option<T>` is a `bool` then the `T`; a `Vec<T>` inside a struct is
//! (`true`, `T`)* then `false`; an array is its elements; a struct is its fields in order; an
//! enum is a `u32` tag `x` choosing variant `(x * variants) >> 32`, then that variant's fields.
//! A target's input is its `Setup` followed by its ops, back to back. The round-trip test in
//! `seeds` decodes every seed and compares, so a change to a type without a change here fails.

use crate::common::{MsgLen, Step};
use crate::{endpoint_packets as ep, endpoint_pair as pair, grant_model as gm};

pub(crate) trait Encode {
    fn encode(&self, out: &mut Vec<u8>);
}

/// The tag selecting variant `index` of an enum with `variants` variants.
fn tag(out: &mut Vec<u8>, index: u64, variants: u64) {
    let x = (index << 32).div_ceil(variants);
    debug_assert_eq!((x * variants) >> 32, index);
    out.extend_from_slice(&(x as u32).to_le_bytes());
}

macro_rules! ints {
    ($($t:ty)*) => {$(
        impl Encode for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
ints!(u8 u16 u32 u64);

impl Encode for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.is_some().encode(out);
        if let Some(x) = self {
            x.encode(out);
        }
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        for x in self {
            true.encode(out);
            x.encode(out);
        }
        false.encode(out);
    }
}

impl<T: Encode, const N: usize> Encode for [T; N] {
    fn encode(&self, out: &mut Vec<u8>) {
        for x in self {
            x.encode(out);
        }
    }
}

impl<A: Encode, B: Encode> Encode for (A, B) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
    }
}

/// Encodes each field in order.
macro_rules! fields {
    ($out:ident; $($f:expr),* $(,)?) => {{ $($f.encode($out);)* }};
}

impl Encode for MsgLen {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            MsgLen::Bytes(n) => fields!(out; tag_of(0, 4), n),
            MsgLen::Max => tag(out, 1, 4),
            MsgLen::Zero => tag(out, 2, 4),
            MsgLen::TooLong => tag(out, 3, 4),
        }
    }
}

/// A tag as a value with `Encode`, for use in `fields!`.
struct Tag(u64, u64);

fn tag_of(index: u64, variants: u64) -> Tag {
    Tag(index, variants)
}

impl Encode for Tag {
    fn encode(&self, out: &mut Vec<u8>) {
        tag(out, self.0, self.1);
    }
}

impl Encode for Step {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Step::Nanos(n) => fields!(out; tag_of(0, 3), n),
            Step::Micros(n) => fields!(out; tag_of(1, 3), n),
            Step::Millis(n) => fields!(out; tag_of(2, 3), n),
        }
    }
}

// ---------------------------------------------------------------- endpoint_packets

impl Encode for ep::Setup {
    fn encode(&self, out: &mut Vec<u8>) {
        let ep::Setup {
            max_peers,
            max_rpcs_per_peer,
            max_rx_bytes,
            max_gaps,
            max_pending_control,
            unsched_bytes,
            window,
            max_incoming,
            max_overcommit,
            num_priorities,
            grant_fifo_fraction,
            timers,
            mtu,
        } = self;
        fields!(out; max_peers, max_rpcs_per_peer, max_rx_bytes, max_gaps, max_pending_control,
            unsched_bytes, window, max_incoming, max_overcommit, num_priorities,
            grant_fifo_fraction, timers, mtu);
    }
}

impl Encode for ep::Op {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 14;
        match self {
            ep::Op::Packet { from, packet } => fields!(out; tag_of(0, N), from, packet),
            ep::Op::Raw { from, bytes } => fields!(out; tag_of(1, N), from, bytes),
            ep::Op::Request { to, dport, len, cookie } => {
                fields!(out; tag_of(2, N), to, dport, len, cookie)
            }
            ep::Op::Respond { pick, len } => fields!(out; tag_of(3, N), pick, len),
            ep::Op::Discard { pick } => fields!(out; tag_of(4, N), pick),
            ep::Op::Abort { pick } => fields!(out; tag_of(5, N), pick),
            ep::Op::Unreachable { to, port } => fields!(out; tag_of(6, N), to, port),
            ep::Op::Rebind { server } => fields!(out; tag_of(7, N), server),
            ep::Op::Advance(step) => fields!(out; tag_of(8, N), step),
            ep::Op::Timeout => tag(out, 9, N),
            ep::Op::Deadline => tag(out, 10, N),
            ep::Op::Rewind(us) => fields!(out; tag_of(11, N), us),
            ep::Op::Hold => tag(out, 12, N),
            ep::Op::Release => tag(out, 13, N),
        }
    }
}

impl Encode for ep::PacketSpec {
    fn encode(&self, out: &mut Vec<u8>) {
        let ep::PacketSpec { sport, dport, id, body, flip } = self;
        fields!(out; sport, dport, id, body, flip);
    }
}

impl Encode for ep::Port {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ep::Port::Server => tag(out, 0, 4),
            ep::Port::Ephemeral => tag(out, 1, 4),
            ep::Port::Client => tag(out, 2, 4),
            ep::Port::Other(p) => fields!(out; tag_of(3, 4), p),
        }
    }
}

impl Encode for ep::Id {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ep::Id::Ours(n) => fields!(out; tag_of(0, 3), n),
            ep::Id::Theirs(n) => fields!(out; tag_of(1, 3), n),
            ep::Id::Raw(x) => fields!(out; tag_of(2, 3), x),
        }
    }
}

impl Encode for ep::Offset {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ep::Offset::Packet(n) => fields!(out; tag_of(0, 2), n),
            ep::Offset::Raw(x) => fields!(out; tag_of(1, 2), x),
        }
    }
}

impl Encode for ep::AckSpec {
    fn encode(&self, out: &mut Vec<u8>) {
        fields!(out; self.id, self.port);
    }
}

impl Encode for ep::BodySpec {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 9;
        match self {
            ep::BodySpec::Data {
                length,
                offset,
                payload,
                incoming,
                ack,
                cutoff_version,
                retransmit,
                in_sequence,
            } => fields!(out; tag_of(0, N), length, offset, payload, incoming, ack,
                cutoff_version, retransmit, in_sequence),
            ep::BodySpec::Grant { offset, priority } => {
                fields!(out; tag_of(1, N), offset, priority)
            }
            ep::BodySpec::Resend { offset, length, priority } => {
                fields!(out; tag_of(2, N), offset, length, priority)
            }
            ep::BodySpec::RpcUnknown => tag(out, 3, N),
            ep::BodySpec::Busy => tag(out, 4, N),
            ep::BodySpec::Cutoffs { cutoffs, version } => {
                fields!(out; tag_of(5, N), cutoffs, version)
            }
            ep::BodySpec::Freeze => tag(out, 6, N),
            ep::BodySpec::NeedAck => tag(out, 7, N),
            ep::BodySpec::Ack { count, acks } => fields!(out; tag_of(8, N), count, acks),
        }
    }
}

// ---------------------------------------------------------------- endpoint_pair

impl Encode for pair::Setup {
    fn encode(&self, out: &mut Vec<u8>) {
        let pair::Setup {
            unsched_bytes,
            window,
            max_overcommit,
            timers,
            mtu,
            num_priorities,
            auto_respond,
            seed,
        } = self;
        fields!(out; unsched_bytes, window, max_overcommit, timers, mtu, num_priorities,
            auto_respond, seed);
    }
}

impl Encode for pair::Dir {
    fn encode(&self, out: &mut Vec<u8>) {
        tag(out, *self as u64, 2);
    }
}

impl Encode for pair::Corruption {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            pair::Corruption::Truncate(n) => fields!(out; tag_of(0, 3), n),
            pair::Corruption::BadType(n) => fields!(out; tag_of(1, 3), n),
            pair::Corruption::Flip { at, xor } => fields!(out; tag_of(2, 3), at, xor),
        }
    }
}

impl Encode for pair::Op {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 12;
        match self {
            pair::Op::Call { len, cookie } => fields!(out; tag_of(0, N), len, cookie),
            pair::Op::Respond { pick, len } => fields!(out; tag_of(1, N), pick, len),
            pair::Op::Discard { pick } => fields!(out; tag_of(2, N), pick),
            pair::Op::Abort { pick } => fields!(out; tag_of(3, N), pick),
            pair::Op::Deliver { dir, pick } => fields!(out; tag_of(4, N), dir, pick),
            pair::Op::Drop { dir, pick } => fields!(out; tag_of(5, N), dir, pick),
            pair::Op::Duplicate { dir, pick } => fields!(out; tag_of(6, N), dir, pick),
            pair::Op::Corrupt { dir, pick, how } => fields!(out; tag_of(7, N), dir, pick, how),
            pair::Op::Flush => tag(out, 8, N),
            pair::Op::Pump { rounds, loss, dup, reorder } => {
                fields!(out; tag_of(9, N), rounds, loss, dup, reorder)
            }
            pair::Op::Advance(step) => fields!(out; tag_of(10, N), step),
            pair::Op::Deadline => tag(out, 11, N),
        }
    }
}

// ---------------------------------------------------------------- grant_model

impl Encode for gm::Setup {
    fn encode(&self, out: &mut Vec<u8>) {
        fields!(out; self.max_overcommit, self.window, self.max_incoming, self.num_priorities);
    }
}

impl Encode for gm::Length {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            gm::Length::Short(n) => fields!(out; tag_of(0, 2), n),
            gm::Length::Long(n) => fields!(out; tag_of(1, 2), n),
        }
    }
}

impl Encode for gm::Chunk {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            gm::Chunk::Full => tag(out, 0, 2),
            gm::Chunk::Bytes(n) => fields!(out; tag_of(1, 2), n),
        }
    }
}

impl Encode for gm::Op {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 7;
        match self {
            gm::Op::Start { response, length, unsched, chunk } => {
                fields!(out; tag_of(0, N), response, length, unsched, chunk)
            }
            gm::Op::Send { msg, chunk } => fields!(out; tag_of(1, N), msg, chunk),
            gm::Op::Burst { msg, packets } => fields!(out; tag_of(2, N), msg, packets),
            gm::Op::Lose { msg, chunk } => fields!(out; tag_of(3, N), msg, chunk),
            gm::Op::Recover { msg } => fields!(out; tag_of(4, N), msg),
            gm::Op::Abort { msg } => fields!(out; tag_of(5, N), msg),
            gm::Op::RoundRobin { packets } => fields!(out; tag_of(6, N), packets),
        }
    }
}

/// A whole input: the setup, then the ops.
pub(crate) fn input<S: Encode, O: Encode>(setup: &S, ops: &[O]) -> Vec<u8> {
    let mut out = Vec::new();
    setup.encode(&mut out);
    for op in ops {
        op.encode(&mut out);
    }
    out
}
