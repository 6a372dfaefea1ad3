"""The homa/python contender of `homa incast`: Homa's asyncio API (package homa-transport)
as an application uses it, one process per host, driven over pipes.

    python -c SCRIPT server HOST PORT LINK_MBPS
    python -c SCRIPT client HOST SERVER_HOST PORT LINK_MBPS

Both print "ready" once their socket is open. A client then reads "ID SIZE" lines and
calls the server with SIZE bytes for each, at once; it prints "ID NS" when the response is
back (NS: CLOCK_MONOTONIC in nanoseconds, the clock Rust's Instant reads) or "ID !KIND"
when the call failed. At the end of its input, a process waits for its calls, then prints
one JSON line of counters and exits."""

import asyncio
import json
import sys
import time

import homa

RESPONSE = bytes(100)
MAX_MESSAGE = 1_000_000


def counters(sock: homa.AsyncSocket, cpu0: float) -> str:
    metrics = sock.metrics()
    core, transport = metrics["core"], metrics["transport"]
    return json.dumps(
        {
            "cpu_s": time.process_time() - cpu0,
            "retransmitted_packets": core["retransmitted_packets"],
            "resends": core["packets_out_by_type"]["RESEND"],
            "busy": core["packets_in_by_type"]["BUSY"],
            "host_drops": transport["tx_dropped"] + transport["rx_overflow"],
            "late_timers": metrics["late_timers"],
        }
    )


async def stdin_lines() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 16)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def server(host: str, port: int, link_mbps: int) -> None:
    async def handle(req: homa.Request) -> bytes:
        return RESPONSE

    async with homa.open(port, host=host, link_mbps=link_mbps) as sock:
        cpu0 = time.process_time()
        lines = await stdin_lines()
        print("ready", flush=True)
        serving = asyncio.create_task(sock.serve(handle))
        await lines.read()  # until the end of input
        serving.cancel()
        print(counters(sock, cpu0), flush=True)


async def client(host: str, server_host: str, port: int, link_mbps: int) -> None:
    payload = memoryview(bytes(i % 251 for i in range(MAX_MESSAGE)))
    out = sys.stdout

    async def call(sock: homa.AsyncSocket, id: str, size: int) -> None:
        try:
            await sock.call((server_host, port), payload[:size])
            out.write(f"{id} {time.monotonic_ns()}\n")
        except homa.HomaError as e:
            out.write(f"{id} !{e.kind}\n")
        out.flush()

    async with homa.open(host=host, link_mbps=link_mbps) as sock:
        cpu0 = time.process_time()
        lines = await stdin_lines()
        print("ready", flush=True)
        calls: set[asyncio.Task[None]] = set()
        while line := await lines.readline():
            id, size = line.split()
            task = asyncio.create_task(call(sock, id.decode(), int(size)))
            calls.add(task)
            task.add_done_callback(calls.discard)
        await asyncio.gather(*calls)
        print(counters(sock, cpu0), flush=True)


def main(role: str, *args: str) -> None:
    if role == "server":
        asyncio.run(server(args[0], int(args[1]), int(args[2])))
    else:
        asyncio.run(client(args[0], args[1], int(args[2]), int(args[3])))


main(*sys.argv[1:])
