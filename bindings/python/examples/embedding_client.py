"""Sends the embedding server (embedding_server.py) a stream of ModelInfer requests, one
sentence each, over grpc.aio and over Homa with the same client code, and prints p50/p99
latency and throughput for each.

    python embedding_client.py --server 127.0.0.1 --grpc-port 50051 --homa-port 4000"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import grpc
import numpy as np
import oip

import homa.grpc.aio

SENTENCES = [
    "Homa schedules the shortest remaining message first.",
    "A busy server answers late; it never loses the call.",
    "The quick brown fox jumps over the lazy dog.",
    "Inference servers speak gRPC.",
]


async def run(stub: Any, pb: Any, requests: int, concurrency: int) -> tuple[list[float], float]:
    """Latencies (seconds) of `requests` calls, `concurrency` in flight, and the wall time."""
    latencies: list[float] = []
    queue = iter(range(requests))

    async def worker() -> None:
        for i in queue:
            request = pb.ModelInferRequest(model_name="all-MiniLM-L6-v2", id=str(i))
            request.inputs.add(name="text", datatype="BYTES", shape=[1])
            request.raw_input_contents.append(oip.pack_bytes([SENTENCES[i % len(SENTENCES)].encode()]))
            start = time.perf_counter()
            reply = await stub.ModelInfer(request, timeout=10)
            latencies.append(time.perf_counter() - start)
            vector = np.frombuffer(reply.raw_output_contents[0], np.float32)
            assert vector.shape == (384,) and abs(float(vector @ vector) - 1.0) < 1e-3

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", default="127.0.0.1")
    parser.add_argument("--grpc-port", type=int, default=50051)
    parser.add_argument("--homa-port", type=int, default=4000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight")
    args = parser.parse_args()
    pb, pb_grpc = oip.generated()
    channels = {
        "grpc.aio": grpc.aio.insecure_channel(f"{args.server}:{args.grpc_port}"),
        "homa.grpc": homa.grpc.aio.insecure_channel(f"{args.server}:{args.homa_port}"),
    }
    for name, channel in channels.items():
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert (await stub.ServerLive(pb.ServerLiveRequest())).live
        await run(stub, pb, min(50, args.requests), args.concurrency)  # warm up
        latencies, wall = await run(stub, pb, args.requests, args.concurrency)
        q = statistics.quantiles(latencies, n=100)
        print(
            f"{name:10} {args.requests} requests, {args.concurrency} in flight: "
            f"p50 {q[49] * 1e6:.0f} us, p99 {q[98] * 1e6:.0f} us, {args.requests / wall:.0f}/s"
        )
        await channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
