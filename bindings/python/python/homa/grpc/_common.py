"""What the asyncio and blocking gRPC layers share: targets, metadata, statuses, and how
Homa's errors read as gRPC statuses."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from typing import Any, NoReturn

import grpc

from .. import errors
from ._wire import Frame, timeout_header

#: Metadata as grpcio takes and gives it.
MetadataLike = Iterable[tuple[str, "str | bytes"]]

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def split_target(target: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too; grpcio's ``dns:`` and ``ipv4:`` prefixes are
    accepted) as a host and a Homa port."""
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(prefix):
            target = target[len(prefix) :]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"target {target!r}: expected host:port")
    return host.strip("[]"), int(port)


def socket_options(options: Iterable[tuple[str, Any]] | None) -> dict[str, Any]:
    """The Homa socket's options among a channel's or server's: ``("homa.<name>", value)``
    for any option of ``homa.open`` (``timeout_ticks``, ``max_message_length``, ...);
    grpcio's own options are ignored."""
    return {k.removeprefix("homa."): v for k, v in options or () if k.startswith("homa.")}


def user_metadata(metadata: MetadataLike | None) -> list[tuple[str, str | bytes]]:
    """Checked call metadata: lowercase keys, bytes values only for ``-bin`` keys."""
    checked: list[tuple[str, str | bytes]] = []
    for key, value in metadata or ():
        if key != key.lower() or key.startswith(":") or key.startswith("grpc-"):
            raise ValueError(f"metadata key {key!r}: lowercase, and not reserved")
        if key.endswith("-bin") != isinstance(value, bytes):
            raise TypeError(f"metadata {key!r}: bytes values go with -bin keys, str otherwise")
        checked.append((key, value))
    return checked


def status_metadata(
    code: grpc.StatusCode, details: str | None, trailing: MetadataLike | None
) -> list[tuple[str, str | bytes]]:
    """Trailing metadata with the status, as gRPC's HTTP/2 mapping writes it."""
    out: list[tuple[str, str | bytes]] = [("grpc-status", str(code.value[0]))]
    if details:
        out.append(("grpc-message", urllib.parse.quote(details, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")))
    out.extend(trailing or ())
    return out


def read_status(frame: Frame) -> tuple[grpc.StatusCode, str, tuple[tuple[str, Any], ...]]:
    """The status, its details and the rest of a response's trailing metadata."""
    code, details, rest = grpc.StatusCode.UNKNOWN, "", []
    for key, value in frame.trailing_metadata or ():
        if key == "grpc-status" and isinstance(value, str) and value.isdigit():
            code = _CODES.get(int(value), grpc.StatusCode.UNKNOWN)
        elif key == "grpc-message" and isinstance(value, str):
            details = urllib.parse.unquote(value)
        else:
            rest.append((key, value))
    if frame.trailing_metadata is None:
        details = "the response carries no status"
    return code, details, tuple(rest)


def status_of(error: BaseException, timed_out: bool) -> tuple[grpc.StatusCode, str]:
    """The gRPC status a Homa error becomes on the client."""
    if isinstance(error, errors.TimeoutError):
        if timed_out or error.kind == "timeout":
            return grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
        return grpc.StatusCode.UNAVAILABLE, f"the server went silent: {error}"
    if isinstance(error, errors.MessageTooLargeError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)
    if isinstance(error, errors.PeerUnknownError):
        return grpc.StatusCode.UNAVAILABLE, str(error)
    if isinstance(error, errors.ShutdownError):
        return grpc.StatusCode.CANCELLED, "the channel was closed"
    if isinstance(error, errors.ResourceLimitError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"


def client_host(target_host: str) -> str:
    """The address a channel's Homa socket binds: the loopback one for a loopback target,
    else any address of the target's family."""
    if target_host in ("localhost", "127.0.0.1", "::1"):
        return target_host
    return "::" if ":" in target_host else "0.0.0.0"


def request_frame(
    stream_id: int,
    method: str,
    payload: bytes,
    timeout: float | None,
    metadata: MetadataLike | None,
) -> Frame:
    """A call's request: the method, its deadline and the caller's metadata, the message.
    (Stream ids wrap at 32 bits, the field's width.)"""
    initial: list[tuple[str, str | bytes]] = [(":path", method)]
    if timeout is not None:
        initial.append(("grpc-timeout", timeout_header(timeout)))
    initial.extend(user_metadata(metadata))
    return Frame(stream_id & 0xFFFF_FFFF, 1, True, initial, None, payload)


class Streaming:
    """A streaming method's multi-callable: generated stubs make one for every method, so
    it exists; calling it says what is missing."""

    def __init__(self, kind: str, method: str) -> None:
        self._kind, self._method = kind, method

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"{self._method}: {self._kind} calls are not carried over Homa yet (homa.grpc "
            f"carries unary calls, one Homa RPC each); serve this method over grpc.aio "
            f"meanwhile"
        )


class UnaryOnly:
    """What both channels answer for the streaming kinds: a multi-callable that refuses."""

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Streaming:
        return Streaming("unary-stream", method)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Streaming:
        return Streaming("stream-unary", method)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Streaming:
        return Streaming("stream-stream", method)
