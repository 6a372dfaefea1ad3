"""Homa for asyncio: :func:`open` gives an :class:`AsyncSocket`.

A call is one RPC: ``await sock.call(addr, data)`` sends the request and returns the
response. A server takes requests with ``async for req in sock.requests()`` (or ``await
sock.recv_request()``) and answers with ``req.reply(data)`` (awaitable, never blocks), or
hands a handler to :meth:`AsyncSocket.serve`, which runs it concurrently for each request.

The event loop drives the socket itself: it watches the socket with ``loop.add_reader`` and,
when a packet arrives, receives and handles it on its own thread, so a response or request
reaches its awaiting task with one wake-up of the loop (as a TCP stream does) and no other
thread involved; for ``busy_poll`` (50 µs by default, adaptive, as a blocked thread polls)
after a call starts or a packet arrives, the loop polls instead of sleeping, so a quick
response costs no wake-up at all. While the loop is busy (a handler's synchronous work,
another thread holding the GIL), homa-io's driver thread receives and answers for it, and it
runs Homa's timers: a busy server answers late, and loses no call. What that thread completes
reaches the loop through an eventfd the loop also watches; homa's threads never take the
GIL. Works with any loop that supports ``add_reader`` (the default loop on Linux, uvloop)."""

from __future__ import annotations

import asyncio
import asyncio.selector_events
import inspect
import logging
import select
import socket
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Union

from . import _native
from ._native import Request
from .errors import InvalidArgumentError, ShutdownError

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._native import Address, Bytes

__all__ = ["AsyncSocket", "Opening", "open"]

log = logging.getLogger("homa")


def open(
    port: int | None = None,
    host: str = "0.0.0.0",
    transport: str = "udp",
    **options: Any,
) -> Opening:
    """Opens a socket for the running event loop: ``sock = await homa.open(...)``, or
    ``async with homa.open(...) as sock:``, which closes it at the end of the block.

    ``port`` given: a server on Homa port ``port`` (between 1 and 32767; with UDP also the
    UDP port) of ``host`` (an IP address or a name such as ``"localhost"``), which can also
    make calls. ``port=None``: a client with an ephemeral port.
    ``transport``: ``"udp"`` (default, unprivileged), ``"ip"`` (IP protocol 146, as the Linux
    module; CAP_NET_RAW), ``"uring"`` or ``"uring-ip"``. Other keyword arguments are those of
    :class:`homa.Socket`: ``busy_poll``, ``allow``, ``reuse_port`` (several worker processes
    serving one port, see :mod:`homa.workers`) and any ``Config`` field (``mtu``,
    ``timeout_ticks``, ``max_message_length``...)."""
    return Opening(port, host, transport, options)


class Opening(Coroutine[Any, Any, "AsyncSocket"]):
    """What :func:`open` returns: await it (or pass it to ``asyncio.run``) for the socket,
    or use it with ``async with``, which closes the socket at the end."""

    def __init__(
        self, port: int | None, host: str, transport: str, options: dict[str, Any]
    ) -> None:
        self._args = (port, host, transport, options)
        self._coro: Coroutine[Any, Any, AsyncSocket] | None = None
        self._sock: AsyncSocket | None = None

    async def _open(self) -> AsyncSocket:
        loop = asyncio.get_running_loop()
        port, host, transport, options = self._args
        native = _native.Socket(port, host, transport, **options)
        return AsyncSocket(native, loop)

    def _started(self) -> Coroutine[Any, Any, AsyncSocket]:
        # Made on first use: one never awaited (the `async with` form) would be warned of.
        if self._coro is None:
            self._coro = self._open()
        return self._coro

    def __await__(self) -> Generator[Any, None, AsyncSocket]:
        return self._started().__await__()

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, *args: Any) -> Any:
        return self._started().throw(*args)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> AsyncSocket:
        self._sock = await self._open()
        return self._sock

    async def __aexit__(self, *exc_info: object) -> None:
        if self._sock is not None:
            self._sock.close()


class AsyncSocket:
    """A Homa socket bound to one asyncio event loop. Close it with :meth:`close` or use
    ``async with``: pending calls then fail with :class:`homa.ShutdownError`."""

    def __init__(self, native: _native.Socket, loop: asyncio.AbstractEventLoop) -> None:
        self._native = native
        self._loop = loop
        # Host names given as destinations, and what they resolved to.
        self._resolved: dict[Address, tuple[str, int]] = {}
        self._reactor = _native.Reactor(native.busy_poll)
        self._fd = self._reactor.fileno()
        loop.add_reader(self._fd, self._reactor.dispatch)
        # The loop drives the socket: packets are received and handled on its thread.
        self._poller = native._poller()
        self._watch = _watch(loop, self._poller.fileno())
        self._poller_fd = self._watch.fileno() if self._watch else self._poller.fileno()
        on_readable, self._poll = _drivers(loop, self._poller, self._reactor)
        loop.add_reader(self._poller_fd, on_readable)
        # A socket dropped without close() must still leave the loop: a descriptor left
        # registered would shadow the next socket given its number (asyncio would take
        # that one as registered already). The finalizer holds what it detaches, the native
        # socket included, so the descriptors stay open until the loop has let them go.
        self._detach = weakref.finalize(
            self, _detach_soon, loop, self._reactor, self._poller, native, self._watch
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
    def mtu(self) -> int:
        """The largest IP packet this socket sends (given, or the interface's)."""
        return self._native.mtu

    @property
    def link_mbps(self) -> int:
        """The link rate the pacer keeps to, Mbit/s (given, or the interface's)."""
        return self._native.link_mbps

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the underlying socket closed)."""
        return not self._detach.alive or self._native.closed

    def _check_loop(self) -> None:
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("this homa socket belongs to another event loop")

    async def call(
        self,
        dest: Address,
        message: Bytes,
        timeout: float | None = None,
        *,
        block: bool = True,
    ) -> memoryview:
        """Sends ``message`` (any bytes-like object: read-only ones such as ``bytes`` are
        sent without a copy, writable ones copied once) to the Homa server at ``dest``
        (``(host, port)`` or ``"host:port"``; the host an IP address or a name, resolved
        without blocking the loop and remembered by this socket) and returns its response, a
        read-only ``memoryview`` over the buffer it was received into (no copy).

        ``timeout`` (seconds) bounds the call (:class:`homa.TimeoutError`, kind
        ``"timeout"``; also ``asyncio.TimeoutError``). Independently, a server that sends
        nothing for Homa's own timeout (``timeout_ticks``: 100 ms by default) although
        asked to resend fails the call sooner, with kind ``"peer_silent"``: it is presumed
        down. When the outgoing messages fill the send buffer (``wmem_max``), the call
        waits for room, as a write to a full socket does; with ``block=False`` it raises
        :class:`homa.ResourceLimitError` instead. Cancelling the awaiting task
        (``task.cancel()``, ``asyncio.wait_for``, ``asyncio.timeout``) aborts the RPC: it
        is forgotten at once and the server is not told."""
        self._check_loop()
        future = self._loop.create_future()
        if type(dest) is str or type(dest) is tuple:
            dest = self._resolved.get(dest, dest)
        try:
            token = self._native._call_async(self._reactor, future, dest, message, timeout, block)
        except InvalidArgumentError as e:
            if e.kind != "host_name":
                raise
            resolved = await self._resolve(dest)
            token = self._native._call_async(
                self._reactor, future, resolved, message, timeout, block
            )
        if self._reactor.busy_poll(False):
            self._loop.call_soon(self._poll)
        try:
            return await future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            self._reactor.cancel(token)
            raise

    async def _resolve(self, dest: Address) -> tuple[str, int]:
        """The address a host name in ``dest`` resolves to (of the socket's family)."""
        if isinstance(dest, str):
            host, _, port_text = dest.rpartition(":")
            port = int(port_text)
        else:
            host, port = dest[0], dest[1]
        family = socket.AF_INET6 if ":" in self.local_addr[0] else socket.AF_INET
        try:
            found = await self._loop.getaddrinfo(host, port, family=family, type=socket.SOCK_DGRAM)
        except OSError as e:
            raise InvalidArgumentError(f"cannot resolve {host!r}: {e}") from e
        resolved = (str(found[0][4][0]), port)
        if len(self._resolved) >= 1024:
            self._resolved.clear()
        self._resolved[dest] = resolved
        return resolved

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
        handler: Handler,
        *,
        on_error: Callable[[Request, Exception], Bytes | None] | None = None,
    ) -> None:
        """Serves until the socket is closed (or the task is cancelled): each request runs
        ``await handler(req)`` in its own task, and the bytes-like object it returns is the
        response. A plain (not ``async``) function is run in the loop's default thread pool
        (``loop.run_in_executor``), so a handler that blocks or computes does not stall the
        loop; anything else that is not callable raises ``TypeError`` at once.

        If the handler raises, the exception is logged (logger ``"homa"``) and the server
        keeps serving. The request is then answered with ``on_error(req, exc)`` if that is
        given and returns bytes, else discarded: Homa has no error responses, so the
        client's Homa restarts the request (the handler may run again) until Homa's own
        timeout (``timeout_ticks``, kind ``"peer_silent"``) or the call's ``timeout`` (kind
        ``"timeout"``) passes, whichever comes first (:class:`homa.TimeoutError` both).
        Give ``on_error`` to answer failures."""
        if not callable(handler):
            name = type(handler).__name__
            raise TypeError(f"serve() needs a function of the request, not {name}")
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
        handler: Handler,
        on_error: Callable[[Request, Exception], Bytes | None] | None,
    ) -> None:
        try:
            if _is_async(handler):
                response = await handler(req)  # type: ignore[misc]
            else:
                response = await self._loop.run_in_executor(None, handler, req)
                if inspect.isawaitable(response):  # e.g. a lambda returning a coroutine
                    response = await response
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

    def metrics_text(self, labels: dict[str, str] | None = None) -> str:
        """The metrics in Prometheus' text format (see :meth:`homa.Socket.metrics_text`)."""
        return self._native.metrics_text(labels)

    def close(self) -> None:
        """Closes the socket: pending calls fail with :class:`homa.ShutdownError`, the
        request iterators end. Idempotent; call it from the socket's loop."""
        if self._detach.detach() is not None:  # once: its descriptors may be reused after
            _detach(self._loop, self._reactor, self._poller, self._native, self._watch)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<homa.AsyncSocket {self._native!r}>"


Handler = Callable[[Request], Union[Awaitable["Bytes"], "Bytes"]]
"""A request handler for :meth:`AsyncSocket.serve`: ``async def`` or a plain function."""


def _is_async(handler: object) -> bool:
    """Whether calling ``handler`` gives a coroutine (an ``async def``, maybe wrapped in
    ``functools.partial`` or an object with an ``async def __call__``)."""
    target = getattr(handler, "func", handler)
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)
    )


def _watch(loop: asyncio.AbstractEventLoop, fd: int) -> select.epoll | None:
    """What `loop` watches for the socket `fd`: the socket itself, or for loops other than
    asyncio's own an epoll instance holding it. libuv (uvloop) drops a reader whose
    descriptor reports an error condition (EPOLLERR: an ICMP error queued on the socket, as
    when a client closed before the response reached it), where asyncio calls it to read the
    error; an epoll instance is only ever readable."""
    if isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop):
        return None
    watch = select.epoll()
    watch.register(fd, select.EPOLLIN)
    return watch


def _detach(
    loop: asyncio.AbstractEventLoop,
    reactor: _native.Reactor,
    poller: _native.Poller,
    native: _native.Socket,
    watch: select.epoll | None,
) -> None:
    """Takes a socket off `loop` and closes it (on the loop's thread)."""
    if not loop.is_closed():
        # Before the socket (and its descriptor) goes.
        loop.remove_reader(watch.fileno() if watch else poller.fileno())
    if watch:
        watch.close()
    poller.close()
    native.close()
    reactor.dispatch()  # resolve what the shutdown failed
    if not loop.is_closed():
        loop.remove_reader(reactor.fileno())


def _drivers(
    loop: asyncio.AbstractEventLoop, poller: _native.Poller, reactor: _native.Reactor
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The loop's callbacks that drive the socket: one for when it is readable, and one
    that busy-polls (homa-io's rule, as a blocked thread polls: while it is scheduled the
    loop's selector does not sleep, so a response that comes back soon costs no wake-up).
    They hold no reference to the AsyncSocket, which can then be collected."""

    def poll() -> None:
        if poller.drive(reactor):
            reactor.busy_poll(True)  # what arrived pays for the window
        if reactor.keep_polling():
            loop.call_soon(poll)

    def on_readable() -> None:
        if poller.drive(reactor) and reactor.busy_poll(True):
            loop.call_soon(poll)

    return on_readable, poll


def _detach_soon(
    loop: asyncio.AbstractEventLoop,
    reactor: _native.Reactor,
    poller: _native.Poller,
    native: _native.Socket,
    watch: select.epoll | None,
) -> None:
    """`_detach` for a socket that was garbage-collected, maybe on another thread."""
    try:
        loop.call_soon_threadsafe(_detach, loop, reactor, poller, native, watch)
    except RuntimeError:  # the loop is closed: nothing to take it off
        _detach(loop, reactor, poller, native, watch)


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
