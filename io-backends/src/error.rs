//! [`Error`]: everything a [`Socket`](crate::Socket) call can fail with.

use std::io;
use std::net::SocketAddr;

use homa_core::{ApiError, ConfigError};

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a socket call failed. Argument errors change nothing and can be retried with other
/// arguments; RPC failures (`TimedOut`, `Unreachable`, `Aborted`, `Shutdown`) end that RPC.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A server port must be 1..=32767 (0 is reserved; 32768.. are ephemeral client ports),
    /// and so must a destination's port.
    #[error("port {0} is not a Homa server port (server ports are 1..=32767)")]
    InvalidPort(u16),
    /// Another socket holds this port.
    #[error("port {0} is already in use")]
    PortInUse(u16),
    /// Messages hold 1..=`Config::max_message_length` bytes (1,000,000 by default).
    #[error("message of {len} bytes: Homa messages hold 1..={max} bytes")]
    MessageLength { len: usize, max: u32 },
    /// The destination's address family differs from the socket's (IPv4 vs IPv6).
    #[error("{0} has another address family than this socket")]
    AddressFamily(SocketAddr),
    /// The destination cannot be reached: no route, or an ICMP error (host, port or
    /// protocol unreachable) came back.
    #[error("{0} is unreachable")]
    Unreachable(SocketAddr),
    /// The call's deadline passed, or the peer went silent for Homa's timeout
    /// (`Config::timeout_ticks`), or no request came within `recv_request_timeout`.
    #[error("timed out")]
    TimedOut,
    /// The call was aborted with [`Socket::abort`](crate::Socket::abort).
    #[error("the call was aborted")]
    Aborted,
    /// The socket was shut down (explicitly or by dropping it) before the call finished.
    #[error("the socket is shut down")]
    Shutdown,
    /// The transport needs a privilege the process lacks.
    #[error(
        "{what} needs the {capability} capability (run as root, or `setcap cap_net_raw+ep` the binary)"
    )]
    MissingCapability {
        /// What was being opened.
        what: &'static str,
        /// The Linux capability, e.g. `CAP_NET_RAW`.
        capability: &'static str,
    },
    /// A `Config` value is out of range, or the transport cannot carry packets of `mtu`.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// [`Socket::poller`](crate::Socket::poller): an event loop drives this socket already
    /// (drop its [`Poller`](crate::Poller) first).
    #[error("an event loop drives this socket already")]
    PollerExists,
    /// The Homa endpoint refused the call for another reason (too many peers, the outgoing
    /// byte limit `wmem_max` reached, no ephemeral port left).
    #[error(transparent)]
    Rejected(ApiError),
    /// The operating system refused a socket operation.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Error {
        match e {
            ApiError::MessageLength { len, max } => Error::MessageLength { len, max },
            ApiError::InvalidPort(p) => Error::InvalidPort(p),
            ApiError::PortInUse(p) => Error::PortInUse(p),
            other => Error::Rejected(other),
        }
    }
}
