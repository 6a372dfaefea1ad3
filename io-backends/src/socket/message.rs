//! [`Message`]: a received message, lent to the application.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A received message (a request's or a response's bytes), contiguous.
///
/// It is lent: until it is dropped, its bytes count against the socket's `max_rx_bytes`
/// beside the messages still arriving, so an application that holds on to messages makes
/// new ones wait (their senders hear that this host is busy, and their calls finish late)
/// instead of growing memory without bound. [`into_vec`](Message::into_vec) ends the loan:
/// the bytes are the caller's, and no longer counted. Bindings keep a `Message` under the
/// views they hand out (a Python memoryview, a Node Buffer) until the last one goes.
pub struct Message {
    bytes: Vec<u8>,
    /// The socket's count of lent bytes; `None` for a message made from a `Vec`.
    lent: Option<Arc<AtomicU64>>,
}

impl Message {
    /// `bytes`, counted in `lent` until dropped.
    pub(crate) fn lend(bytes: Vec<u8>, lent: &Arc<AtomicU64>) -> Message {
        lent.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Message { bytes, lent: Some(Arc::clone(lent)) }
    }

    /// The bytes, no longer counted against the socket's memory.
    pub fn into_vec(mut self) -> Vec<u8> {
        self.give_back();
        std::mem::take(&mut self.bytes)
    }

    fn give_back(&mut self) {
        if let Some(lent) = self.lent.take() {
            lent.fetch_sub(self.bytes.len() as u64, Ordering::Relaxed);
        }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl Default for Message {
    fn default() -> Message {
        Message::from(Vec::new())
    }
}

impl From<Vec<u8>> for Message {
    /// A message that counts against no socket (e.g. for tests).
    fn from(bytes: Vec<u8>) -> Message {
        Message { bytes, lent: None }
    }
}

impl From<Message> for Vec<u8> {
    fn from(m: Message) -> Vec<u8> {
        m.into_vec()
    }
}

impl From<Message> for homa_core::Payload {
    /// Sends a received message on (an echo) without copying it.
    fn from(m: Message) -> homa_core::Payload {
        m.into_vec().into()
    }
}

impl Deref for Message {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl AsRef<[u8]> for Message {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<T: AsRef<[u8]> + ?Sized> PartialEq<T> for Message {
    fn eq(&self, other: &T) -> bool {
        self.bytes == other.as_ref()
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message").field("len", &self.bytes.len()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_counted_until_dropped_or_taken() {
        let lent = Arc::new(AtomicU64::new(0));
        let a = Message::lend(vec![1; 100], &lent);
        let b = Message::lend(vec![2; 50], &lent);
        assert_eq!(lent.load(Ordering::Relaxed), 150);
        assert!(a == [1; 100] && b == vec![2; 50]);
        drop(a);
        assert_eq!(lent.load(Ordering::Relaxed), 50);
        assert_eq!(b.into_vec(), vec![2; 50]);
        assert_eq!(lent.load(Ordering::Relaxed), 0);
    }
}
