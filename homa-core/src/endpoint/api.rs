//! The application's calls: requests, responses, aborts.

use alloc::vec::Vec;
use core::net::SocketAddr;

use crate::error::ApiError;
use crate::msg::Payload;
use crate::msg::outgoing::OutMessage;
use crate::rpc::{Rpc, RpcRef, State, TimerState};
use crate::time::Instant;
use crate::wire;

use super::{Endpoint, FailReason, ServerRpc};

impl Endpoint {
    /// Starts an RPC: sends `message` from local port `port` to Homa port `dest_port` at
    /// `dest`. Returns the RPC's id (even); the response or failure arrives as an
    /// [`Event`](super::Event) carrying `cookie`.
    pub fn send_request(
        &mut self,
        now: Instant,
        port: u16,
        dest: SocketAddr,
        dest_port: u16,
        message: impl Into<Payload>,
        cookie: u64,
    ) -> Result<u64, ApiError> {
        let now = now.as_nanos();
        // Checked before the deferred bookkeeping runs: a call that fails changes nothing.
        let payload = message.into();
        self.check_message(&payload)?;
        if port == 0 || !self.port_taken(port) {
            return Err(ApiError::PortNotBound(port));
        }
        if dest_port == 0 {
            return Err(ApiError::InvalidPort(dest_port));
        }
        self.settle_data();
        self.advance(now);
        let peer = self.peers.get_or_insert(dest, self.now).ok_or(ApiError::TooManyPeers)?;
        let id = self.next_client_id;
        // Wraps to 2 after u64::MAX - 1 (never 0, which means "no ack" on the wire).
        self.next_client_id = self.next_client_id.checked_add(2).unwrap_or(2);
        self.tx_bytes += payload.len() as u64;
        let birth = self.birth();
        self.peers.get_mut(peer).rpcs += 1;
        let r = self.rpcs.insert(|| Rpc {
            id,
            peer,
            addr: dest,
            local_port: port,
            remote_port: dest_port,
            state: State::Outgoing,
            cookie,
            msgout: Some(OutMessage::new(payload, self.config.unsched_bytes, birth)),
            msgin: None,
            timer: TimerState::default(),
            tx_queued: false,
            resend_queued: false,
            grant_managed: false,
        });
        self.queue_tx(r);
        self.refresh_worry(r);
        Ok(id)
    }

    /// Sends the response to a request delivered by [`Event::RequestReceived`].
    ///
    /// [`Event::RequestReceived`]: super::Event::RequestReceived
    pub fn send_response(
        &mut self,
        now: Instant,
        rpc: ServerRpc,
        message: impl Into<Payload>,
    ) -> Result<(), ApiError> {
        let now = now.as_nanos();
        // Checked before the deferred bookkeeping runs: a call that fails changes nothing.
        let payload = message.into();
        self.check_message(&payload)?;
        let r = self.rpcs.find_server(rpc.client, rpc.id).ok_or(ApiError::UnknownRpc(rpc.id))?;
        if self.rpcs.get(r).is_none_or(|x| x.state != State::InService) {
            return Err(ApiError::NotAwaitingResponse(rpc.id));
        }
        self.settle_data();
        self.advance(now);
        let x = self.rpcs.get_mut(r).ok_or(ApiError::UnknownRpc(rpc.id))?;
        x.state = State::Outgoing;
        let host = self.peers.get(x.peer).host;
        self.tx_bytes += payload.len() as u64;
        self.peers.hosts.hold(host, payload.len() as u64);
        self.next_birth += 1;
        x.msgout = Some(OutMessage::new(payload, self.config.unsched_bytes, self.next_birth));
        self.queue_tx(r);
        Ok(())
    }

    fn check_message(&self, payload: &Payload) -> Result<(), ApiError> {
        self.check_send(payload.len())
    }

    /// Whether a message of `len` bytes could be sent now: [`ApiError::MessageLength`]
    /// unless it holds 1..=`max_message_length` bytes, [`ApiError::TxBufferFull`] while the
    /// bytes of outgoing messages would pass `wmem_max` (a driver can queue it until some
    /// finish). Changes nothing.
    pub fn check_send(&self, len: usize) -> Result<(), ApiError> {
        let max = self.config.max_message_length;
        if len == 0 || len > max as usize {
            return Err(ApiError::MessageLength { len, max });
        }
        if self.tx_bytes + len as u64 > self.config.wmem_max {
            return Err(ApiError::TxBufferFull);
        }
        Ok(())
    }

    /// Abandons a client RPC: it is forgotten without an event (the server is not told,
    /// as with the module's `HOMAIOCABORT`).
    pub fn abort(&mut self, id: u64) -> Result<(), ApiError> {
        self.settle_data();
        if !wire::is_client_id(id) {
            return Err(ApiError::UnknownRpc(id));
        }
        let r = self.rpcs.find_client(id).ok_or(ApiError::UnknownRpc(id))?;
        self.end_rpc(r);
        Ok(())
    }

    /// Forgets a request delivered by [`Event::RequestReceived`] without answering it (load
    /// shedding, or one-way messages in a simulation). The client is not told: it times out
    /// unless it aborts.
    ///
    /// [`Event::RequestReceived`]: super::Event::RequestReceived
    pub fn discard(&mut self, rpc: ServerRpc) -> Result<(), ApiError> {
        self.settle_data();
        let r = self.rpcs.find_server(rpc.client, rpc.id).ok_or(ApiError::UnknownRpc(rpc.id))?;
        self.end_rpc(r);
        Ok(())
    }

    /// The transport learned that `peer` (or only its Homa port `port`, for ICMP port
    /// unreachable) cannot be reached: its client RPCs fail with
    /// [`FailReason::Unreachable`] and its server RPCs are dropped.
    pub fn handle_unreachable(&mut self, peer: SocketAddr, port: Option<u16>) {
        self.settle_data();
        let doomed: Vec<RpcRef> = self
            .rpcs
            .refs()
            .filter(|&r| {
                self.rpcs
                    .get(r)
                    .is_some_and(|x| x.addr == peer && port.is_none_or(|p| p == x.remote_port))
            })
            .collect();
        for r in doomed {
            self.fail_or_drop(r, FailReason::Unreachable);
        }
    }
}
