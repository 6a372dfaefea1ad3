//! The server side: [`Request`], a request received and its reply, and [`RecvRequest`],
//! the future of the next one.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use homa_core::{Payload, ServerRpc};

use crate::driver::{Incoming, Shared};
use crate::error::Result;
use crate::socket::Message;
use homa_core::time::Nanos;

/// A future of the next request ([`Socket::recv_request_async`]).
///
/// [`Socket::recv_request_async`]: super::Socket::recv_request_async
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct RecvRequest {
    pub(super) shared: Arc<Shared>,
    pub(super) ip: bool,
}

impl Future for RecvRequest {
    type Output = Result<Request>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.shared.poll_request(cx.waker()) {
            Some(r) => Poll::Ready(r.map(|r| Request::new(Arc::clone(&self.shared), r, self.ip))),
            None => Poll::Pending,
        }
    }
}

/// A request a server received. Answer it with [`reply`](Request::reply). Dropping it
/// unanswered discards it: the client is not told, and its Homa resends the request after
/// its resend interval, so the request may arrive again.
#[derive(Debug)]
pub struct Request {
    shared: Arc<Shared>,
    rpc: ServerRpc,
    peer: SocketAddr,
    message: Message,
    /// When it arrived (driver time).
    arrived: Nanos,
    answered: bool,
}

impl Request {
    pub(super) fn new(shared: Arc<Shared>, r: Incoming, ip: bool) -> Request {
        // Name the client as the application would: with raw IP, by its Homa port.
        let mut peer = r.rpc.client;
        if ip {
            peer.set_port(r.client_port);
        }
        Request {
            shared,
            rpc: r.rpc,
            peer,
            message: r.message,
            arrived: r.arrived,
            answered: false,
        }
    }

    /// The request's bytes.
    pub fn message(&self) -> &[u8] {
        &self.message
    }

    /// Takes the request's bytes out (leaving an empty message), e.g. to echo them.
    pub fn take_message(&mut self) -> Message {
        std::mem::take(&mut self.message)
    }

    /// The client: its UDP address, or with raw IP its IP address and Homa port.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The server-side RPC id (odd).
    pub fn id(&self) -> u64 {
        self.rpc.id
    }

    /// Sends the response (or, while the send buffer is full, queues it until there is
    /// room: it never blocks). Succeeds silently if the client has gone away (as the
    /// module's `sendmsg` does); fails with a message length error ([`Error::Api`]) or
    /// [`Error::Shutdown`].
    ///
    /// [`Error::Api`]: crate::Error::Api
    /// [`Error::Shutdown`]: crate::Error::Shutdown
    pub fn reply(mut self, message: impl Into<Payload>) -> Result<()> {
        let message = message.into();
        let (rpc, arrived) = (self.rpc, self.arrived);
        self.answered = true;
        self.shared.with(|inner, now| {
            let sent = inner.reply(now, rpc, arrived, message);
            inner.settle(false);
            sent
        })
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if !self.answered {
            let rpc = self.rpc;
            self.shared.with(|inner, _| {
                let _ = inner.endpoint.discard(rpc);
                inner.settle(false);
            });
        }
    }
}
