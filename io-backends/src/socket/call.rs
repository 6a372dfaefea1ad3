//! [`Call`]: an RPC in progress, as a future of its response or waited for by a thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use homa_core::ApiError;

use crate::driver::{Completion, Shared};
use crate::error::Result;
use crate::socket::Message;

/// An RPC in progress: a [`Future`] of its response, or [`wait`](Call::wait) for it.
/// Dropping an unfinished `Call` aborts the RPC.
#[derive(Debug)]
#[must_use = "dropping a Call aborts it"]
pub struct Call {
    pub(super) shared: Arc<Shared>,
    pub(super) id: u64,
    pub(super) completion: Arc<Completion>,
    /// This call's thread claimed leadership when sending ([`Socket::start_call`]).
    ///
    /// [`Socket::start_call`]: super::Socket::start_call
    pub(super) leading: bool,
    pub(super) done: bool,
}

impl Call {
    /// This call's id on its socket, for [`Socket::abort`]: not the RPC's id on the wire (a
    /// call waiting for room in the send buffer has none yet).
    ///
    /// [`Socket::abort`]: super::Socket::abort
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Blocks until the response (or failure) arrives.
    pub fn wait(mut self) -> Result<Message> {
        let claimed = std::mem::take(&mut self.leading);
        let r = self.shared.wait_call(&self.completion, claimed);
        self.done = true;
        r
    }

    /// Blocks until the response (or failure) arrives, or for at most `timeout`: `None`
    /// if the call is still pending then (it goes on; wait again, poll it, or drop it to
    /// abort it). Lets a blocking caller wake up periodically, e.g. to check for signals.
    /// Once it has returned `Some`, later calls return
    /// `Some(Err(Error::Api(ApiError::UnknownRpc)))`, as would [`Socket::abort`].
    ///
    /// [`Socket::abort`]: super::Socket::abort
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<Message>> {
        if self.done {
            return Some(Err(ApiError::UnknownRpc(self.id).into()));
        }
        let until = std::time::Instant::now() + timeout;
        // Leadership ends with the wait; the next wait claims it again if it is free.
        let claimed = std::mem::take(&mut self.leading);
        let r = self.shared.wait_call_until(&self.completion, claimed, until);
        self.done = r.is_some();
        r
    }
}

impl Future for Call {
    type Output = Result<Message>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if std::mem::take(&mut self.leading) {
            self.shared.resign(); // polled, not waited for: the driver thread receives
        }
        match self.completion.poll(cx.waker()) {
            Some(r) => {
                self.done = true;
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.leading {
            self.shared.resign();
        }
        if !self.done {
            let id = self.id;
            self.shared.with(|inner, _| {
                inner.cancel(id, None);
                inner.settle(false);
            });
        }
    }
}
