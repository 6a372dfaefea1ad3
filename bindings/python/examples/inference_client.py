"""A client for inference_server.py: sends batches concurrently, checks each answer against
the model computed locally.

    python inference_client.py --server 127.0.0.1:4000 --requests 100 --batch 32"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import numpy as np
import tensor

import homa


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", default="127.0.0.1:4000")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    rng = np.random.default_rng(1)
    async with await homa.open(host="127.0.0.1") as sock:
        limit = asyncio.Semaphore(args.concurrency)

        async def one() -> bool:
            batch = rng.standard_normal((args.batch, tensor.FEATURES)).astype(np.float32)
            async with limit:
                reply = await sock.call(args.server, tensor.pack(batch), timeout=5.0)
            return bool(np.allclose(tensor.unpack(reply), tensor.model(batch), atol=1e-6))

        start = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(args.requests)))
        elapsed = time.perf_counter() - start
    bad = results.count(False)
    print(f"{args.requests} requests of {args.batch}x{tensor.FEATURES} float32 in {elapsed:.3f} s, "
          f"{bad} wrong")  # fmt: skip
    if bad:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
