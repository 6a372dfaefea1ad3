//! [`RpcInfo`]: where one RPC stands, for diagnostics ([`Endpoint::rpcs`]).
//!
//! [`Endpoint::rpcs`]: crate::Endpoint::rpcs

use core::fmt;
use core::net::SocketAddr;

use super::{Rpc, State};
use crate::error::Grouped;

/// One RPC an endpoint holds, as [`Endpoint::rpcs`](crate::Endpoint::rpcs) shows it. Its
/// `Display` is one line for a log or a report, e.g. `client RPC 42 with 10.0.0.1:4000:
/// awaiting the response; request 1,000,000 B, all sent; silent 3 ticks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcInfo {
    /// The id the client gave it (even), the same on both sides.
    pub id: u64,
    /// The other side.
    pub peer: SocketAddr,
    /// Whether this endpoint is the client.
    pub client: bool,
    /// What it is doing.
    pub phase: Phase,
    /// This endpoint's message (the request on a client, the response on a server), once
    /// it exists: `done` counts bytes sent.
    pub outgoing: Option<Progress>,
    /// The peer's message, once a packet of it arrived: `done` counts bytes received.
    pub incoming: Option<Progress>,
    /// Ticks since the RPC last heard from its peer, while it waits on the peer.
    pub silent_ticks: u64,
}

/// What an RPC is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Client: sending the request (or waiting for grants to send the rest).
    SendingRequest,
    /// Client: the request is all sent; no byte of the response yet.
    AwaitingResponse,
    /// Client: receiving the response.
    ReceivingResponse,
    /// Server: receiving the request.
    ReceivingRequest,
    /// Server: the application has the request and has not answered yet.
    InService,
    /// Server: sending the response (or waiting for grants to send the rest).
    SendingResponse,
    /// Server: the response is all sent; waiting for the client's ACK.
    AwaitingAck,
}

impl Phase {
    /// In words, as `Display` shows it.
    pub fn describe(self) -> &'static str {
        match self {
            Phase::SendingRequest => "sending the request",
            Phase::AwaitingResponse => "awaiting the response",
            Phase::ReceivingResponse => "receiving the response",
            Phase::ReceivingRequest => "receiving the request",
            Phase::InService => "with the application",
            Phase::SendingResponse => "sending the response",
            Phase::AwaitingAck => "awaiting the ACK",
        }
    }
}

/// How far a message has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes in the message.
    pub length: u32,
    /// Bytes its receiver allows so far (unscheduled ones and grants).
    pub granted: u32,
    /// Bytes sent (our message) or received (the peer's).
    pub done: u32,
}

impl RpcInfo {
    pub(crate) fn of(x: &Rpc, tick: u64) -> RpcInfo {
        let outgoing = x.msgout.as_ref().map(|m| Progress {
            length: m.length,
            granted: m.granted,
            done: m.next_offset,
        });
        let incoming = x.msgin.as_ref().map(|m| Progress {
            length: m.length,
            granted: m.granted,
            done: m.received(),
        });
        let all_sent = outgoing.is_some_and(|m| m.done >= m.length);
        let phase = match (x.is_client(), x.state) {
            (true, State::Outgoing) if all_sent => Phase::AwaitingResponse,
            (true, State::Outgoing) => Phase::SendingRequest,
            (true, _) => Phase::ReceivingResponse,
            (false, State::Incoming) => Phase::ReceivingRequest,
            (false, State::InService) => Phase::InService,
            (false, State::Outgoing) if x.timer.done_tick.get().is_some() => Phase::AwaitingAck,
            (false, State::Outgoing) => Phase::SendingResponse,
        };
        let silent_ticks =
            if x.timer.worried { tick.saturating_sub(x.timer.silent_since) } else { 0 };
        RpcInfo {
            id: x.id & !1,
            peer: x.addr,
            client: x.is_client(),
            phase,
            outgoing,
            incoming,
            silent_ticks,
        }
    }
}

impl fmt::Display for RpcInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = if self.client { "client" } else { "server" };
        write!(f, "{side} RPC {} with {}: {}", self.id, self.peer, self.phase.describe())?;
        let (ours, theirs) =
            if self.client { ("request", "response") } else { ("response", "request") };
        for (what, verb, m) in [(ours, "sent", self.outgoing), (theirs, "received", self.incoming)]
        {
            let Some(m) = m else { continue };
            write!(f, "; {what} {} B, ", Grouped(m.length.into()))?;
            if m.done >= m.length {
                write!(f, "all {verb}")?;
            } else {
                write!(f, "{} {verb}", Grouped(m.done.into()))?;
                if m.granted < m.length {
                    write!(f, ", {} granted", Grouped(m.granted.into()))?;
                }
            }
        }
        if self.silent_ticks > 0 {
            write!(f, "; silent {} ticks", self.silent_ticks)?;
        }
        Ok(())
    }
}
