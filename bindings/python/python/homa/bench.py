"""Benchmark: homa's asyncio API against what Python RPC servers use today (asyncio TCP
streams, grpc.aio, pyzmq), every server echoing the request, interleaved in one run so that
all contenders see the same machine.

    python -m homa.bench [--workload small,1mb,tensor] [--contender homa,tcp,grpc,grpc-homa,zmq]
                         [--rounds 3] [--seconds 0.5] [--json FILE]

Workloads (the response is the request's bytes, echoed):
  small   100-byte messages (--size), 64 calls in flight (--concurrency)
  1mb     1,000,000-byte messages (homa's default max_message_length), 1 and 8 in flight
  tensor  a 16 MiB float32 numpy tensor sent from its read-only buffer, 1 and 8 in flight;
          both homa ends are opened with max_message_length raised to 32 MiB for it (and
          wmem_max to hold eight)

Contenders:
  homa    one socket; the callers are tasks sharing it
  tcp     asyncio streams, a 4-byte length before each message; one connection per caller
  grpc    grpc.aio, one channel; a generic unary-unary method on raw bytes (no protobuf)
  grpc-homa  the same gRPC server and client code over Homa (homa.grpc.aio), both ends'
          max_message_length raised to 32 MiB (a tensor and its gRPC frame)
  zmq     zmq.asyncio, one DEALER socket against a ROUTER server; a request id sent with
          each message hands the replies to their callers
grpc, grpc-homa and zmq are optional (pip install 'homa-transport[bench]'): one whose package cannot
be imported is skipped with a note.

The servers run in a child process with its own event loop; this process is the client.
Each round runs every workload row for every contender in turn (the order rotates from
round to round), each for --seconds with its callers in a closed loop. Reported per row:
the median calls/s over the rounds, homa's calls/s over each peer's, CPU time per call of
both processes together (getrusage: every thread counts, homa's driver and grpc's and zmq's
I/O threads included) and the calls' p50/p99 latency. ``--in-process`` runs the servers on
the client's loop instead; ``--uvloop`` uses uvloop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import json
import os
import platform
import resource
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import homa

if TYPE_CHECKING:
    from typing_extensions import Buffer, TypeAlias

    #: One caller's call: sends the row's message, returns the reply.
    Call: TypeAlias = Callable[[], Awaitable[Buffer]]
    Closer: TypeAlias = Callable[[], Awaitable[None]]

Message = Union[bytes, memoryview]

CONTENDERS = ("homa", "tcp", "grpc", "grpc-homa", "zmq")
#: The optional contenders: the module each needs and the distribution that provides it.
PEER_PACKAGES = {
    "grpc": ("grpc.aio", "grpcio"),
    "grpc-homa": ("grpc.aio", "grpcio"),
    "zmq": ("zmq.asyncio", "pyzmq"),
}
WORKLOADS = ("small", "1mb", "tensor")
ONE_MB = 1_000_000
TENSOR_SHAPE = (4096, 1024)  # float32: 16 MiB
#: homa's max_message_length on both ends for the tensor workload (the default is 1,000,000).
TENSOR_MAX_MESSAGE_LENGTH = 32 * 1024 * 1024
#: grpc's message size limits and the TCP streams' buffer limit: above any message here.
LARGEST = 32 * 1024 * 1024
#: Homa options for the tensor: its length, and room for eight in flight at each end (the
#: default wmem_max, 100 MB, holds six).
TENSOR_HOMA_OPTIONS = {"max_message_length": TENSOR_MAX_MESSAGE_LENGTH, "wmem_max": 1 << 28}
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", LARGEST),
    ("grpc.max_receive_message_length", LARGEST),
]
GRPC_SERVICE, GRPC_METHOD = "homa.bench.Echo", "Call"
#: grpc-homa's Homa sockets, given as gRPC options.
GRPC_HOMA_OPTIONS = [(f"homa.{k}", v) for k, v in TENSOR_HOMA_OPTIONS.items()]
HEADER = struct.Struct("<I")
WARM_UP_SECONDS = 0.1


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the results: a workload with a number of calls in flight."""

    workload: str
    size: int
    in_flight: int

    @property
    def title(self) -> str:
        what = "16 MiB float32 tensor" if self.workload == "tensor" else f"{self.size:,} B"
        return f"{what} echo, {self.in_flight} in flight"


def rows_of(workloads: list[str], size: int, concurrency: int) -> list[Row]:
    """The rows the chosen workloads measure (`size` and `concurrency`: the small one's)."""
    rows = []
    for workload in workloads:
        if workload == "small":
            rows.append(Row(workload, size, concurrency))
        elif workload == "1mb":
            rows += [Row(workload, ONE_MB, 1), Row(workload, ONE_MB, 8)]
        else:
            size = 4 * TENSOR_SHAPE[0] * TENSOR_SHAPE[1]
            rows += [Row(workload, size, 1), Row(workload, size, 8)]
    return rows


def homa_key(contender: str, workload: str) -> str:
    """Which server and client a row uses: the tensor's homa pair allows larger messages."""
    return "homa_tensor" if contender == "homa" and workload == "tensor" else contender


def missing_package(contender: str) -> str | None:
    """Why `contender` cannot run here (its optional package is not importable), or None."""
    if contender not in PEER_PACKAGES:
        return None
    module, distribution = PEER_PACKAGES[contender]
    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"{distribution} is not importable ({e})"
    return None


def cpu_seconds() -> float:
    """CPU time of this process so far: user and system, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# Servers: each returns its port and how to stop it.


async def homa_server(host: str, **options: Any) -> tuple[int, Closer]:
    sock = await homa.open(port=_free_homa_port(host), host=host, **options)

    async def echo() -> None:
        async for req in sock.requests():
            req.reply(req.message)

    task = asyncio.ensure_future(echo())

    async def close() -> None:
        sock.close()
        await task

    return sock.port, close


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


async def tcp_server(host: str) -> tuple[int, Closer]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (n,) = HEADER.unpack(await reader.readexactly(HEADER.size))
                data = await reader.readexactly(n)
                writer.writelines((HEADER.pack(n), data))  # one send (sendmsg on 3.12+)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the benchmark is over
        finally:
            writer.close()

    # A buffer limit above the largest message: the default (64 KiB) pauses and resumes
    # reading several times per megabyte.
    server = await asyncio.start_server(echo, host, 0, limit=LARGEST)

    async def close() -> None:
        server.close()

    return server.sockets[0].getsockname()[1], close


async def grpc_server(host: str, over_homa: bool = False) -> tuple[int, Closer]:
    import grpc

    async def echo(request: bytes, context: object) -> bytes:
        return request

    if over_homa:
        import homa.grpc.aio

        server = homa.grpc.aio.server(options=GRPC_HOMA_OPTIONS)
    else:
        server = grpc.aio.server(options=GRPC_OPTIONS)
    # No (de)serializers: the handler takes and returns the raw bytes.
    method = grpc.unary_unary_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(GRPC_SERVICE, {GRPC_METHOD: method}),)
    )
    port: int = server.add_insecure_port(f"{host}:0")
    await server.start()

    async def close() -> None:
        await server.stop(None)

    return port, close


async def zmq_server(host: str) -> tuple[int, Closer]:
    import zmq
    import zmq.asyncio

    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port(f"tcp://{host}")

    async def echo() -> None:
        while True:
            # [caller's identity, request id, message], sent back as received (no copies).
            frames = await router.recv_multipart(copy=False)
            await router.send_multipart(frames, copy=False)

    task = asyncio.ensure_future(echo())

    async def close() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        router.close(linger=0)
        context.term()

    return port, close


async def start_servers(
    host: str, contenders: list[str], workloads: list[str], homa_options: dict[str, Any]
) -> dict[str, tuple[int, Closer]]:
    """The chosen contenders' echo servers on the running loop, by client key."""
    servers = {}
    if "homa" in contenders:
        servers["homa"] = await homa_server(host, **homa_options)
        if "tensor" in workloads:
            options = {**homa_options, **TENSOR_HOMA_OPTIONS}
            servers["homa_tensor"] = await homa_server(host, **options)
    starts: dict[str, Callable[[str], Awaitable[tuple[int, Closer]]]] = {
        "tcp": tcp_server,
        "grpc": grpc_server,
        "grpc-homa": functools.partial(grpc_server, over_homa=True),
        "zmq": zmq_server,
    }
    for name in contenders:
        if name in starts:
            servers[name] = await starts[name](host)
    return servers


class InProcessServers:
    """The servers on the client's own loop: the client's CPU time includes theirs."""

    def __init__(self, servers: dict[str, tuple[int, Closer]]) -> None:
        self.ports = {name: port for name, (port, _) in servers.items()}
        self._closers = [close for _, close in servers.values()]

    def cpu_seconds(self) -> float:
        return 0.0

    async def stop(self) -> None:
        for close in self._closers:
            await close()


class ServerProcess:
    """The servers in a child process (``--serve``), which tells its CPU time when asked."""

    def __init__(self, args: argparse.Namespace, contenders: list[str]) -> None:
        cmd = [sys.executable, "-m", "homa.bench", "--serve", "--contender", ",".join(contenders),
               "--workload", ",".join(args.workload)] + (["--uvloop"] if args.uvloop else [])  # fmt: skip
        cmd += [f"--homa-option={option}" for option in args.homa_option]
        pipe = subprocess.PIPE
        self._child = subprocess.Popen(cmd, stdin=pipe, stdout=pipe, text=True)
        self.ports: dict[str, int] = json.loads(self._readline())

    def _readline(self) -> str:
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError(f"the server process exited ({self._child.wait()})")
        return line

    def cpu_seconds(self) -> float:
        assert self._child.stdin is not None
        self._child.stdin.write("cpu\n")
        self._child.stdin.flush()
        return float(json.loads(self._readline())["cpu_s"])

    async def stop(self) -> None:
        assert self._child.stdin is not None
        self._child.stdin.close()  # the child's signal to stop
        self._child.wait(timeout=30)


async def serve_forever(
    host: str, contenders: list[str], workloads: list[str], homa_options: dict[str, Any]
) -> None:
    servers = await start_servers(host, contenders, workloads, homa_options)
    print(json.dumps({name: port for name, (port, _) in servers.items()}), flush=True)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    stdin = sys.stdin.fileno()

    def on_stdin() -> None:
        data = os.read(stdin, 4096)
        if not data:  # the parent closed our stdin: it is done
            if not stop.done():
                stop.set_result(None)
            return
        for _ in data.split():  # each line asks for our CPU time so far
            print(json.dumps({"cpu_s": cpu_seconds()}), flush=True)

    loop.add_reader(stdin, on_stdin)
    await stop
    loop.remove_reader(stdin)
    for _, close in servers.values():
        await close()


# Clients: `callers(n, message)` gives n calls to run concurrently, each in a closed loop.


class HomaClient:
    """Callers are tasks sharing one socket."""

    def __init__(self, sock: homa.AsyncSocket, dest: tuple[str, int]) -> None:
        self.sock, self.dest = sock, dest

    async def callers(self, n: int, message: Message) -> list[Call]:
        async def call() -> memoryview:
            return await self.sock.call(self.dest, message, timeout=30.0)

        return [call] * n

    async def close(self) -> None:
        self.sock.close()


class TcpClient:
    """Each caller has its own connection: a stream carries one call at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def callers(self, n: int, message: Message) -> list[Call]:
        while len(self.streams) < n:  # asyncio sets TCP_NODELAY itself
            self.streams.append(await asyncio.open_connection(self.host, self.port, limit=LARGEST))

        def caller(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Call:
            async def call() -> bytes:
                writer.writelines((HEADER.pack(len(message)), message))
                (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
                return await reader.readexactly(length)

            return call

        return [caller(r, w) for r, w in self.streams[:n]]

    async def close(self) -> None:
        for _, writer in self.streams:
            writer.close()


class GrpcClient:
    """Callers are tasks sharing one channel (one HTTP/2 connection, a stream per call)."""

    def __init__(self, host: str, port: int, over_homa: bool = False) -> None:
        import grpc

        if over_homa:
            import homa.grpc.aio

            self.channel = homa.grpc.aio.insecure_channel(f"{host}:{port}", options=GRPC_HOMA_OPTIONS)
        else:
            self.channel = grpc.aio.insecure_channel(f"{host}:{port}", options=GRPC_OPTIONS)
        # No (de)serializers: requests and responses are the raw bytes.
        self.echo = self.channel.unary_unary(f"/{GRPC_SERVICE}/{GRPC_METHOD}")

    async def callers(self, n: int, message: Message) -> list[Call]:
        request = bytes(message)  # grpc sends bytes only: copied here once, not per call

        async def call() -> bytes:
            reply: bytes = await self.echo(request)
            return reply

        return [call] * n

    async def close(self) -> None:
        await self.channel.close()


class ZmqClient:
    """Callers are tasks sharing one DEALER socket. Each request goes out with an id, which
    the ROUTER server echoes with the message; one reader task hands replies to callers."""

    def __init__(self, host: str, port: int) -> None:
        import zmq
        import zmq.asyncio

        self.context = zmq.asyncio.Context()
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.connect(f"tcp://{host}:{port}")
        self.waiting: dict[bytes, asyncio.Future[memoryview]] = {}
        self.last_id = 0
        self.reader = asyncio.ensure_future(self._read_replies())

    async def _read_replies(self) -> None:
        while True:
            request_id, reply = await self.dealer.recv_multipart(copy=False)
            self.waiting.pop(request_id.bytes).set_result(reply.buffer)

    async def callers(self, n: int, message: Message) -> list[Call]:
        loop = asyncio.get_running_loop()

        async def call() -> memoryview:
            self.last_id += 1
            request_id = self.last_id.to_bytes(8, "little")
            reply: asyncio.Future[memoryview] = loop.create_future()
            self.waiting[request_id] = reply
            await self.dealer.send_multipart((request_id, message), copy=False)
            return await reply

        return [call] * n

    async def close(self) -> None:
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.reader
        self.dealer.close(linger=0)
        self.context.term()


Client = Union[HomaClient, TcpClient, GrpcClient, ZmqClient]


async def open_clients(
    host: str, ports: dict[str, int], homa_options: dict[str, Any]
) -> dict[str, Client]:
    """A client for each server in `ports`, by the same key."""
    clients: dict[str, Client] = {}
    for key, port in ports.items():
        if key in ("homa", "homa_tensor"):
            options = dict(homa_options)
            if key == "homa_tensor":
                options.update(TENSOR_HOMA_OPTIONS)
            clients[key] = HomaClient(await homa.open(host=host, **options), (host, port))
        elif key == "tcp":
            clients[key] = TcpClient(host, port)
        elif key == "grpc":
            clients[key] = GrpcClient(host, port)
        elif key == "grpc-homa":
            clients[key] = GrpcClient(host, port, over_homa=True)
        else:
            clients[key] = ZmqClient(host, port)
    return clients


def message_for(row: Row) -> Message:
    if row.workload != "tensor":
        return os.urandom(row.size)
    import numpy as np

    tensor = np.random.default_rng(7).standard_normal(TENSOR_SHAPE, dtype=np.float32)
    tensor.flags.writeable = False  # homa sends read-only buffers without a copy
    return tensor.data.cast("B")


@dataclasses.dataclass
class Sample:
    """One contender on one row for one round."""

    calls: int
    seconds: float
    cpu_seconds: float
    latencies_ns: list[int]


Servers = Union[ServerProcess, InProcessServers]


async def closed_loop(callers: list[Call], seconds: float, servers: Servers) -> Sample:
    """Runs each caller in a closed loop (its next call as soon as the last one returned)
    for `seconds`; every caller completes at least one call."""
    latencies: list[int] = []
    deadline = time.perf_counter_ns() + int(seconds * 1e9)

    async def run(call: Call) -> None:
        while True:
            t0 = time.perf_counter_ns()
            await call()
            t1 = time.perf_counter_ns()
            latencies.append(t1 - t0)
            if t1 >= deadline:
                return

    cpu0 = cpu_seconds() + servers.cpu_seconds()
    t0 = time.perf_counter()
    await asyncio.gather(*(run(c) for c in callers))
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds() + servers.cpu_seconds() - cpu0
    return Sample(len(latencies), elapsed, cpu, latencies)


def pct(times: list[int], p: float) -> float:
    s = sorted(times)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] / 1000


def summary(
    rows: list[Row], contenders: list[str], samples: dict[tuple[Row, str], list[Sample]]
) -> list[dict[str, Any]]:
    """Per row: each contender's median calls/s over the rounds, CPU time per call over all
    of them, latency percentiles over all calls; and homa's calls/s over each peer's."""
    out = []
    for row in rows:
        results = {}
        for name in contenders:
            runs = samples[row, name]
            calls = sum(s.calls for s in runs)
            latencies = [t for s in runs for t in s.latencies_ns]
            results[name] = {
                "calls_per_s": statistics.median(s.calls / s.seconds for s in runs),
                "cpu_us_per_call": sum(s.cpu_seconds for s in runs) / calls * 1e6,
                "p50_us": pct(latencies, 50),
                "p99_us": pct(latencies, 99),
            }
        entry: dict[str, Any] = {"workload": row.workload, "message_bytes": row.size,
                                 "in_flight": row.in_flight, "results": results}  # fmt: skip
        if "homa" in results:
            homa_rate = results["homa"]["calls_per_s"]
            peers = {name: r for name, r in results.items() if name != "homa"}
            entry["homa_over"] = {name: homa_rate / r["calls_per_s"] for name, r in peers.items()}
        out.append(entry)
    return out


async def bench(args: argparse.Namespace, contenders: list[str]) -> list[dict[str, Any]]:
    host = "127.0.0.1"
    homa_options = homa_options_of(args.homa_option)
    servers: Servers
    if args.in_process:
        servers = InProcessServers(
            await start_servers(host, contenders, args.workload, homa_options)
        )
    else:
        servers = ServerProcess(args, contenders)
    clients = await open_clients(host, servers.ports, homa_options)
    rows = rows_of(args.workload, args.size, args.concurrency)
    messages = {row.workload: message_for(row) for row in rows}
    callers: dict[tuple[Row, str], list[Call]] = {}
    # Check each echo once, then warm each contender up on each row.
    for row in rows:
        message = messages[row.workload]
        for name in contenders:
            client = clients[homa_key(name, row.workload)]
            callers[row, name] = await client.callers(row.in_flight, message)
            if bytes(await callers[row, name][0]()) != bytes(message):
                raise RuntimeError(f"{name}: the reply differs from the request ({row.title})")
            await closed_loop(callers[row, name], WARM_UP_SECONDS, servers)
    samples: dict[tuple[Row, str], list[Sample]] = {key: [] for key in callers}
    for r in range(args.rounds):
        order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
        for row in rows:
            for name in order:
                sample = await closed_loop(callers[row, name], args.seconds, servers)
                samples[row, name].append(sample)
    for client in clients.values():
        await client.close()
    await servers.stop()
    return summary(rows, contenders, samples)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'':34} {'calls/s':>9} {'homa/x':>7} {'CPU us/call':>12} {'p50 us':>9} {'p99 us':>9}")
    for entry in rows:
        row = Row(entry["workload"], entry["message_bytes"], entry["in_flight"])
        print(row.title)
        for name, x in entry["results"].items():
            ratio = entry.get("homa_over", {}).get(name)
            ratio_text = f"{ratio:6.2f}x" if ratio is not None else ""
            print(f"  {name:32} {x['calls_per_s']:9,.0f} {ratio_text:>7}"
                  f" {x['cpu_us_per_call']:12.1f} {x['p50_us']:9.1f} {x['p99_us']:9.1f}")  # fmt: skip
    print("homa/x: homa's calls/s over the contender's (above 1: homa is faster).")
    print("CPU: client and server processes together, all threads.")


def names(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of some of `allowed`, in that order."""

    def parse(text: str) -> list[str]:
        chosen = {name.strip() for name in text.split(",") if name.strip()}
        if not chosen or not chosen <= set(allowed):
            raise argparse.ArgumentTypeError(f"{text!r}: choose among {','.join(allowed)}")
        return [name for name in allowed if name in chosen]

    return parse


def homa_option(pair: str) -> str:
    """One ``--homa-option``, checked for its form (kept as written, for the server process)."""
    key, sep, _ = pair.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{pair!r}: expected KEY=VALUE")
    return pair


def homa_options_of(pairs: list[str]) -> dict[str, Any]:
    """``--homa-option`` values as ``homa.open`` keyword arguments: integers and
    ``true``/``false`` parsed, anything else a string."""
    flags = {"true": True, "false": False}
    options: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        options[key] = int(value) if value.lstrip("-").isdigit() else flags.get(value, value)
    return options


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m homa.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--workload", type=names(WORKLOADS), default=list(WORKLOADS), metavar="LIST",
                        help=f"comma-separated: {','.join(WORKLOADS)} (default: all)")  # fmt: skip
    parser.add_argument("--contender", type=names(CONTENDERS), default=list(CONTENDERS),
                        metavar="LIST", help=f"comma-separated: {','.join(CONTENDERS)} (default: all)")  # fmt: skip
    parser.add_argument("--size", type=int, default=100, help="small: message bytes (default 100)")
    parser.add_argument("--concurrency", type=int, default=64, metavar="N",
                        help="small: calls in flight (default 64)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="time per contender, row and round (default 0.5)")  # fmt: skip
    parser.add_argument("--in-process", action="store_true", help="servers on the client's loop")
    parser.add_argument("--uvloop", action="store_true", help="use uvloop")
    parser.add_argument("--homa-option", action="append", default=[], type=homa_option,
                        metavar="KEY=VALUE", help="a homa.open option for every homa socket, both ends, e.g. "
                             "max_active_per_peer=8 (repeatable)")  # fmt: skip
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results there")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    homa.retain_freed_buffers()  # as the homa command does: large messages otherwise churn pages
    if args.uvloop:
        import uvloop

        uvloop.install()
    if args.serve:
        options = homa_options_of(args.homa_option)
        asyncio.run(serve_forever("127.0.0.1", args.contender, args.workload, options))
        return
    skipped = {}
    for name in args.contender:
        reason = missing_package(name)
        if reason is not None:
            skipped[name] = reason
            print(f"skipping {name}: {reason} (pip install 'homa-transport[bench]')", file=sys.stderr)
    if "tensor" in args.workload and importlib.util.find_spec("numpy") is None:
        skipped["tensor"] = "numpy is not importable"
        print("skipping the tensor workload: numpy is not importable", file=sys.stderr)
        args.workload.remove("tensor")
    contenders = [name for name in args.contender if name not in skipped]
    if not contenders or not args.workload:
        parser.error("nothing left to measure")
    rows = asyncio.run(bench(args, contenders))
    mode = "one process" if args.in_process else "client and servers in two processes"
    print(f"Echo RPCs over loopback, {mode}, {'uvloop' if args.uvloop else 'asyncio'}; "
          f"rounds: {args.rounds}, interleaved, each {args.seconds:g} s per contender and row")  # fmt: skip
    print_table(rows)
    if args.json is not None:
        setup = {"command": " ".join(["python -m homa.bench", *sys.argv[1:]]), "mode": mode,
                 "loop": "uvloop" if args.uvloop else "asyncio", "rounds": args.rounds,
                 "seconds": args.seconds, "python": platform.python_version(), "response": "echo"}  # fmt: skip
        report = {"setup": setup, "skipped": skipped, "rows": rows}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
