//! Homa on real networks: the sans-IO [`homa_core::Endpoint`] driven by a thread over
//! UDP, raw IP protocol 146, or io_uring, behind a blocking and `Future`-based [`Socket`].
//!
//! - [`Socket`]: bind a server port or open a client; [`Socket::call`] (blocking) and
//!   [`Socket::call_async`] (a runtime-agnostic [`Future`], also
//!   waitable); [`Socket::recv_request`] and [`Request::reply`]; [`Socket::abort`];
//!   [`Socket::metrics`]; [`Socket::shutdown`].
//! - [`Builder`]: transport ([`TransportKind`]), MTU, link rate, busy polling, a CIDR
//!   allow-list ([`Cidr`]), and any other [`Config`] tunable.
//! - [`reactor`]: calls and receives as the futures of another language's event loop
//!   (what the Python and Node bindings are built on).
//! - [`transport`]: the [`Transport`] trait and its implementations, for embedding.
//! - [`retain_freed_buffers`]: stops glibc's `malloc` from giving each freed large message
//!   buffer back to the kernel (worth it for large messages).
//!
//! # Threading
//!
//! Each socket has one driver thread that sleeps in `epoll` on the transport and a timerfd
//! armed with the endpoint's next deadline. The endpoint sits behind a mutex: a calling
//! thread sends its own packets (no thread hop on the send path); a thread blocked waiting
//! receives from the transport itself if no other thread does (so its answer wakes it
//! directly; with UDP it sleeps in the receive call, [`Transport::waiter`], except while
//! bulk data is received in place); the driver
//! thread receives the rest and runs timers. Completions reach other waiting
//! threads through condition variables and tasks through their `Waker`s. A blocked thread
//! polls for up to 50 µs before it sleeps, while that pays ([`Builder::busy_poll`]). The
//! crate's README has the details.
//!
//! ```
//! use homa_io::Socket;
//! use std::net::Ipv4Addr;
//!
//! let server = Socket::bind("127.0.0.1:4322".parse().unwrap())?;
//! let client = Socket::client(Ipv4Addr::LOCALHOST)?;
//! let call = client.call_async(server.local_addr(), b"hello".to_vec(), None)?;
//! let request = server.recv_request()?;
//! assert_eq!(request.message(), b"hello");
//! request.reply(b"world".to_vec())?;
//! assert_eq!(call.wait()?, b"world");
//! # Ok::<(), homa_io::Error>(())
//! ```
//!
//! Linux only.

#![warn(missing_docs)]

mod cidr;
mod driver;
mod error;
mod malloc;
pub mod reactor;
mod socket;
pub mod transport;

pub use cidr::{Cidr, CidrParseError};
pub use error::{Error, Result};
pub use homa_core::{ApiError, Config, Payload, Phase, Progress, RpcInfo};
pub use malloc::retain_freed_buffers;
pub use reactor::Reactor;
pub use socket::{
    Builder, Call, Histogram, Message, Metrics, Poller, RecvRequest, Request, Socket, socket_labels,
};
pub use transport::{Transport, TransportKind, TransportStats};

/// The README's example runs as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExample;
