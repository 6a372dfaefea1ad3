"""Homa, the receiver-driven datacenter transport, for Python.

- asyncio: ``async with homa.open(port) as sock:``; ``await sock.call(addr, data)``;
  ``async for req in sock.requests(): await req.reply(data)`` (:mod:`homa.aio`).
- Blocking, for threads and scripts: ``homa.Socket(port)``, ``.call``, ``.recv_request``,
  ``req.reply`` (the GIL is released while waiting).
- Sans-IO: :class:`Endpoint` is the protocol engine itself; feed it packets and time, take
  packets, events and deadlines out.
- :mod:`homa.wire` decodes and encodes packets; :func:`cutoffs_for_workload` computes
  priority cutoffs from a message-size distribution.
- :func:`retain_freed_buffers`: for programs receiving large messages, keeps glibc's
  ``malloc`` from handing each freed buffer back to the kernel.

Messages hold between 1 and 1,000,000 bytes (the Linux module's limit; raise it with
``max_message_length=`` on both ends); sends take any bytes-like object
(read-only ones such as ``bytes`` without a copy, writable ones copied once); a received
message is a read-only ``memoryview`` over the buffer it was received into, not a copy
(``bytes(m)`` copies it). Errors are :class:`HomaError` subclasses (see
:mod:`homa.errors`)."""

from __future__ import annotations

import importlib.metadata as _metadata

from . import wire
from .errors import (
    AbortedError,
    ConfigError,
    HomaError,
    InvalidArgumentError,
    MessageTooLargeError,
    MissingCapabilityError,
    PeerUnknownError,
    PortInUseError,
    ResourceLimitError,
    ShutdownError,
    TimeoutError,
    UnreachableError,
    WireError,
)
from ._native import (
    CONFIG_FIELDS,
    MAX_MESSAGE_LENGTH,
    MIN_EPHEMERAL_PORT,
    Endpoint,
    Replied,
    Request,
    RequestReceived,
    ResponseReceived,
    RpcFailed,
    ServerRpc,
    Socket,
    Transmit,
    cutoffs_for_workload,
    retain_freed_buffers,
)
from .aio import AsyncSocket, Opening, open

__version__: str = _metadata.version("homa-transport")  # the workspace's (Cargo.toml)

__all__ = [
    "CONFIG_FIELDS",
    "MAX_MESSAGE_LENGTH",
    "MIN_EPHEMERAL_PORT",
    "AbortedError",
    "AsyncSocket",
    "ConfigError",
    "Endpoint",
    "HomaError",
    "InvalidArgumentError",
    "MessageTooLargeError",
    "MissingCapabilityError",
    "Opening",
    "PeerUnknownError",
    "PortInUseError",
    "Replied",
    "Request",
    "RequestReceived",
    "ResponseReceived",
    "ResourceLimitError",
    "RpcFailed",
    "ServerRpc",
    "ShutdownError",
    "Socket",
    "TimeoutError",
    "Transmit",
    "UnreachableError",
    "WireError",
    "cutoffs_for_workload",
    "open",
    "retain_freed_buffers",
    "wire",
]
