"""Several processes on one Homa port (``reuse_port=True``, :func:`homa.workers.run`): the
kernel spreads clients over them; a worker killed while it holds a call loses nothing (the
others keep serving, the held call runs again on another); its replacement serves new
clients; SIGTERM stops the pool."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
from conftest import SLACK, free_port

import homa

T = TypeVar("T")
POOL = Path(__file__).with_name("worker_pool.py")
WORKERS = 3
#: Clients (each its own UDP port) per round: enough that the kernel's hash leaves no
#: worker without one (that happens once in 10^7 rounds).
CLIENTS = 48


#: Bounds every wait of the test, so that a pool that cannot start fails it, not hangs it.
PATIENCE = 60


def soon(awaitable: Awaitable[T]) -> Awaitable[T]:
    return asyncio.wait_for(awaitable, PATIENCE)


class Observer:
    """The workers' notes, ``up <pid>`` and ``held <pid>``, sorted into queues."""

    def __init__(self, sock: homa.AsyncSocket) -> None:
        self.up: asyncio.Queue[int] = asyncio.Queue()
        self.held: asyncio.Queue[tuple[int, homa.Request]] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read(sock))

    async def _read(self, sock: homa.AsyncSocket) -> None:
        async for req in sock.requests():
            what, pid = bytes(req.message).split()
            if what == b"up":
                await req.reply(b"ok")
                self.up.put_nowait(int(pid))
            else:
                self.held.put_nowait((int(pid), req))


async def owners(addr: tuple[str, int]) -> list[int]:
    """Which worker answers each of CLIENTS new clients."""
    clients = [await homa.open(host="127.0.0.1", **SLACK) for _ in range(CLIENTS)]
    try:
        return [int(bytes(await c.call(addr, b"pid", timeout=30))) for c in clients]
    finally:
        for c in clients:
            c.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_pool_of_workers_serves_one_port_and_replaces_one_killed(run) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        port, observer_port = free_port(), free_port()
        addr = ("127.0.0.1", port)
        async with homa.open(observer_port, "127.0.0.1", **SLACK) as sock:
            observer = Observer(sock)
            pool = await asyncio.create_subprocess_exec(
                sys.executable, str(POOL), str(port), str(observer_port)
            )
            try:
                pids = {await soon(observer.up.get()) for _ in range(WORKERS)}
                assert set(await owners(addr)) == pids, "every worker gets clients"

                # A worker holds a call and is killed.
                client = await homa.open(host="127.0.0.1", **SLACK)
                victim = int(bytes(await client.call(addr, b"pid", timeout=30)))
                held = asyncio.ensure_future(client.call(addr, b"hold", timeout=60))
                pid, req = await soon(observer.held.get())
                assert pid == victim
                await req.reply(b"hold")
                os.kill(victim, signal.SIGKILL)

                # The others serve every client, and the held call runs again on one (the
                # replacement, if it is up by then).
                assert victim not in await owners(addr)
                rerun_by, again = await soon(observer.held.get())
                assert rerun_by != victim
                await again.reply(b"answer")
                assert int(bytes(await held)) == rerun_by
                client.close()

                # The replacement takes clients of its own.
                replacement = await soon(observer.up.get())
                assert replacement not in pids
                assert replacement in set(await owners(addr))
                workers = pids - {victim} | {replacement}
            finally:
                if pool.returncode is None:
                    pool.send_signal(signal.SIGTERM)
                try:
                    status = await soon(pool.wait())
                except asyncio.TimeoutError:
                    pool.kill()
                    raise
            assert status == 0
            assert all(gone(p) for p in workers), "the pool stopped its workers"

    run(main())


def test_a_shared_port_refuses_calls_and_clients(run) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        port = free_port()
        async with homa.open(port, "127.0.0.1", reuse_port=True) as a:
            async with homa.open(port, "127.0.0.1", reuse_port=True):
                with pytest.raises(homa.InvalidArgumentError) as e:
                    await a.call(("127.0.0.1", port), b"x")
                assert e.value.kind == "shared_port"
            with pytest.raises(homa.PortInUseError):
                await homa.open(port, "127.0.0.1")
        with pytest.raises(homa.InvalidArgumentError) as e:
            await homa.open(host="127.0.0.1", reuse_port=True)
        assert e.value.kind == "shared_port"

    run(main())
