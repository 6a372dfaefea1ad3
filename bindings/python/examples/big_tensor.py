"""A 16 MiB tensor between two Python processes. Homa messages hold at most 1,000,000 bytes
unless both ends raise ``max_message_length`` alike (peers running the Linux module stay at
1,000,000): this example raises it to 32 MiB on both.

    python big_tensor.py --serve --port 4001          # one process: doubles what it gets
    python big_tensor.py --server 127.0.0.1:4001      # another: sends 16 MiB, checks"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

import numpy as np
import tensor

import homa

MAX = 32 * 1024 * 1024  # both ends: larger than any message they exchange


async def serve(port: int) -> None:
    async with homa.open(port=port, host="127.0.0.1", max_message_length=MAX) as sock:
        print(f"listening on 127.0.0.1:{port}", flush=True)
        stop = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set_result, None)

        async def double(req: homa.Request) -> bytes:
            return tensor.pack(tensor.unpack(req.message) * 2)

        serving = asyncio.ensure_future(sock.serve(double))
        await stop
        serving.cancel()
    print("stopped")


async def send(server: str) -> int:
    a = np.random.default_rng(7).standard_normal((2048, 2048)).astype(np.float32)  # 16 MiB
    async with homa.open(host="127.0.0.1", max_message_length=MAX) as sock:
        start = time.perf_counter()
        reply = await sock.call(server, tensor.pack(a), timeout=30.0)
        elapsed = time.perf_counter() - start
    ok = np.array_equal(tensor.unpack(reply), a * 2)
    print(f"{a.nbytes:,} bytes each way in {elapsed * 1e3:.1f} ms: {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--port", type=int, default=4001)
    parser.add_argument("--server", default="127.0.0.1:4001")
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.port))
    else:
        sys.exit(asyncio.run(send(args.server)))
