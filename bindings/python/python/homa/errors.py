"""The exceptions homa raises. Every one is a :class:`HomaError`; several also derive from
the builtin exception Python code already catches for the same situation (``TimeoutError``,
``ConnectionError``, ``ValueError``, ``OSError``, ``PermissionError``)."""

from __future__ import annotations

import builtins

__all__ = [
    "AbortedError",
    "ConfigError",
    "HomaError",
    "InvalidArgumentError",
    "MessageTooLargeError",
    "MissingCapabilityError",
    "PeerUnknownError",
    "PortInUseError",
    "ResourceLimitError",
    "ShutdownError",
    "TimeoutError",
    "UnreachableError",
    "WireError",
]


class HomaError(Exception):
    """Base class of every homa error. ``kind`` is a stable snake-case name for the error
    (the core's names, e.g. ``"port_in_use"``, ``"unknown_rpc"``, ``"timeout"``)."""

    kind: str = "homa"


class TimeoutError(HomaError, builtins.TimeoutError):
    """No response in time. ``kind`` says whose deadline it was:

    - ``"timeout"``: the ``timeout`` given to the call (or to ``recv_request``) passed;
    - ``"peer_silent"``: the peer sent nothing for Homa's own timeout (``timeout_ticks``
      ticks of 1 ms, 100 ms by default) although asked to resend: it is presumably down.
      This can come before a longer ``timeout`` (raise ``timeout_ticks`` to wait longer
      for a slow peer).

    When both deadlines pass at once, the call's own ``timeout`` is reported. Also a
    builtin ``TimeoutError``, which on Python 3.11+ is ``asyncio.TimeoutError`` too."""

    kind = "timeout"


class PeerUnknownError(HomaError, ConnectionError):
    """The peer cannot be reached (:class:`UnreachableError`), or the endpoint has no RPC
    with that id (``kind`` ``"unknown_rpc"``)."""

    kind = "unknown_rpc"


class UnreachableError(PeerUnknownError, builtins.ConnectionRefusedError):
    """The peer is unreachable: an ICMP error came back (nobody listens on that UDP port,
    the host or protocol is unreachable) or there is no route. Raised as soon as the error
    arrives, like a refused TCP connection."""

    kind = "unreachable"


class InvalidArgumentError(HomaError, ValueError):
    """An argument the endpoint refuses: a bad port (``invalid_port``), an unbound port
    (``port_not_bound``), an empty message (``message_length``), an address of the wrong
    family (``address_family``), a request that is not awaiting a response
    (``not_awaiting_response``), a call from a socket opened with ``reuse_port=True``, or
    ``reuse_port`` on a client or raw IP socket (``shared_port``)."""

    kind = "invalid_argument"


class MessageTooLargeError(InvalidArgumentError):
    """A message longer than the endpoint's ``max_message_length`` (1,000,000 bytes, the
    Linux module's limit, unless raised). To send more, pass the same larger
    ``max_message_length=`` to both ends' ``open``; peers running the Linux module accept
    at most 1,000,000 bytes."""

    kind = "message_length"


class PortInUseError(HomaError, OSError):
    """The port is already bound (by this endpoint, or by another socket)."""

    kind = "port_in_use"


class ConfigError(HomaError, ValueError):
    """A configuration value is out of range. ``field`` names it (the core's name)."""

    kind = "config"
    field: str = ""


class ResourceLimitError(HomaError):
    """A limit of the endpoint is reached: ``tx_buffer_full`` (``wmem_max`` bytes of
    outgoing messages, only from a call made with ``block=False``: other calls wait for
    room), ``too_many_peers`` (``max_peers``), ``no_ephemeral_port``."""

    kind = "tx_buffer_full"


class AbortedError(HomaError):
    """The call was aborted."""

    kind = "aborted"


class ShutdownError(HomaError):
    """The socket is closed (before or while the operation ran)."""

    kind = "shutdown"


class MissingCapabilityError(HomaError, PermissionError):
    """The transport needs a privilege the process lacks (raw IP needs CAP_NET_RAW)."""

    kind = "missing_capability"


class WireError(HomaError, ValueError):
    """Bytes that are not a valid Homa packet. ``kind`` is the conformance suite's error
    class: ``truncated``, ``unknown_type``, ``too_many_acks``, ``bad_message_length``,
    ``past_message_end``, ``bad_priority``."""

    kind = "truncated"
