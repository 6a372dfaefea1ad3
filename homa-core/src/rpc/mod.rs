//! RPCs: the state one endpoint keeps for each request/response exchange.
//!
//! A client RPC goes Outgoing (request being sent, then waiting) -> Incoming (response
//! arriving) -> gone, once the response is delivered. A server RPC goes Incoming (request
//! arriving) -> InService (the application has it) -> Outgoing (response being sent, then
//! kept until the client acknowledges it) -> gone.

mod info;
mod table;

use core::net::SocketAddr;

pub use info::{Phase, Progress, RpcInfo};
pub(crate) use table::{RpcRef, RpcTable};

use crate::msg::incoming::InMessage;
use crate::msg::outgoing::OutMessage;
use crate::peer::PeerId;
use crate::time::MaybeTick;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Sending our message (request on a client, response on a server); a client stays here
    /// until the first response packet arrives.
    Outgoing,
    /// Receiving the peer's message.
    Incoming,
    /// Server only: the request was delivered; waiting for the application's response.
    InService,
}

/// In order of use: the fields that nearly every access reads come first, so that with its
/// slot's generation they share one cache line (`RpcTable`); a simulation's RPCs are seldom
/// cached, and each line costs a miss.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Rpc {
    /// The id as this endpoint knows it: even on the client, odd on the server.
    pub(crate) id: u64,
    pub(crate) peer: PeerId,
    pub(crate) local_port: u16,
    pub(crate) remote_port: u16,
    pub(crate) state: State,
    /// In the sender's SRPT queue.
    pub(crate) tx_queued: bool,
    /// In the queue of RPCs with retransmissions waiting.
    pub(crate) resend_queued: bool,
    /// Known to the grant scheduler (active or waiting).
    pub(crate) grant_managed: bool,
    pub(crate) addr: SocketAddr,
    /// A DATA packet reads and writes its message and the timer's first fields, which
    /// share a line (`scripts/instructions lines`).
    pub(crate) msgin: Option<InMessage>,
    pub(crate) timer: TimerState,
    pub(crate) msgout: Option<OutMessage>,
    /// Client only: the application's tag, returned with the response or failure.
    pub(crate) cookie: u64,
}

/// Silent-tick accounting (spec §2.6), kept lazily: instead of counting ticks, remember the
/// tick at which the count was last zero. The fields every DATA, GRANT and BUSY resets
/// (`reset_silence`) come first, to share a cache line.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct TimerState {
    /// Tick at which silent_ticks was last reset (a packet arrived, or the RPC had no reason
    /// to worry). silent_ticks at tick T is `T - silent_since`.
    pub(crate) silent_since: u64,
    /// The downlink's count of ticks that held `held_level` back when silence began (see
    /// `downlink`).
    pub(crate) held_at: u64,
    /// The ticks excused for dropped input (`overload`) when silence began.
    pub(crate) excused_at: u64,
    /// Until when RPC_UNKNOWNs answer RESENDs sent before the last restart.
    pub(crate) stale_until: u64,
    /// RESEND points passed since `silent_since` (one RESEND each, when it may ask); for a
    /// server whose response is out, the NEED_ACKs sent.
    pub(crate) asked: u32,
    /// The level of the awaited bytes when silence began.
    pub(crate) held_level: u8,
    /// Restarts (RPC_UNKNOWN) since the last DATA, GRANT or BUSY; the first
    /// `RESTARTS_THAT_END_SILENCE` of them each start the silence over.
    pub(crate) restarts: u8,
    /// The RPC is owed data and counts silent ticks.
    pub(crate) worried: bool,
    /// The tick of the last restart.
    pub(crate) restarted_at: u64,
    /// The tick of the wake-up queued in the timer queue, if any.
    pub(crate) armed_tick: MaybeTick,
    /// Server: first tick after the response was fully sent (for NEED_ACK).
    pub(crate) done_tick: MaybeTick,
}

impl Rpc {
    pub(crate) fn is_client(&self) -> bool {
        crate::wire::is_client_id(self.id)
    }

    /// Bytes held for this RPC's messages (for `wmem_max` and `max_rx_bytes` accounting).
    pub(crate) fn tx_bytes(&self) -> u64 {
        self.msgout.as_ref().map_or(0, |m| u64::from(m.length))
    }

    pub(crate) fn rx_bytes(&self) -> u64 {
        self.msgin.as_ref().map_or(0, |m| u64::from(m.length))
    }
}
