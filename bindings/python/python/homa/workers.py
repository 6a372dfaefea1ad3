"""Several processes serving one Homa port.

A Python server computes on one core; to use more, run several worker processes that each
open the same port with ``reuse_port=True``. The kernel hands each client (a client socket:
its address and port) to one of them by a hash, and keeps it there. :func:`run` starts the
workers and replaces any that dies::

    import asyncio, homa, homa.workers

    async def serve(port):
        async with homa.open(port, reuse_port=True) as sock:
            async for req in sock.requests():
                await req.reply(bytes(req.message).upper())

    def worker(port):
        asyncio.run(serve(port))

    if __name__ == "__main__":
        homa.workers.run(worker, 4, 4000)

A gRPC server does the same with ``homa.grpc.aio.server(options=[("grpc.so_reuseport", 1)])``.

When a worker dies, the kernel moves its clients to the others at once, and the other
workers' calls go on. A call the dead worker held is not lost: its client, finding that the
worker it now reaches does not know the call, sends the request again (Homa's restart), so
that request runs a second time; handlers must be safe to run twice, and one that kills its
worker will kill the next. The replacement then takes over some clients (the kernel spreads
them again; calls in flight at that moment restart the same way).

A socket opened with ``reuse_port=True`` serves only: a response to a call it made could
reach another worker, so its calls fail with :class:`homa.InvalidArgumentError` (kind
``"shared_port"``); open a client socket (``homa.open()``) for calls."""

from __future__ import annotations

import logging
import multiprocessing
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["run"]

_log = logging.getLogger("homa.workers")

# A worker that dies sooner than this after its start is restarted after a delay that
# doubles each time (from _FIRST_DELAY up to _MAX_DELAY), so a crash loop does not spin.
_QUICK_DEATH = 1.0
_FIRST_DELAY = 0.1
_MAX_DELAY = 10.0


class _Stop(Exception):
    """SIGTERM reached the supervisor."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Stop


def _worker(target: Callable[..., object], args: tuple[Any, ...]) -> None:
    # SIGTERM (run's way to stop a worker) unwinds it as sys.exit would, so `finally`
    # blocks and `async with` exits run; Ctrl-C in a terminal reaches every process of the
    # group, and the supervisor stops the workers in turn.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(*args)


def run(
    target: Callable[..., object], workers: int, *args: Any, grace: float = 10.0
) -> None:
    """Runs ``target(*args)`` in ``workers`` processes (started with multiprocessing's
    ``spawn``, so ``target`` and ``args`` must be picklable: a module-level function, under
    ``if __name__ == "__main__":`` in the main script) and watches them:

    - a worker that exits with status 0 has finished and is not replaced; :func:`run`
      returns once all have;
    - one that fails (an exception, a signal, a non-zero status) is replaced at once, or
      after a growing delay (0.1 s doubling to 10 s) while replacements die within a second;
    - SIGTERM or SIGINT (Ctrl-C) to this process stops the workers with SIGTERM (which
      raises ``SystemExit`` in them), waits ``grace`` seconds for them, kills those left,
      and returns.

    Each worker opens its server socket itself, with ``reuse_port=True``."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    spawn = multiprocessing.get_context("spawn")
    procs: dict[int, BaseProcess] = {}  # slot -> process
    started: dict[int, float] = {}
    delays: dict[int, float] = {}
    due: dict[int, float] = {}  # slot -> when to restart it

    def start(slot: int) -> None:
        p = spawn.Process(target=_worker, args=(target, args), name=f"homa-worker-{slot}")
        p.start()
        procs[slot], started[slot] = p, time.monotonic()

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        for slot in range(workers):
            start(slot)
        while procs or due:
            now = time.monotonic()
            for slot in [s for s, t in due.items() if t <= now]:
                del due[slot]
                start(slot)
            timeout = max(0.0, min(due.values()) - now) if due else None
            wait([p.sentinel for p in procs.values()], timeout)
            for slot, p in list(procs.items()):
                if p.exitcode is None:
                    continue
                del procs[slot]
                p.join()
                if p.exitcode == 0:
                    continue
                how = f"signal {-p.exitcode}" if p.exitcode < 0 else f"status {p.exitcode}"
                if time.monotonic() - started[slot] < _QUICK_DEATH:
                    delays[slot] = min(_MAX_DELAY, delays.get(slot, _FIRST_DELAY / 2) * 2)
                else:
                    delays.pop(slot, None)
                delay = delays.get(slot, 0.0)
                _log.warning(
                    "worker %d (pid %s) exited with %s; replacing it in %.1f s",
                    slot, p.pid, how, delay,
                )
                due[slot] = time.monotonic() + delay
    except (_Stop, KeyboardInterrupt):
        _stop(list(procs.values()), grace)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(procs: list[BaseProcess], grace: float) -> None:
    for p in procs:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.exitcode is None:
            _log.warning("worker pid %s did not stop within %.0f s; killing it", p.pid, grace)
            p.kill()
            p.join()
