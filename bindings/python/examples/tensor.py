"""What the inference example's server and client share: the wire format of a tensor and
the "model" (a fixed linear layer and a softmax; stands in for a real network).

A tensor on the wire: ``dtype`` as 4 ASCII bytes (e.g. ``<f4 ``), the number of dimensions
as a little-endian u32, each dimension as a u64, then the C-order data."""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

FEATURES, CLASSES = 64, 10


def pack(array: npt.NDArray[np.float32]) -> bytes:
    """One buffer: header and data (a single copy of the data)."""
    a = np.ascontiguousarray(array)
    header = struct.pack(f"<4sI{a.ndim}Q", a.dtype.str.ljust(4).encode(), a.ndim, *a.shape)
    return header + a.tobytes()


def unpack(data: bytes | memoryview) -> npt.NDArray[np.float32]:
    """A read-only view into ``data`` (no copy)."""
    dtype, ndim = struct.unpack_from("<4sI", data)
    shape = struct.unpack_from(f"<{ndim}Q", data, 8)
    offset = 8 + 8 * ndim
    array = np.frombuffer(data, dtype=np.dtype(dtype.decode().strip()), offset=offset)
    return array.reshape(shape)


def model(batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Class probabilities for a batch of feature vectors: softmax(batch @ W)."""
    weights = np.random.default_rng(42).standard_normal((FEATURES, CLASSES)).astype(np.float32)
    logits = batch @ weights
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    probabilities: npt.NDArray[np.float32] = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return probabilities
