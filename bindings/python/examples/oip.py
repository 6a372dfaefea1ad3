"""What the embedding example's server and client share: the Open Inference Protocol's
generated code (compiled from protos/inference.proto at first use, with grpcio-tools) and
the tensor encoding of its BYTES and FP32 data.

A BYTES tensor's raw contents: each element as a little-endian u32 length and its bytes."""

from __future__ import annotations

import importlib
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

PROTO = Path(__file__).parent / "protos" / "inference.proto"


def generated() -> tuple[Any, Any]:
    """The modules ``inference_pb2`` and ``inference_pb2_grpc``."""
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="oip-")
    args = ["protoc", f"-I{PROTO.parent}", f"--python_out={out}", f"--grpc_python_out={out}"]
    if protoc.main([*args, str(PROTO)]) != 0:
        raise RuntimeError(f"protoc failed on {PROTO}")
    sys.path.insert(0, out)
    return importlib.import_module("inference_pb2"), importlib.import_module("inference_pb2_grpc")


def pack_bytes(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def unpack_bytes(raw: bytes) -> list[bytes]:
    items, at = [], 0
    while at < len(raw):
        (n,) = struct.unpack_from("<I", raw, at)
        items.append(raw[at + 4 : at + 4 + n])
        at += 4 + n
    return items
