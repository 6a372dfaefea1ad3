"""gRPC services over Homa on asyncio: grpcio's generated stubs and servicers, unchanged.

    channel = homa.grpc.aio.insecure_channel("host:port")   # was grpc.aio.insecure_channel
    server = homa.grpc.aio.server()                          # was grpc.aio.server()

Each unary call is one Homa RPC (request and response framed as in ``_wire``). Deadlines,
metadata both ways, status codes and details, cancellation and servicer exceptions behave
as in grpc.aio; streaming methods raise ``NotImplementedError`` when called."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, NoReturn

import grpc

from .. import _native, errors
from ..aio import AsyncSocket
from ..aio import open as open_socket
from . import _common, _wire
from ._common import MetadataLike

Serializer = Callable[[Any], bytes] | None


class Channel(_common.UnaryOnly):
    """What ``insecure_channel`` returns: generated ``*Stub`` classes take it as they take a
    ``grpc.aio.Channel``. One Homa client socket, opened at the first call; ``options`` may
    hold its options as ``("homa.<name>", value)``."""

    def __init__(self, target: str, options: Sequence[tuple[str, Any]] | None = None) -> None:
        self._host, self._port = _common.split_target(target)
        self._options = _common.socket_options(options)
        self._socket: AsyncSocket | None = None
        self._opening: asyncio.Task[AsyncSocket] | None = None
        self._ids = itertools.count(1)

    async def _sock(self) -> AsyncSocket:
        if self._socket is None:
            if self._opening is None:
                host = _common.client_host(self._host)
                self._opening = asyncio.ensure_future(open_socket(host=host, **self._options))
            self._socket = await self._opening
        return self._socket

    def unary_unary(
        self,
        method: str,
        request_serializer: Serializer = None,
        response_deserializer: Serializer = None,
        _registered_method: bool | None = False,
    ) -> UnaryUnaryMultiCallable:
        return UnaryUnaryMultiCallable(self, method, request_serializer, response_deserializer)

    async def channel_ready(self) -> None:
        await self._sock()

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return grpc.ChannelConnectivity.READY if self._socket else grpc.ChannelConnectivity.IDLE

    async def close(self, grace: float | None = None) -> None:
        """Closes the socket: calls still pending fail with ``CANCELLED``."""
        if self._socket is not None:
            self._socket.close()

    async def __aenter__(self) -> Channel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class UnaryUnaryMultiCallable:
    """``stub.Method``: calling it starts a call (awaitable for the response)."""

    def __init__(
        self, channel: Channel, method: str, serialize: Serializer, deserialize: Serializer
    ) -> None:
        self._channel, self._method = channel, method
        self._serialize, self._deserialize = serialize, deserialize

    def __call__(
        self,
        request: Any,
        *,
        timeout: float | None = None,
        metadata: MetadataLike | None = None,
        credentials: Any = None,
        wait_for_ready: bool | None = None,
        compression: Any = None,
    ) -> UnaryUnaryCall:
        payload = self._serialize(request) if self._serialize else request
        frame = _common.request_frame(
            next(self._channel._ids), self._method, payload, timeout, metadata
        )
        return UnaryUnaryCall(self._channel, frame, timeout, self._deserialize)


class UnaryUnaryCall:
    """One call in flight: ``await`` it for the response (or the ``AioRpcError``)."""

    def __init__(
        self, channel: Channel, frame: _wire.Frame, timeout: float | None, deserialize: Serializer
    ) -> None:
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._deserialize = deserialize
        self._initial: tuple[tuple[str, Any], ...] = ()
        self._trailing: tuple[tuple[str, Any], ...] = ()
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._task = asyncio.ensure_future(self._run(channel, frame, timeout))

    async def _run(self, channel: Channel, frame: _wire.Frame, timeout: float | None) -> Any:
        try:
            sock = await channel._sock()
            reply = await sock.call((channel._host, channel._port), _wire.encode(frame), timeout)
            response = _wire.decode(reply)
        except asyncio.CancelledError:
            self._code, self._details = grpc.StatusCode.CANCELLED, "Locally cancelled"
            raise
        except errors.HomaError as e:
            self._code, self._details = _common.status_of(e, self._expired())
            raise self._error() from None
        except _wire.FrameError as e:
            self._code, self._details = grpc.StatusCode.INTERNAL, f"a malformed response: {e}"
            raise self._error() from None
        self._initial = tuple(response.initial_metadata)
        self._code, self._details, self._trailing = _common.read_status(response)
        if self._code != grpc.StatusCode.OK:
            raise self._error()
        data = bytes(response.message or b"")
        return self._deserialize(data) if self._deserialize else data

    def _expired(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _error(self) -> grpc.aio.AioRpcError:
        code = self._code or grpc.StatusCode.UNKNOWN
        meta = grpc.aio.Metadata
        return grpc.aio.AioRpcError(code, meta(*self._initial), meta(*self._trailing), self._details)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._task.__await__()

    def cancel(self) -> bool:
        return self._task.cancel()

    def cancelled(self) -> bool:
        return self._task.cancelled()

    def done(self) -> bool:
        return self._task.done()

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def add_done_callback(self, callback: Callable[[UnaryUnaryCall], None]) -> None:
        self._task.add_done_callback(lambda _: callback(self))

    async def _finished(self) -> None:
        await asyncio.wait([self._task])

    async def code(self) -> grpc.StatusCode:
        await self._finished()
        return self._code or grpc.StatusCode.UNKNOWN

    async def details(self) -> str:
        await self._finished()
        return self._details

    async def initial_metadata(self) -> grpc.aio.Metadata:
        await self._finished()
        return grpc.aio.Metadata(*self._initial)

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        await self._finished()
        return grpc.aio.Metadata(*self._trailing)

    async def wait_for_connection(self) -> None:
        return None


def insecure_channel(target: str, options: Sequence[tuple[str, Any]] | None = None) -> Channel:
    """A channel to the Homa server at ``target`` (``host:port``, a Homa port)."""
    return Channel(target, options)


class _Abort(Exception):
    """Raised by ``context.abort``: the status is in the context."""


class ServicerContext:
    """The ``context`` a servicer method gets, as grpc.aio's."""

    def __init__(self, frame: _wire.Frame, peer: str, deadline: float | None) -> None:
        self._invocation = tuple(
            (k, v) for k, v in frame.initial_metadata if not k.startswith(":") and k != "grpc-timeout"
        )
        self._peer = peer
        self._deadline = deadline
        self._code: grpc.StatusCode | None = None
        self._details: str | None = None
        self._trailing: list[tuple[str, str | bytes]] = []
        self._initial: list[tuple[str, str | bytes]] = []

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._invocation

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def peer(self) -> str:
        return self._peer

    def set_trailing_metadata(self, metadata: MetadataLike) -> None:
        self._trailing = _common.user_metadata(metadata)

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return tuple(self._trailing)

    async def send_initial_metadata(self, metadata: MetadataLike) -> None:
        self._initial = _common.user_metadata(metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str | None:
        return self._details

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: MetadataLike = ()
    ) -> NoReturn:
        if code == grpc.StatusCode.OK:
            raise ValueError("abort with OK: abort is for errors")
        self._code, self._details = code, details
        if trailing_metadata:
            self.set_trailing_metadata(trailing_metadata)
        raise _Abort()

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return False


class Server:
    """What ``server()`` returns: generated ``add_*Servicer_to_server`` functions take it as
    they take a ``grpc.aio.Server``. ``options`` may hold the Homa sockets' options as
    ``("homa.<name>", value)``, and ``("grpc.so_reuseport", 1)`` lets several processes serve
    one port (off by default, unlike grpcio's; see :mod:`homa.workers`)."""

    def __init__(self, options: Sequence[tuple[str, Any]] | None = None) -> None:
        self._generic: list[grpc.GenericRpcHandler] = []
        self._registered: dict[str, grpc.RpcMethodHandler] = {}
        self._natives: list[_native.Socket] = []
        self._sockets: list[AsyncSocket] = []
        self._serving: list[asyncio.Task[None]] = []
        self._calls: set[asyncio.Task[None]] = set()
        self._stopped: asyncio.Event | None = None
        self._options = _common.socket_options(options)
        given = dict(options or ())
        self._reuse_port = bool(given.get("grpc.so_reuseport", self._options.pop("reuse_port", 0)))

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for name, handler in method_handlers.items():
            self._registered[f"/{service_name}/{name}"] = handler

    def add_insecure_port(self, address: str) -> int:
        """Serves on Homa port ``port`` of ``host`` (``host:port``); returns the port.
        Port 0 picks a free one (never shared)."""
        host, port = _common.split_target(address)
        host = {"": "0.0.0.0", "::": "::", "0.0.0.0": "0.0.0.0"}.get(host, host)
        if port == 0:
            native = _free_port_socket(host, self._options)
        else:
            native = _native.Socket(port, host, reuse_port=self._reuse_port, **self._options)
        self._natives.append(native)
        return int(native.port)

    def add_secure_port(self, address: str, server_credentials: Any) -> NoReturn:
        raise NotImplementedError("homa.grpc serves without TLS: use add_insecure_port")

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        for native in self._natives:
            sock = AsyncSocket(native, loop)
            self._sockets.append(sock)
            self._serving.append(asyncio.ensure_future(self._serve(sock)))

    async def _serve(self, sock: AsyncSocket) -> None:
        try:
            async for req in sock.requests():
                task = asyncio.ensure_future(self._handle(req))
                self._calls.add(task)
                task.add_done_callback(self._calls.discard)
        except errors.ShutdownError:
            pass

    def _lookup(self, method: str, metadata: tuple[tuple[str, Any], ...]) -> Any:
        handler = self._registered.get(method)
        if handler is not None:
            return handler
        details = _CallDetails(method, metadata)
        for generic in self._generic:
            handler = generic.service(details)
            if handler is not None:
                return handler
        return None

    async def _handle(self, req: Any) -> None:
        try:
            frame = _wire.decode(req.message)
        except _wire.FrameError:
            req.discard()
            return
        text = {k: v for k, v in frame.initial_metadata if isinstance(v, str)}
        path = text.get(":path", "")
        timeout = _wire.parse_timeout(text.get("grpc-timeout", ""))
        deadline = None if timeout is None else time.monotonic() + timeout
        context = ServicerContext(frame, f"homa:{req.peer[0]}:{req.peer[1]}", deadline)
        handler = self._lookup(path, context.invocation_metadata())
        message: bytes | None = None
        details: str | None
        if handler is None:
            code, details = grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {path}"
        elif handler.unary_unary is None:
            code, details = grpc.StatusCode.UNIMPLEMENTED, f"{path}: streaming over Homa"
        else:
            code, details, message = await self._run(handler, frame, context, timeout)
        reply = _wire.Frame(
            frame.stream_id,
            1,
            False,
            context._initial,
            _common.status_metadata(code, details, context._trailing),
            message,
        )
        try:
            await req.reply(_wire.encode(reply))
        except errors.MessageTooLargeError as e:
            too_big = _common.status_metadata(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e), ())
            await req.reply(_wire.encode(_wire.Frame(frame.stream_id, 1, False, [], too_big, None)))
        except errors.HomaError:
            pass  # the client is gone

    async def _run(
        self, handler: Any, frame: _wire.Frame, context: ServicerContext, timeout: float | None
    ) -> tuple[grpc.StatusCode, str | None, bytes | None]:
        try:
            data = bytes(frame.message or b"")
            request = handler.request_deserializer(data) if handler.request_deserializer else data
            result = handler.unary_unary(request, context)
            if asyncio.iscoroutine(result):
                result = await asyncio.wait_for(result, timeout)
            if context._code not in (None, grpc.StatusCode.OK):
                return context._code, context._details, None
            serialize = handler.response_serializer
            return grpc.StatusCode.OK, context._details, serialize(result) if serialize else result
        except _Abort:
            return context._code or grpc.StatusCode.UNKNOWN, context._details, None
        except asyncio.TimeoutError:
            return grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", None
        except Exception as e:  # a servicer's exception: UNKNOWN, as grpcio reports it
            return grpc.StatusCode.UNKNOWN, f"Unexpected {type(e)}: {e}", None

    async def stop(self, grace: float | None) -> None:
        """Stops taking calls; those in progress get ``grace`` seconds (None: as long as
        they take), then are cancelled."""
        for task in self._serving:
            task.cancel()
        if self._calls:
            _, pending = await asyncio.wait(set(self._calls), timeout=grace)
            for task in pending:
                task.cancel()
        for sock in self._sockets:
            sock.close()
        if self._stopped is not None:
            self._stopped.set()

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        if self._stopped is None:
            return False
        try:
            await asyncio.wait_for(self._stopped.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True


class _CallDetails(grpc.HandlerCallDetails):  # type: ignore[misc]
    def __init__(self, method: str, invocation_metadata: tuple[tuple[str, Any], ...]) -> None:
        self.method = method
        self.invocation_metadata = invocation_metadata


def _free_port_socket(host: str, options: dict[str, Any]) -> _native.Socket:
    """A server socket on a free Homa port (Homa's server ports are 1 to 32767)."""
    for port in random.sample(range(20000, 32768), 1000):
        try:
            return _native.Socket(port, host, **options)
        except errors.PortInUseError:
            continue
    raise errors.PortInUseError("no free Homa port found between 20000 and 32767")


def server(
    migration_thread_pool: Any = None,
    handlers: Sequence[grpc.GenericRpcHandler] | None = None,
    interceptors: Any = None,
    options: Sequence[tuple[str, Any]] | None = None,
    maximum_concurrent_rpcs: int | None = None,
    compression: Any = None,
) -> Server:
    """A server to add servicers and ports to, as ``grpc.aio.server()``."""
    if interceptors:
        raise NotImplementedError("homa.grpc.aio.server: interceptors are not supported yet")
    s = Server(options)
    if handlers:
        s.add_generic_rpc_handlers(handlers)
    return s
