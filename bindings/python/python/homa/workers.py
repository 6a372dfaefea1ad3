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

Whenever a worker exits or joins, the kernel hands many clients to other workers, not only
the dead worker's. Calls in flight are not lost: a client whose worker changed, finding
that the worker it now reaches does not know its call, sends the request again (Homa's
restart). So a request may run twice, on two workers: handlers must be safe to run twice,
and one that kills its worker will kill the next. While no worker serves the port, calls
fail as unreachable.

A socket opened with ``reuse_port=True`` serves only: a response to a call it made could
reach another worker, so its calls fail with :class:`homa.InvalidArgumentError` (kind
``"shared_port"``); open a client socket (``homa.open()``) for calls."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["run"]

_log = logging.getLogger("homa.workers")

# A worker that fails before it has served this long is replaced after a delay that
# doubles with each such failure (from _FIRST_DELAY up to _MAX_DELAY), so that a crash loop
# (a model that fails to load, a request that kills every worker) does not spin.
_SETTLED = 60.0
_FIRST_DELAY = 0.1
_MAX_DELAY = 10.0
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _worker(target: Callable[..., object], args: tuple[Any, ...]) -> None:
    # SIGTERM (how run stops a worker) unwinds it as sys.exit does, so `finally` blocks and
    # `async with` exits run; its status says it was stopped, not that it finished. Ctrl-C
    # in a terminal reaches every process of the group: the supervisor stops the workers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_follow, args=(parent.sentinel,), daemon=True).start()
    target(*args)


def _follow(parent_sentinel: int) -> None:
    """Stops this worker when the supervisor is gone (killed, crashed): a worker left
    behind would go on sharing the port with the next supervisor's."""
    wait([parent_sentinel])
    os.kill(os.getpid(), signal.SIGTERM)


def run(target: Callable[..., object], workers: int, *args: Any, grace: float = 10.0) -> None:
    """Runs ``target(*args)`` in ``workers`` processes (started with multiprocessing's
    ``spawn``, so ``target`` and ``args`` must be picklable: a module-level function, and
    the call under ``if __name__ == "__main__":`` in the main script) and watches them:

    - a worker that exits with status 0 has finished and is not replaced; :func:`run`
      returns once all have;
    - one that fails (an exception, a signal, another status) is replaced at once, or, if
      it failed within a minute of its start, after a delay doubling from 0.1 s to 10 s;
    - SIGTERM or SIGINT (Ctrl-C) to this process stops the workers with SIGTERM (which
      raises ``SystemExit`` in them), waits ``grace`` seconds for them, kills those left,
      and returns; so does any error of :func:`run` itself, which it then raises.

    Each worker opens its server socket itself, with ``reuse_port=True``. Call it from the
    main thread (it handles signals); workers stop when this process dies."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    spawn = multiprocessing.get_context("spawn")
    procs: dict[int, BaseProcess] = {}  # slot -> its process
    started: dict[int, float] = {}
    delays: dict[int, float] = {}
    due: dict[int, float] = {}  # slot -> when to replace its worker
    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    # The signal handler only sets a flag; the wake-up socket ends the wait at once.
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    previous = {s: signal.signal(s, on_signal) for s in _STOP_SIGNALS}
    previous_fd = signal.set_wakeup_fd(wake_w.fileno())
    try:
        for slot in range(workers):
            due[slot] = 0.0
        while (procs or due) and not stopping:
            now = time.monotonic()
            for slot in [s for s, t in due.items() if t <= now]:
                del due[slot]
                name = f"homa-worker-{slot}"
                worker = spawn.Process(target=_worker, args=(target, args), name=name)
                procs[slot], started[slot] = worker, now
                worker.start()
            timeout = max(0.0, min(due.values()) - now) if due else None
            wait([*(p.sentinel for p in procs.values()), wake_r], timeout)
            with contextlib.suppress(BlockingIOError):
                while wake_r.recv(64):
                    pass
            for slot, gone in list(procs.items()):
                if gone.exitcode is None or stopping:
                    continue
                del procs[slot]
                gone.join()
                if gone.exitcode == 0:
                    continue
                how = f"signal {-gone.exitcode}" if gone.exitcode < 0 else f"status {gone.exitcode}"
                if time.monotonic() - started[slot] < _SETTLED:
                    delays[slot] = min(_MAX_DELAY, delays.get(slot, _FIRST_DELAY / 2) * 2)
                else:
                    delays.pop(slot, None)
                delay = delays.get(slot, 0.0)
                _log.warning(
                    "worker %d (pid %s) exited with %s; replacing it in %.1f s",
                    slot, gone.pid, how, delay,
                )
                due[slot] = time.monotonic() + delay
    finally:
        _stop([p for p in procs.values() if p.pid is not None], grace)
        signal.set_wakeup_fd(previous_fd)
        for s, handler in previous.items():
            signal.signal(s, handler)
        wake_r.close()
        wake_w.close()


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
