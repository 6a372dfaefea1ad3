//! Errors returned to the application. Malformed packets are [`crate::wire::Error`]; a failed
//! RPC is an [`Event::RpcFailed`](crate::Event::RpcFailed), not an error.

use core::fmt;

/// Misuse of the API. The call changed nothing; fix the arguments and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiError {
    /// Messages must hold 1..=`Config::max_message_length` bytes (1,000,000 by default).
    MessageLength {
        /// Bytes in the message given.
        len: usize,
        /// The limit, `Config::max_message_length`.
        max: u32,
    },
    /// A server port must be 1..=32767; 0 and 32768.. are reserved (the latter for ephemeral
    /// client ports).
    InvalidPort(u16),
    /// The port is already bound.
    PortInUse(u16),
    /// The port is not bound (`unbind`, or sending from it).
    PortNotBound(u16),
    /// Every ephemeral port (32768..=65535) is taken.
    NoEphemeralPort,
    /// No RPC with this id exists (it finished, failed, was aborted, or never existed).
    UnknownRpc(u64),
    /// The RPC exists but is not waiting for a response from the application.
    NotAwaitingResponse(u64),
    /// The destination would be a new peer beyond `Config::max_peers`, and none is idle.
    TooManyPeers,
    /// Outgoing messages would exceed `Config::wmem_max`; retry once some complete.
    TxBufferFull,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ApiError::MessageLength { len: 0, max } => {
                write!(
                    f,
                    "the message is empty: Homa messages hold between 1 and {} bytes",
                    Grouped(max as u64)
                )
            }
            ApiError::MessageLength { len, max } => write!(
                f,
                "a message of {} bytes is longer than max_message_length ({} bytes): to send \
                 more, set the same larger max_message_length on both ends (peers running the \
                 Linux module accept at most 1,000,000 bytes)",
                Grouped(len as u64),
                Grouped(max as u64)
            ),
            ApiError::InvalidPort(p) => {
                write!(f, "port {p} cannot be bound: server ports are between 1 and 32767")
            }
            ApiError::PortInUse(p) => write!(f, "port {p} is already bound"),
            ApiError::PortNotBound(p) => write!(f, "port {p} is not bound"),
            ApiError::NoEphemeralPort => {
                write!(f, "all ephemeral ports (32768 to 65535) are in use")
            }
            ApiError::UnknownRpc(id) => write!(f, "no RPC with id {id}"),
            ApiError::NotAwaitingResponse(id) => {
                write!(f, "RPC {id} is not a received request awaiting a response")
            }
            ApiError::TooManyPeers => {
                write!(f, "max_peers peers are busy; no room to talk to a new one")
            }
            ApiError::TxBufferFull => {
                write!(f, "outgoing messages would exceed wmem_max; wait for some to complete")
            }
        }
    }
}

impl ApiError {
    /// The error's kind, as every binding and the conformance vectors name it: the variant
    /// in snake case (`"message_length"`, `"tx_buffer_full"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            ApiError::MessageLength { .. } => "message_length",
            ApiError::InvalidPort(_) => "invalid_port",
            ApiError::PortInUse(_) => "port_in_use",
            ApiError::PortNotBound(_) => "port_not_bound",
            ApiError::NoEphemeralPort => "no_ephemeral_port",
            ApiError::UnknownRpc(_) => "unknown_rpc",
            ApiError::NotAwaitingResponse(_) => "not_awaiting_response",
            ApiError::TooManyPeers => "too_many_peers",
            ApiError::TxBufferFull => "tx_buffer_full",
        }
    }
}

impl core::error::Error for ApiError {}

/// A number with its thousands grouped by commas, as people write it: `1,000,000`.
pub(crate) struct Grouped(pub(crate) u64);

impl fmt::Display for Grouped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (high, low) = (self.0 / 1000, self.0 % 1000);
        if high == 0 {
            return write!(f, "{low}");
        }
        write!(f, "{},{low:03}", Grouped(high))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn numbers_in_messages_are_grouped_as_people_write_them() {
        let cases = [(0, "0"), (999, "999"), (1000, "1,000"), (1_048_576, "1,048,576")];
        for (n, text) in cases {
            assert_eq!(Grouped(n).to_string(), text);
        }
        let e = ApiError::MessageLength { len: 1_048_576, max: 1_000_000 };
        let text = e.to_string();
        assert!(text.contains("1,048,576 bytes") && text.contains("max_message_length"), "{text}");
    }
}
