"""Shared fixtures: the repository's conformance files, event loops (asyncio, and uvloop when
installed), and free loopback ports."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[3]
CONFORMANCE = REPO / "conformance"

T = TypeVar("T")

#: Socket options for tests that are not about timeouts: Homa gives up on a peer silent for
#: `timeout_ticks` (100 ms by default), and an unoptimised build on a busy 2-core machine can
#: starve that long (homa-io's README advises raising it there). Tests of timeouts use the
#: defaults.
SLACK: dict[str, Any] = {"timeout_ticks": 1000}


def rss_bytes() -> int:
    """This process's resident memory."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

try:
    import uvloop

    HAVE_UVLOOP = True
except ImportError:  # optional
    HAVE_UVLOOP = False

LOOPS = ["asyncio"] + (["uvloop"] if HAVE_UVLOOP else [])


@pytest.fixture(params=LOOPS)
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Runs a coroutine to completion on a fresh event loop of the parametrised kind."""

    def runner(coro: Coroutine[Any, Any, T]) -> T:
        factory = uvloop.new_event_loop if request.param == "uvloop" else None
        with asyncio.Runner(loop_factory=factory) as r:
            return r.run(coro)

    return runner


def free_port() -> int:
    """A UDP port on 127.0.0.1 that is free now and within Homa's server range (<= 32767)."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port < 32768:
            return port
    # The kernel's ephemeral range is above 32767 on most systems: pick from below it.
    import random

    for _ in range(1000):
        port = random.randint(20000, 32767)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free UDP port below 32768")


@pytest.fixture
def port() -> int:
    return free_port()
