"""Sends the embedding server (embedding_server.py) a stream of ModelInfer requests, one
sentence each, over grpc.aio and over Homa with the same client code, and prints p50/p99
latency and throughput for each: ``--concurrency`` calls in flight (a closed loop), or with
``--rate`` calls due at random (Poisson, seeded) at that many per second (an open loop, as a
server under load from many clients sees them), timed from when each was due, beside what
the model alone would give (a queue fed the same arrivals, serving each in the model time
the server reports).

    python embedding_client.py --server 127.0.0.1 --grpc-port 50051 --homa-port 4000"""

from __future__ import annotations

import argparse
import asyncio
import random
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


async def call(stub: Any, pb: Any, i: int, since: float | None = None) -> tuple[float, float]:
    """Request `i`'s latency, from `since` if given (when it was due) or from now, and the
    model's time for it (as the server says), in seconds, after checking its answer."""
    request = pb.ModelInferRequest(model_name="all-MiniLM-L6-v2", id=str(i))
    request.inputs.add(name="text", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(oip.pack_bytes([SENTENCES[i % len(SENTENCES)].encode()]))
    start = time.perf_counter() if since is None else since
    reply = await stub.ModelInfer(request, timeout=10)
    latency = time.perf_counter() - start
    vector = np.frombuffer(reply.raw_output_contents[0], np.float32)
    assert vector.shape == (384,) and abs(float(vector @ vector) - 1.0) < 1e-3
    return latency, reply.parameters["compute_us"].int64_param / 1e6


async def closed_loop(stub: Any, pb: Any, requests: int, concurrency: int) -> list[float]:
    """Latencies of `requests` calls, `concurrency` in flight."""
    latencies: list[float] = []
    queue = iter(range(requests))

    async def worker() -> None:
        for i in queue:
            latencies.append((await call(stub, pb, i))[0])

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def open_loop(stub: Any, pb: Any, requests: int, rate: float) -> tuple[list[float], list[float]]:
    """Latencies of `requests` calls due `rate` per second on average, each at an
    exponentially distributed interval after the last (seed 1), however many are in flight,
    measured from when each was due; and those of the model alone: of a queue fed the
    same arrivals, whose server takes the model's time for each and nothing else."""
    gaps = random.Random(1)
    calls, arrivals = [], []
    due = time.perf_counter()
    for i in range(requests):
        due += gaps.expovariate(rate)
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        calls.append(asyncio.ensure_future(call(stub, pb, i, since=due)))
        arrivals.append(due)
    done = await asyncio.gather(*calls)
    queued, free = [], 0.0
    for arrival, (_, compute) in zip(arrivals, done):
        free = max(free, arrival) + compute
        queued.append(free - arrival)
    return [latency for latency, _ in done], queued


def positive(text: str) -> float:
    rate = float(text)
    if not rate > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return rate


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", default="127.0.0.1")
    parser.add_argument("--grpc-port", type=int, default=50051)
    parser.add_argument("--homa-port", type=int, default=4000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight")
    parser.add_argument("--rate", type=positive, help="calls due per second (open loop)")
    args = parser.parse_args()
    pb, pb_grpc = oip.generated()
    channels = {
        "grpc.aio": grpc.aio.insecure_channel(f"{args.server}:{args.grpc_port}"),
        "homa.grpc": homa.grpc.aio.insecure_channel(f"{args.server}:{args.homa_port}"),
    }
    for name, channel in channels.items():
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert (await stub.ServerLive(pb.ServerLiveRequest())).live
        await closed_loop(stub, pb, min(50, args.requests), args.concurrency)  # warm up
        start = time.perf_counter()
        floor = ""
        if args.rate:
            latencies, queued = await open_loop(stub, pb, args.requests, args.rate)
            load = f"{args.rate:.0f}/s offered"
            floor = f" (the model alone: p99 {statistics.quantiles(queued, n=100)[98] * 1e6:.0f} us)"
        else:
            latencies = await closed_loop(stub, pb, args.requests, args.concurrency)
            load = f"{args.concurrency} in flight"
        wall = time.perf_counter() - start
        q = statistics.quantiles(latencies, n=100)
        print(
            f"{name:10} {args.requests} requests, {load}: p50 {q[49] * 1e6:.0f} us, "
            f"p99 {q[98] * 1e6:.0f} us{floor}, {args.requests / wall:.0f}/s"
        )
        await channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
