"""A pool of workers on one Homa port, run by test_workers.py: ``worker_pool.py PORT
OBSERVER_PORT``. Each worker tells the observer (a Homa server in the test) when it is up
and when it holds a request, so that the test waits on those notes, never on time."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import homa
import homa.workers

SLACK: dict[str, Any] = {"timeout_ticks": 1000}


#: Requests held unanswered for ever (a request dropped would be discarded).
HELD: list[homa.Request] = []


async def answer(req: homa.Request, notes: homa.AsyncSocket, observer: tuple[str, int]) -> None:
    pid = str(os.getpid()).encode()
    if bytes(req.message) == b"hold":
        # The observer says whether to hold it or to answer.
        if bytes(await notes.call(observer, b"held " + pid, timeout=30)) == b"hold":
            HELD.append(req)
            return
    await req.reply(pid)


async def serve(port: int, observer: tuple[str, int]) -> None:
    async with homa.open(port, "127.0.0.1", reuse_port=True, **SLACK) as sock:
        async with homa.open(host="127.0.0.1", **SLACK) as notes:
            await notes.call(observer, f"up {os.getpid()}".encode(), timeout=30)
            tasks: set[asyncio.Task[None]] = set()
            async for req in sock.requests():
                task = asyncio.ensure_future(answer(req, notes, observer))
                tasks.add(task)
                task.add_done_callback(tasks.discard)


def worker(port: int, observer_port: int) -> None:
    asyncio.run(serve(port, ("127.0.0.1", observer_port)))


if __name__ == "__main__":
    homa.workers.run(worker, 3, int(sys.argv[1]), int(sys.argv[2]))
