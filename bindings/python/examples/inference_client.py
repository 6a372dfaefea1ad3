"""Clients for inference_server.py: several sockets send batches concurrently, each answer
is checked against the model computed locally, and the latency is summarised at the end.

    python inference_client.py --server 127.0.0.1:4000 --clients 8 --requests 400 --batch 32"""

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
    parser.add_argument("--clients", type=int, default=8, help="sockets, each its own client")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight per client")
    args = parser.parse_args()

    rng = np.random.default_rng(1)
    latencies: list[float] = []
    wrong = 0

    async def client(requests: int) -> None:
        nonlocal wrong
        async with homa.open(host="127.0.0.1") as sock:
            limit = asyncio.Semaphore(args.concurrency)

            async def one() -> None:
                nonlocal wrong
                batch = rng.standard_normal((args.batch, tensor.FEATURES)).astype(np.float32)
                async with limit:
                    start = time.perf_counter()
                    reply = await sock.call(args.server, tensor.pack(batch), timeout=5.0)
                    latencies.append(time.perf_counter() - start)
                if not np.allclose(tensor.unpack(reply), tensor.model(batch), atol=1e-6):
                    wrong += 1

            await asyncio.gather(*(one() for _ in range(requests)))

    start = time.perf_counter()
    shares = [args.requests // args.clients + (i < args.requests % args.clients)
              for i in range(args.clients)]  # fmt: skip
    await asyncio.gather(*(client(n) for n in shares if n))
    elapsed = time.perf_counter() - start
    p50, p99 = (float(np.percentile(latencies, q)) * 1e6 for q in (50, 99))
    print(f"{args.requests} requests of {args.batch}x{tensor.FEATURES} float32 from "
          f"{args.clients} clients in {elapsed:.3f} s ({args.requests / elapsed:.0f}/s), "
          f"latency p50 {p50:.0f} us, p99 {p99:.0f} us, {wrong} wrong")  # fmt: skip
    if wrong:
        return 1
    print("ok")
    return 0

if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
