"""Homa for asyncio: :func:`open` gives an :class:`AsyncSocket`.

A call is one RPC: ``await sock.call(addr, data)`` sends the request and returns the
response. A server takes requests with ``async for req in sock.requests()`` (or ``await
sock.recv_request()``) and answers with ``req.reply(data)`` (awaitable, never blocks), or
hands a handler to :meth:`AsyncSocket.serve`, which runs it concurrently for each request.

The event loop drives the socket itself: it watches the socket with ``loop.add_reader`` and,
when a packet arrives, receives and handles it on its own thread, so a response or request
reaches its awaiting task with one wake-up of the loop (as a TCP stream does) and no other
thread involved. homa-io's driver thread still runs Homa's timers while the loop is busy or
idle; what it completes reaches the loop through an eventfd the loop also watches. Nothing
polls, and homa's threads never take the GIL. Works with any loop that supports
``add_reader`` (the default loop on Linux, uvloop)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from . import _native
from ._errors import ShutdownError
from ._native import Request

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._native import Address, Bytes

__all__ = ["AsyncSocket", "open"]

log = logging.getLogger("homa")


async def open(
    port: int | None = None,
    host: str = "0.0.0.0",
    transport: str = "udp",
    **options: Any,
) -> AsyncSocket:
    """Opens a socket for the running event loop.

    ``port`` given: a server on Homa port ``port`` (1..32767; with UDP also the UDP port) of
    ``host``, which can also make calls. ``port=None``: a client with an ephemeral port.
    ``transport``: ``"udp"`` (default, unprivileged), ``"ip"`` (IP protocol 146, as the Linux
    module; CAP_NET_RAW), ``"uring"`` or ``"uring-ip"``. Other keyword arguments are those of
    :class:`homa.Socket`: ``busy_poll``, ``allow`` and any ``Config`` field (``mtu``,
    ``timeout_ticks``...)."""
    loop = asyncio.get_running_loop()
    native = _native.Socket(port, host, transport, **options)
    return AsyncSocket(native, loop)


class AsyncSocket:
    """A Homa socket bound to one asyncio event loop. Close it with :meth:`close` or use
    ``async with``: pending calls then fail with :class:`homa.ShutdownError`."""

    def __init__(self, native: _native.Socket, loop: asyncio.AbstractEventLoop) -> None:
        self._native = native
        self._loop = loop
        self._reactor = _native.Reactor()
        self._fd = self._reactor.fileno()
        loop.add_reader(self._fd, self._reactor.dispatch)
        # The loop drives the socket: packets are received and handled on its thread.
        self._poller = native._poller()
        self._poller_fd = self._poller.fileno()
        loop.add_reader(self._poller_fd, self._poller.drive, self._reactor)
        # A socket dropped without close() must still leave the loop: a descriptor left
        # registered would shadow the next socket given its number (asyncio would take
        # that one as registered already). The finalizer holds what it detaches, the native
        # socket included, so the descriptors stay open until the loop has let them go.
        self._detach = weakref.finalize(
            self, _detach_soon, loop, self._reactor, self._poller, native
        )

    @property
    def socket(self) -> _native.Socket:
        """The underlying blocking :class:`homa.Socket`."""
        return self._native

    @property
    def local_addr(self) -> tuple[str, int]:
        """Where peers reach this socket, ``(host, port)``."""
        return self._native.local_addr

    @property
    def port(self) -> int:
        """The Homa port (the server port, or the client's ephemeral port)."""
        return self._native.port

    @property
    def transport(self) -> str:
        """The transport in use."""
        return self._native.transport

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the underlying socket closed)."""
        return not self._detach.alive or self._native.closed

    def _check_loop(self) -> None:
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("this homa socket belongs to another event loop")

    async def call(self, dest: Address, message: Bytes, timeout: float | None = None) -> bytes:
        """Sends ``message`` (any bytes-like object: read-only ones such as ``bytes`` are
        sent without a copy, writable ones copied once) to the Homa server at ``dest`` (``(host, port)`` or
        ``"host:port"``) and returns its response.

        ``timeout`` (seconds) bounds the call (:class:`homa.TimeoutError`, which is also
        ``asyncio.TimeoutError``); without it a silent server still fails the call after
        Homa's own timeout (``timeout_ticks``, 100 ms of silence by default). Cancelling the
        awaiting task (``task.cancel()``, ``asyncio.wait_for``, ``asyncio.timeout``) aborts
        the RPC: it is forgotten at once and the server is not told."""
        self._check_loop()
        future = self._loop.create_future()
        token = self._native._call_async(self._reactor, future, dest, message, timeout)
        try:
            return await future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            self._reactor.cancel(token)
            raise

    async def recv_request(self) -> Request:
        """The next request (servers only; a client socket never gets one). Raises
        :class:`homa.ShutdownError` once the socket is closed."""
        self._check_loop()
        leftover = self._reactor.take_leftover()
        if leftover is not None:
            return leftover
        future = self._loop.create_future()
        ready, token = self._native._recv_async(self._reactor, future)
        if ready is not None:
            return ready
        try:
            return await future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            if not self._reactor.cancel(token) and future.done() and not future.cancelled():
                self._reactor.push_leftover(future.result())
            raise

    def requests(self) -> _Requests:
        """Requests as they arrive: ``async for req in sock.requests(): ...``. The iteration
        ends when the socket is closed."""
        return _Requests(self)

    async def serve(
        self,
        handler: Callable[[Request], Awaitable[Bytes]],
        *,
        on_error: Callable[[Request, Exception], Bytes | None] | None = None,
    ) -> None:
        """Serves until the socket is closed (or the task is cancelled): each request runs
        ``await handler(req)`` in its own task, and the bytes-like object it returns is the
        response.

        If the handler raises, the exception is logged (logger ``"homa"``) and the server
        keeps serving. The request is then answered with ``on_error(req, exc)`` if that is
        given and returns bytes, else discarded: Homa has no error responses, so the client
        re-sends the request (the handler may run again) and finally fails with
        :class:`homa.TimeoutError`, after its ``timeout`` or Homa's silence timeout
        (``timeout_ticks``), whichever comes first."""
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for req in self.requests():
                task = self._loop.create_task(self._handle(req, handler, on_error))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for task in tasks:
                task.cancel()

    async def _handle(
        self,
        req: Request,
        handler: Callable[[Request], Awaitable[Bytes]],
        on_error: Callable[[Request, Exception], Bytes | None] | None,
    ) -> None:
        try:
            response = await handler(req)
            req.reply(response)
        except ShutdownError:
            pass
        except Exception as exc:
            log.exception("homa: handler failed for request %d from %s", req.id, req.peer)
            answer = None
            if on_error is not None:
                try:
                    answer = on_error(req, exc)
                except Exception:
                    log.exception("homa: on_error failed")
            if answer is not None and not req.answered:
                try:
                    req.reply(answer)
                except Exception:
                    log.exception("homa: could not send the error reply")
            else:
                req.discard()

    def metrics(self) -> dict[str, Any]:
        """Counters (see :meth:`homa.Socket.metrics`)."""
        return self._native.metrics()

    def close(self) -> None:
        """Closes the socket: pending calls fail with :class:`homa.ShutdownError`, the
        request iterators end. Idempotent; call it from the socket's loop."""
        if self._detach.detach() is not None:  # once: its descriptors may be reused after
            _detach(self._loop, self._reactor, self._poller, self._native)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<homa.AsyncSocket {self._native!r}>"


def _detach(
    loop: asyncio.AbstractEventLoop,
    reactor: _native.Reactor,
    poller: _native.Poller,
    native: _native.Socket,
) -> None:
    """Takes a socket off `loop` and closes it (on the loop's thread)."""
    if not loop.is_closed():
        # Before the socket (and its descriptor) goes.
        loop.remove_reader(poller.fileno())
    poller.close()
    native.close()
    reactor.dispatch()  # resolve what the shutdown failed
    if not loop.is_closed():
        loop.remove_reader(reactor.fileno())


def _detach_soon(
    loop: asyncio.AbstractEventLoop,
    reactor: _native.Reactor,
    poller: _native.Poller,
    native: _native.Socket,
) -> None:
    """`_detach` for a socket that was garbage-collected, maybe on another thread."""
    try:
        loop.call_soon_threadsafe(_detach, loop, reactor, poller, native)
    except RuntimeError:  # the loop is closed: nothing to take it off
        _detach(loop, reactor, poller, native)


class _Requests:
    """The async iterator :meth:`AsyncSocket.requests` returns."""

    def __init__(self, sock: AsyncSocket) -> None:
        self._sock = sock

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Request:
        try:
            return await self._sock.recv_request()
        except ShutdownError:
            raise StopAsyncIteration from None
