"""Benchmark: asyncio RPC latency and throughput of homa against asyncio TCP streams with the
same echo logic, interleaved in one run so both see the same machine.

    python -m homa.bench [--size 100] [--rounds 5] [--calls 2000] [--concurrency 32]

The servers (a homa socket and an asyncio TCP server, each echoing length-prefixed
messages) run in a child process with its own event loop; this process is the client. Each
round measures, for each transport in turn: the latency of sequential calls (one in
flight; p50 and p99 over all rounds) and the calls per second with ``--concurrency``
callers in a closed loop (homa: tasks calling one socket; TCP: one connection per caller).
``--in-process`` runs the servers on the client's loop instead; ``--uvloop`` uses uvloop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import homa

HEADER = struct.Struct("<I")


async def start_servers(host: str) -> tuple[homa.AsyncSocket, asyncio.Server, asyncio.Task[None]]:
    """A homa echo server and a TCP echo server (4-byte length, then the message)."""
    sock = await homa.open(port=_free_homa_port(host), host=host)

    async def homa_echo() -> None:
        async for req in sock.requests():
            req.reply(req.message)

    async def tcp_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (n,) = HEADER.unpack(await reader.readexactly(HEADER.size))
                data = await reader.readexactly(n)
                writer.write(HEADER.pack(n) + data)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the benchmark is over
        finally:
            writer.close()

    tcp = await asyncio.start_server(tcp_echo, host, 0)
    return sock, tcp, asyncio.get_running_loop().create_task(homa_echo())


def _free_homa_port(host: str) -> int:
    import socket

    for port in range(24_000, 32_767):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port for the homa server")


async def serve_forever(host: str) -> None:
    sock, tcp, task = await start_servers(host)
    tcp_port = tcp.sockets[0].getsockname()[1]
    print(json.dumps({"homa": sock.port, "tcp": tcp_port}), flush=True)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def on_stdin() -> None:
        if not stop.done():
            stop.set_result(None)

    loop.add_reader(sys.stdin.fileno(), on_stdin)
    await stop  # the parent closes our stdin when it is done
    sock.close()
    tcp.close()
    await task


class TcpClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def call(self, message: bytes) -> bytes:
        self.writer.write(HEADER.pack(len(message)) + message)
        (n,) = HEADER.unpack(await self.reader.readexactly(HEADER.size))
        return await self.reader.readexactly(n)


async def latency(call: Callable[[bytes], Awaitable[object]], message: bytes, n: int) -> list[int]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await call(message)
        times.append(time.perf_counter_ns() - t0)
    return times


async def throughput(calls: list[Callable[[bytes], Awaitable[object]]], message: bytes, n: int) -> float:
    """Calls per second with one closed-loop caller per entry of `calls`, n calls in all."""
    per = n // len(calls)

    async def caller(call: Callable[[bytes], Awaitable[object]]) -> None:
        for _ in range(per):
            await call(message)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in calls))
    return per * len(calls) / (time.perf_counter() - t0)


def pct(times: list[int], p: float) -> float:
    s = sorted(times)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] / 1000


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    host = "127.0.0.1"
    child = None
    servers = None
    if args.in_process:
        servers = await start_servers(host)
        ports = {"homa": servers[0].port, "tcp": servers[1].sockets[0].getsockname()[1]}
    else:
        cmd = [sys.executable, "-m", "homa.bench", "--serve"] + (["--uvloop"] if args.uvloop else [])
        child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        ports = json.loads(child.stdout.readline())
    message = os.urandom(args.size)
    hsock = await homa.open(host=host)
    hdest = (host, ports["homa"])

    async def homa_call(m: bytes) -> memoryview:
        return await hsock.call(hdest, m, timeout=5.0)

    conns = [TcpClient(*await asyncio.open_connection(host, ports["tcp"])) for _ in range(args.concurrency)]
    for c in conns:
        c.writer.transport.get_extra_info("socket").setsockopt(6, 1, 1)  # TCP_NODELAY
    # Warm up both.
    await latency(homa_call, message, 200)
    await latency(conns[0].call, message, 200)
    lat: dict[str, list[int]] = {"homa": [], "tcp": []}
    rate: dict[str, list[float]] = {"homa": [], "tcp": []}
    for r in range(args.rounds):
        order = ["homa", "tcp"] if r % 2 == 0 else ["tcp", "homa"]
        for name in order:
            if name == "homa":
                lat[name] += await latency(homa_call, message, args.calls)
                rate[name].append(await throughput([homa_call] * args.concurrency, message, args.calls * 5))
            else:
                lat[name] += await latency(conns[0].call, message, args.calls)
                rate[name].append(await throughput([c.call for c in conns], message, args.calls * 5))
    for c in conns:
        c.writer.close()
    hsock.close()
    if servers is not None:
        servers[0].close()
        servers[1].close()
        await servers[2]
    if child is not None:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    result: dict[str, Any] = {}
    for name in ("homa", "tcp"):
        result[name] = {
            "p50_us": pct(lat[name], 50),
            "p99_us": pct(lat[name], 99),
            "calls_per_s": statistics.median(rate[name]),
        }
    result["p50_ratio_homa_over_tcp"] = result["homa"]["p50_us"] / result["tcp"]["p50_us"]
    result["rate_ratio_homa_over_tcp"] = result["homa"]["calls_per_s"] / result["tcp"]["calls_per_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m homa.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--size", type=int, default=100, help="message bytes (default 100)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000, help="sequential calls per round")
    parser.add_argument("--concurrency", type=int, default=32, help="callers for calls/s")
    parser.add_argument("--in-process", action="store_true", help="servers on the client's loop")
    parser.add_argument("--uvloop", action="store_true", help="use uvloop")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    homa.retain_freed_buffers()  # as the homa command does: large --size otherwise churns pages
    if args.uvloop:
        import uvloop

        uvloop.install()
    if args.serve:
        asyncio.run(serve_forever("127.0.0.1"))
        return
    r = asyncio.run(bench(args))
    if args.json:
        print(json.dumps(r, indent=2))
        return
    mode = "one process" if args.in_process else "client and servers in two processes"
    print(f"{args.size}-byte echo RPCs over loopback, {mode}, "
          f"{'uvloop' if args.uvloop else 'asyncio'}, {args.rounds} interleaved rounds")  # fmt: skip
    print(f"{'':6} {'p50 us':>8} {'p99 us':>8} {'calls/s':>9}  (calls/s with {args.concurrency} callers)")
    for name in ("homa", "tcp"):
        x = r[name]
        print(f"{name:6} {x['p50_us']:8.1f} {x['p99_us']:8.1f} {x['calls_per_s']:9.0f}")
    print(f"homa/tcp: p50 {r['p50_ratio_homa_over_tcp']:.2f}x, calls/s {r['rate_ratio_homa_over_tcp']:.2f}x")


if __name__ == "__main__":
    main()
