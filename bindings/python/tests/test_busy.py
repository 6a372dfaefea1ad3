"""A busy server loses no call: a handler that blocks its event loop (a model step, a long
GC pause), another thread holding the GIL, a slow handler thread behind the blocking API.

The client runs in its own process with Homa's default timeout (a server silent for 100 ms
although asked to resend is presumed dead), so each test fails if the server's Homa stops
answering while its application is busy. Each call must succeed, and neither host may drop
a datagram for want of buffer space."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import homa
from conftest import HAVE_UVLOOP

#: The client: `n` concurrent calls of `size` bytes to `port`; prints what failed, and its
#: host's drops, as JSON.
CLIENT = r"""
import asyncio, json, sys, homa

async def main(port, size, n):
    async with homa.open(host="127.0.0.1") as client:
        message = bytes(range(256)) * (size // 256) + bytes(size % 256)
        calls = (client.call(("127.0.0.1", port), message, timeout=60) for _ in range(n))
        results = await asyncio.gather(*calls, return_exceptions=True)
        bad = [repr(r) if isinstance(r, BaseException) else "echo differs"
               for r in results if isinstance(r, BaseException) or bytes(r) != message]
        drops = client.metrics()["transport"]["rx_overflow"]
        print(json.dumps({"bad": bad, "drops": drops}))

asyncio.run(main(*map(int, sys.argv[1:])))
"""


def start_client(port: int, size: int, n: int) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", CLIENT, str(port), str(size), str(n)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


def finish_client(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    result: dict[str, Any] = json.loads(out)
    return result


def serve_while_busy(
    loop_kind: str, port: int, size: int, n: int, busy: Callable[[], None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Serves `n` calls of `size` bytes, running `busy` on the loop's thread when the first
    request arrives; returns the client's result and the server's metrics."""

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with homa.open(port=port, host="127.0.0.1") as server:
            first = True

            async def handler(req: homa.Request) -> memoryview:
                nonlocal first
                if first:
                    first = False
                    busy()  # the loop does nothing else meanwhile
                return req.message

            serving = asyncio.create_task(server.serve(handler))
            proc = start_client(port, size, n)
            result = await asyncio.get_running_loop().run_in_executor(None, finish_client, proc)
            serving.cancel()
            return result, server.metrics()

    if loop_kind == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
            return r.run(main())
    return asyncio.run(main())


def check(result: dict[str, Any], server: dict[str, Any]) -> None:
    assert result["bad"] == [], result
    assert result["drops"] == 0, "the client's host dropped datagrams"
    assert server["transport"]["rx_overflow"] == 0, "the server's host dropped datagrams"


LOOPS = ["asyncio"] + (["uvloop"] if HAVE_UVLOOP else [])


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("block", [0.15, 0.5, 2.0])
@pytest.mark.parametrize("n", [1, 8])
@pytest.mark.parametrize("size", [100, 1_000_000])
def test_a_handler_that_blocks_the_loop_loses_no_call(
    loop_kind: str, block: float, n: int, size: int, port: int
) -> None:
    result, server = serve_while_busy(loop_kind, port, size, n, lambda: time.sleep(block))
    check(result, server)
    assert server["loop_stalls"] > 0, "the driver thread never received for the busy loop"


def test_a_ten_second_block_loses_no_call(port: int) -> None:
    result, server = serve_while_busy("asyncio", port, 100, 8, lambda: time.sleep(10))
    check(result, server)


def test_another_thread_holding_the_gil_loses_no_call(port: int) -> None:
    def hold_the_gil() -> None:
        # Pure Python for 2 s in another thread, with the interpreter asked to switch
        # threads only every 5 s: the loop's thread waits for the GIL the whole time.
        def spin() -> None:
            interval = sys.getswitchinterval()
            sys.setswitchinterval(5)
            try:
                end = time.monotonic() + 2
                while time.monotonic() < end:
                    pass
            finally:
                sys.setswitchinterval(interval)

        threading.Thread(target=spin).start()

    result, server = serve_while_busy("asyncio", port, 1_000_000, 8, hold_the_gil)
    check(result, server)


@pytest.mark.parametrize("n", [1, 8])
def test_the_blocking_api_with_a_slow_handler_thread_loses_no_call(n: int, port: int) -> None:
    with homa.Socket(port, "127.0.0.1") as server:
        proc = start_client(port, 100, n)
        for _ in range(n):
            req = server.recv_request(timeout=60)
            time.sleep(0.5)  # the handler's work; nothing else takes requests meanwhile
            req.reply(req.message)
        result = finish_client(proc)
        check(result, server.metrics())
