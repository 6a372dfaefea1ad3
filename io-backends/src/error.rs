//! [`Error`]: everything a [`Socket`](crate::Socket) call can fail with.

use std::io;
use std::net::SocketAddr;

use homa_core::{ApiError, ConfigError};

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a socket call failed. Argument errors change nothing and can be retried with other
/// arguments; RPC failures (`TimedOut`, `Unreachable`, `Aborted`, `Shutdown`) end that RPC.
/// [`name`](Error::name) gives the kind every binding names alike.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Homa endpoint refused the call and changed nothing: a bad argument (a port
    /// outside 1..=32767, a message outside 1..=`max_message_length` bytes, a port in use)
    /// or a limit (too many peers, the outgoing byte limit `wmem_max`, no ephemeral port
    /// left). Also for a port another socket holds.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The destination's address family differs from the socket's (IPv4 vs IPv6).
    #[error("{0} has another address family than this socket")]
    AddressFamily(SocketAddr),
    /// The destination cannot be reached: no route, or the peer's host said no Homa
    /// listens there (ICMP port or protocol unreachable) or a firewall forbids it. (ICMP
    /// host or network unreachable do not end calls: they may be of a moment, as when
    /// ARP replies were lost; a peer truly gone is silent, `PeerSilent`.)
    #[error("{0} is unreachable")]
    Unreachable(SocketAddr),
    /// The call's own timeout passed, or no request came within `recv_request_timeout`.
    /// (When it passes together with the peer's silence, this is the one reported.)
    #[error("timed out: the timeout given passed")]
    TimedOut,
    /// The peer sent nothing for Homa's timeout (`Config::timeout_ticks`) although asked
    /// to resend: it is presumably down. Can come before a longer call timeout.
    #[error(
        "{0} went silent: nothing arrived from it for timeout_ticks (100 ms by default) \
         although asked to resend; it may be down"
    )]
    PeerSilent(SocketAddr),
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
    /// [`Builder::reuse_port`](crate::Builder::reuse_port) misused: a socket that shares its
    /// port cannot make calls (a response may reach another socket of the port), and only
    /// a UDP server socket can share its port.
    #[error("{0}")]
    SharedPort(&'static str),
    /// [`Socket::poller`](crate::Socket::poller): an event loop drives this socket already
    /// (drop its [`Poller`](crate::Poller) first).
    #[error("an event loop drives this socket already")]
    PollerExists,
    /// The operating system refused a socket operation.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl Error {
    /// The error's kind, as every binding names it: the endpoint's ([`ApiError::name`],
    /// e.g. `"port_in_use"`, `"message_length"`) or `"address_family"`, `"unreachable"`,
    /// `"timed_out"`, `"peer_silent"`, `"aborted"`, `"shutdown"`, `"missing_capability"`, `"config"`,
    /// `"shared_port"`, `"poller_exists"`, `"io"`.
    pub fn name(&self) -> &'static str {
        match self {
            Error::Api(e) => e.name(),
            Error::AddressFamily(_) => "address_family",
            Error::Unreachable(_) => "unreachable",
            Error::TimedOut => "timed_out",
            Error::PeerSilent(_) => "peer_silent",
            Error::Aborted => "aborted",
            Error::Shutdown => "shutdown",
            Error::MissingCapability { .. } => "missing_capability",
            Error::Config(_) => "config",
            Error::SharedPort(_) => "shared_port",
            Error::PollerExists => "poller_exists",
            Error::Io(_) => "io",
        }
    }
}
