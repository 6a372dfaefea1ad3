"""An inference server over Homa: each request is a batch of feature vectors (a float32
tensor), each response the class probabilities.

    python inference_server.py --port 4000

Stops cleanly on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal

import numpy as np
import tensor

import homa


async def infer(req: homa.Request) -> bytes:
    batch = tensor.unpack(req.message)  # a view of the request's bytes, no copy
    if batch.ndim != 2 or batch.shape[1] != tensor.FEATURES:
        raise ValueError(f"expected a (batch, {tensor.FEATURES}) tensor, got {batch.shape}")
    return tensor.pack(tensor.model(batch))


def error_reply(req: homa.Request, exc: Exception) -> bytes:
    """Homa has no error responses: answer with an empty-shaped tensor the client checks."""
    return tensor.pack(np.zeros((0, tensor.CLASSES), dtype=np.float32))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=4000)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()

    sock = await homa.open(port=args.port, host=args.host)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, sock.close)  # ends serve() below
    host, port = sock.local_addr
    print(f"listening on {host}:{port}", flush=True)
    await sock.serve(infer, on_error=error_reply)
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
