"""gRPC calls as Homa messages: one Homa RPC per unary call, the request and the response
each framed as one message (conformance/grpc.md gives the format, with vectors).

A frame is a header (big-endian u32 stream id, u32 sequence, u32 initial metadata bytes,
u32 trailing metadata bytes, u32 message bytes, u8 flags), then the initial metadata, the
trailing metadata and the message. Each metadata entry is a u32 key length, a u32 value
length, the key and the value. The layout and the flag bits are grpc_homa's (its C++
``wire.h`` and Java ``HomaWire``), one message each way."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

HEADER = struct.Struct(">IIIIIB")
ENTRY = struct.Struct(">II")

#: The frame carries initial metadata (possibly none).
INIT_MD_PRESENT = 1
#: The frame carries the whole message.
MESSAGE_COMPLETE = 2
#: The frame carries trailing metadata, the status among it: the call is over.
TRAIL_MD_PRESENT = 4
#: The frame is a request (it awaits a response).
IS_REQUEST = 8

Metadata = Sequence[tuple[str, "str | bytes"]]


class FrameError(ValueError):
    """Bytes that are not a frame: too short, lengths that disagree, a bad metadata entry."""


@dataclass
class Frame:
    """One direction of a call. Metadata values are ``str``, or ``bytes`` for keys that end
    in ``-bin`` (as in gRPC)."""

    stream_id: int = 0
    sequence: int = 1
    is_request: bool = False
    initial_metadata: list[tuple[str, str | bytes]] = field(default_factory=list)
    trailing_metadata: list[tuple[str, str | bytes]] | None = None
    message: bytes | memoryview | None = None


def _metadata_bytes(metadata: Metadata) -> bytes:
    out = bytearray()
    for key, value in metadata:
        k = key.encode("ascii")
        v = value if isinstance(value, bytes) else value.encode("utf-8")
        out += ENTRY.pack(len(k), len(v)) + k + v
    return bytes(out)


def encode(frame: Frame) -> bytes:
    """The frame's bytes (one Homa message)."""
    init = _metadata_bytes(frame.initial_metadata)
    trail = b"" if frame.trailing_metadata is None else _metadata_bytes(frame.trailing_metadata)
    message = frame.message if frame.message is not None else b""
    flags = INIT_MD_PRESENT | (IS_REQUEST if frame.is_request else 0)
    if frame.trailing_metadata is not None:
        flags |= TRAIL_MD_PRESENT
    if frame.message is not None:
        flags |= MESSAGE_COMPLETE
    header = HEADER.pack(
        frame.stream_id, frame.sequence, len(init), len(trail), len(message), flags
    )
    return b"".join((header, init, trail, message))


def _metadata(data: memoryview) -> list[tuple[str, str | bytes]]:
    entries: list[tuple[str, str | bytes]] = []
    at = 0
    while at < len(data):
        if len(data) - at < ENTRY.size:
            raise FrameError("a metadata entry is cut short")
        klen, vlen = ENTRY.unpack_from(data, at)
        at += ENTRY.size
        if len(data) - at < klen + vlen:
            raise FrameError("a metadata entry runs past its section")
        try:
            key = bytes(data[at : at + klen]).decode("ascii")
        except UnicodeDecodeError:
            raise FrameError("a metadata key is not ASCII") from None
        raw = bytes(data[at + klen : at + klen + vlen])
        at += klen + vlen
        if key.endswith("-bin"):
            entries.append((key, raw))
            continue
        try:
            entries.append((key, raw.decode("utf-8")))
        except UnicodeDecodeError:
            raise FrameError(f"the value of {key!r} is not text (only -bin keys hold bytes)") from None
    return entries


def decode(data: bytes | memoryview) -> Frame:
    """The frame in ``data``; the message is a view into it (no copy)."""
    view = memoryview(data)
    if len(view) < HEADER.size:
        raise FrameError(f"{len(view)} bytes: shorter than the {HEADER.size}-byte header")
    stream_id, sequence, init_len, trail_len, message_len, flags = HEADER.unpack_from(view)
    if HEADER.size + init_len + trail_len + message_len != len(view):
        raise FrameError(
            f"the header announces {HEADER.size + init_len + trail_len + message_len} bytes, "
            f"the frame has {len(view)}"
        )
    at = HEADER.size
    initial = _metadata(view[at : at + init_len])
    at += init_len
    trailing = _metadata(view[at : at + trail_len]) if flags & TRAIL_MD_PRESENT else None
    at += trail_len
    message = view[at:] if flags & MESSAGE_COMPLETE else None
    return Frame(stream_id, sequence, bool(flags & IS_REQUEST), initial, trailing, message)


# gRPC's timeout header: at most 8 digits and a unit.
_UNITS = (("n", 1e-9), ("u", 1e-6), ("m", 1e-3), ("S", 1.0), ("M", 60.0), ("H", 3600.0))


def timeout_header(seconds: float) -> str:
    """``grpc-timeout`` for ``seconds`` (rounded up to the unit that fits 8 digits)."""
    seconds = max(seconds, 0.0)
    for unit, scale in _UNITS:
        count = -(-seconds // scale)  # ceiling
        if count < 100_000_000:
            return f"{int(count)}{unit}"
    return "99999999H"


def parse_timeout(text: str) -> float | None:
    """Seconds from a ``grpc-timeout`` value, or None if it is not one."""
    scale = dict(_UNITS).get(text[-1:])
    digits = text[:-1]
    if scale is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * scale
