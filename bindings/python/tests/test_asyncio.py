"""The asyncio API over UDP loopback, on asyncio's loop and on uvloop (when installed)."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import homa
from conftest import SLACK, free_port, rss_bytes

LOCAL = "127.0.0.1"


async def echo_server(port: int, **options: Any) -> tuple[homa.AsyncSocket, asyncio.Task[None]]:
    srv = await homa.open(port=port, host=LOCAL, **{**SLACK, **options})

    async def serve() -> None:
        async for req in srv.requests():
            await req.reply(req.message)

    return srv, asyncio.create_task(serve())


@pytest.mark.parametrize("size", [1, 1424, 100_000, 1_000_000])
def test_echo_sizes(run: Callable[[Any], Any], port: int, size: int) -> None:
    async def main() -> None:
        srv, task = await echo_server(port)
        async with homa.open(host=LOCAL, **SLACK) as cli:
            message = bytes(i % 251 for i in range(size))
            assert await cli.call(srv.local_addr, message, timeout=10) == message
        srv.close()
        await task  # the iterator ends when the socket closes

    run(main())


def test_buffer_types(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        srv, task = await echo_server(port)
        async with homa.open(host=LOCAL, **SLACK) as cli:
            a = np.arange(10_000, dtype=np.float32)
            messages: list[Any] = [
                bytearray(b"abc"),
                memoryview(b"xyzw")[1:3],
                a,
                a[::2],  # strided: copied once
                a.reshape(100, 100)[:, 3],  # strided, 2-D
            ]
            for message in messages:
                expected = memoryview(message).tobytes()
                assert await cli.call(f"{LOCAL}:{port}", message, timeout=10) == expected
        srv.close()
        await task

    run(main())


def test_thousand_concurrent_calls(run: Callable[[Any], Any], port: int) -> None:
    """1,000 calls at once to one server, whose handler answers them one by one on the same
    loop. Homa's rules make every call that waits more than `resend_ticks` (5 ms) send a
    RESEND, answered by a BUSY, every `resend_interval` (5 ms): 1,000 waiting calls are
    400,000 packets a second, more than one loop thread of an unoptimised build handles, so
    the queues grow until calls time out. The client therefore resends after 100 ms, as
    the Python README advises for calls that wait on slow handlers; this test is about
    1,000 futures parked and resolved, not about surviving that storm."""

    async def main() -> None:
        srv, task = await echo_server(port)
        slow: dict[str, Any] = {"resend_ticks": 100, "resend_interval": 100, "timeout_ticks": 2000}
        async with homa.open(host=LOCAL, **slow) as cli:
            messages = [b"call %d" % i for i in range(1000)]
            calls = [cli.call(srv.local_addr, m, timeout=30) for m in messages]
            assert await asyncio.gather(*calls) == messages
            assert cli.metrics()["pending_calls"] == 0
        srv.close()
        await task

    run(main())


def test_cancelled_call_aborts_the_rpc(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        srv = await homa.open(port=port, host=LOCAL)
        cli = await homa.open(host=LOCAL)
        call = asyncio.create_task(cli.call(srv.local_addr, b"never answered"))
        held = await srv.recv_request()  # the request is in; the RPC is in flight
        assert bytes(held.message) == b"never answered"
        assert cli.metrics()["pending_calls"] == 1
        assert cli.metrics()["core"]["rpcs"] == 1
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # Aborted: the client forgot the RPC at once (no event, nothing pending).
        m = cli.metrics()
        assert (m["pending_calls"], m["core"]["rpcs"]) == (0, 0)
        # Cancellation through asyncio.wait_for aborts the same way.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(cli.call(srv.local_addr, b"again"), 0.05)
        assert cli.metrics()["core"]["rpcs"] == 0
        # A late reply to the aborted RPC is harmless.
        await held.reply(b"late")
        cli.close()
        srv.close()

    run(main())


def silent_udp_port() -> socket.socket:
    """A UDP socket that receives and never answers: a peer that went silent."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOCAL, free_port()))  # a Homa server port (<= 32767)
    return s


def test_timeout_against_a_silent_port(run: Callable[[Any], Any]) -> None:
    async def main() -> None:
        with silent_udp_port() as silent:
            async with homa.open(host=LOCAL) as cli:
                dest = silent.getsockname()
                # The caller's deadline, earlier than Homa's: it is the one reported.
                with pytest.raises(homa.TimeoutError) as err:
                    await cli.call(dest, b"hello?", timeout=0.05)
                assert isinstance(err.value, asyncio.TimeoutError)
                assert isinstance(err.value, TimeoutError)
                assert err.value.kind == "timeout", err.value
                # Homa's own timeout (timeout_ticks of silence), earlier than the caller's.
                for timeout in [None, 30.0]:
                    with pytest.raises(homa.TimeoutError) as err:
                        await cli.call(dest, b"hello?", timeout=timeout)
                    assert err.value.kind == "peer_silent", err.value
                    assert "went silent" in str(err.value) and "timeout_ticks" in str(err.value)
                assert cli.metrics()["core"]["client_timeouts"] == 2

    run(main())


def test_closed_port_is_unreachable(run: Callable[[Any], Any]) -> None:
    async def main() -> None:
        dest = (LOCAL, free_port())  # nobody listens: ICMP port unreachable
        async with homa.open(host=LOCAL) as cli:
            started = time.monotonic()
            with pytest.raises(homa.UnreachableError) as err:
                await cli.call(dest, b"anyone?", timeout=5)
            assert err.value.kind == "unreachable"
            assert isinstance(err.value, ConnectionRefusedError)
            assert isinstance(err.value, homa.PeerUnknownError)
            # At once, not after a timeout (generous bound for a slow machine).
            assert time.monotonic() - started < 2.5

    run(main())


def test_handler_that_raises(
    run: Callable[[Any], Any], port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that raises: the client's call fails with homa.TimeoutError (Homa has no
    error responses; the request is discarded), and the server keeps serving. With
    `on_error`, the client gets that reply instead."""

    async def handler(req: homa.Request) -> bytes:
        if bytes(req.message) == b"boom":
            raise RuntimeError("model exploded")
        return b"ok: " + req.message

    def on_error(req: homa.Request, exc: Exception) -> bytes:
        return b"error: " + str(exc).encode()

    async def main(with_on_error: bool) -> None:
        # A fresh port each time: the logged tracebacks keep the first server's requests,
        # and with them its UDP socket, alive.
        srv = await homa.open(port=free_port(), host=LOCAL)
        server = asyncio.create_task(srv.serve(handler, on_error=on_error if with_on_error else None))
        async with homa.open(host=LOCAL) as cli:
            if with_on_error:
                assert bytes(await cli.call(srv.local_addr, b"boom", timeout=5)) == b"error: model exploded"
            else:
                # Each RESEND of the client finds the request gone (RPC_UNKNOWN), and it
                # restarts it; no response ever comes, so Homa's own timeout (100 ms) ends
                # the call, before the call's.
                with pytest.raises(homa.TimeoutError) as err:
                    await cli.call(srv.local_addr, b"boom", timeout=5)
                assert err.value.kind == "peer_silent"
            assert bytes(await cli.call(srv.local_addr, b"next", timeout=5)) == b"ok: next"
        srv.close()
        await server

    with caplog.at_level(logging.ERROR, logger="homa"):
        run(main(False))
        run(main(True))
    assert any("handler failed" in r.message for r in caplog.records)


def test_bad_input(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        srv, task = await echo_server(port)
        cli = await homa.open(host=LOCAL)
        dest = srv.local_addr
        with pytest.raises(TypeError, match="bytes-like"):
            await cli.call(dest, "a str is not bytes")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="bytes-like"):
            await cli.call(dest, 42)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="dest"):
            await cli.call(1234, b"x")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="host name"):
            await cli.call(("not a host", port), b"x")
        with pytest.raises(TypeError, match="timeout"):
            await cli.call(dest, b"x", timeout="soon")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout"):
            await cli.call(dest, b"x", timeout=-1)
        with pytest.raises(homa.MessageTooLargeError) as too_large:
            await cli.call(dest, bytes(1_000_001))
        assert isinstance(too_large.value, ValueError)
        with pytest.raises(homa.InvalidArgumentError, match="between 1 and 1,000,000 bytes"):
            await cli.call(dest, b"")
        # Ports: out of u16, or not a server port (0, 32768..), as an argument or a dest.
        for bad in (-1, 0, 32768, 65536, 70000):
            with pytest.raises(ValueError):
                await homa.open(port=bad, host=LOCAL)
        with pytest.raises(ValueError):
            await cli.call((LOCAL, 70000), b"x")
        with pytest.raises(homa.InvalidArgumentError):
            await cli.call((LOCAL, 40000), b"x")
        with pytest.raises(TypeError):
            await homa.open(port="4000", host=LOCAL)  # type: ignore[arg-type]
        with pytest.raises(homa.PortInUseError):
            await homa.open(port=port, host=LOCAL)
        with pytest.raises(ValueError, match="transport"):
            await homa.open(transport="carrier-pigeon")
        with pytest.raises(homa.ConfigError) as cfg:
            await homa.open(host=LOCAL, mtu=50)
        assert cfg.value.field == "mtu"
        with pytest.raises(TypeError, match="unknown config field"):
            await homa.open(host=LOCAL, no_such_tunable=1)
        # The socket still works after all that.
        assert bytes(await cli.call(dest, b"still fine", timeout=5)) == b"still fine"
        # A closed socket.
        cli.close()
        cli.close()  # idempotent
        with pytest.raises(homa.ShutdownError):
            await cli.call(dest, b"x")
        srv.close()
        await task
        with pytest.raises(homa.ShutdownError):
            await srv.recv_request()

    run(main())


def test_close_fails_pending_calls(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        srv = await homa.open(port=port, host=LOCAL)
        cli = await homa.open(host=LOCAL)
        call = asyncio.create_task(cli.call(srv.local_addr, b"x"))
        await srv.recv_request()
        cli.close()
        with pytest.raises(homa.ShutdownError):
            await call
        srv.close()

    run(main())


def test_closed_server_frees_its_port(run: Callable[[Any], Any], port: int) -> None:
    """close() lets go of the port at once, even if the socket object lives on (a traceback
    or a reference cycle may keep it)."""

    async def main() -> None:
        srv, task = await echo_server(port)
        async with homa.open(host=LOCAL, **SLACK) as cli:
            assert bytes(await cli.call(srv.local_addr, b"x", timeout=5)) == b"x"
        srv.close()
        await task
        again = await homa.open(port=port, host=LOCAL)  # srv is still referenced here
        assert srv.metrics()["core"]["requests_received"] == 1  # readable after close
        again.close()

    run(main())


def test_a_dropped_socket_leaves_its_loop(run: Callable[[Any], Any], port: int) -> None:
    """Review finding: a socket garbage-collected without close() left its descriptors
    registered with the loop; the next socket given the same numbers was then taken as
    registered already, and its packets were never read (a server waited forever). The
    same when the underlying socket was closed first and then the AsyncSocket."""

    async def main() -> None:
        for how in ("dropped", "closed underneath"):
            gone = await homa.open(host=LOCAL)
            if how == "dropped":
                del gone
                gc.collect()
            else:
                gone.socket.close()
                gone.close()
            await asyncio.sleep(0)  # one loop turn: the finalizer's detach runs
            srv, task = await echo_server(port)
            async with homa.open(host=LOCAL, **SLACK) as cli:
                reply = await asyncio.wait_for(cli.call(srv.local_addr, b"x"), 30)
                assert bytes(reply) == b"x", how
            srv.close()
            await task

    run(main())


def test_socket_belongs_to_its_loop(port: int) -> None:
    sock = asyncio.run(homa.open(host=LOCAL))

    async def other_loop() -> None:
        with pytest.raises(RuntimeError, match="another event loop"):
            await sock.call((LOCAL, port), b"x")

    asyncio.run(other_loop())
    sock.socket.close()


def test_cancelled_receiver_loses_no_request(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        srv = await homa.open(port=port, host=LOCAL)
        waiting = asyncio.create_task(srv.recv_request())
        await asyncio.sleep(0)  # one turn of the loop (FIFO): the task runs up to its await
        assert srv._reactor.pending() == 1  # parked
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        async with homa.open(host=LOCAL) as cli:
            call = asyncio.create_task(cli.call(srv.local_addr, b"hi", timeout=5))
            req = await srv.recv_request()
            await req.reply(bytes(req.message).upper())
            assert bytes(await call) == b"HI"
        assert srv._reactor.pending() == 0
        srv.close()

    run(main())


async def _calls(cli: homa.AsyncSocket, dest: Any, n: int) -> None:
    for i in range(n):
        await cli.call(dest, b"%d" % i, timeout=10)


def test_no_leaks_over_100000_calls(port: int) -> None:
    """100,000 calls, ten at a time, keep RSS flat. The bound: 4 MiB over 100,000 calls is
    40 bytes a call. A leaked request or response (>= 100 bytes of message plus its Python
    object and Rust bookkeeping, several hundred bytes) or a leaked buffer export per call
    would exceed it; allocator noise after the warm-up (arena growth, caches) stays well
    below it. The count of GC-tracked Python objects is checked exactly as well, and no
    received message is still lent."""
    import gc

    async def main() -> None:
        srv, task = await echo_server(port)
        cli = await homa.open(host=LOCAL, **SLACK)
        dest = srv.local_addr
        await _calls(cli, dest, 2_000)  # warm-up: pools, caches, arenas
        gc.collect()
        rss0, objects0 = rss_bytes(), len(gc.get_objects())
        await asyncio.gather(*(_calls(cli, dest, 10_000) for _ in range(10)))
        gc.collect()
        rss1, objects1 = rss_bytes(), len(gc.get_objects())
        assert cli.metrics()["pending_calls"] == 0
        assert cli.metrics()["lent_bytes"] == 0 and cli.metrics()["calls"]["count"] == 102_000
        assert cli._reactor.pending() == 0
        cli.close()
        srv.close()
        await task
        assert rss1 - rss0 < 4 << 20, f"RSS grew by {(rss1 - rss0) / 1024:.0f} KiB"
        assert objects1 - objects0 < 100, f"{objects1 - objects0} more Python objects"

    asyncio.run(main())


def test_serve_runs_handlers_concurrently(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        srv = await homa.open(port=port, host=LOCAL)
        gate = asyncio.Event()
        arrived = 0

        async def handler(req: homa.Request) -> memoryview:
            nonlocal arrived
            arrived += 1
            if arrived == 2:
                gate.set()
            await gate.wait()  # both must be in the handler at once
            return req.message

        server = asyncio.create_task(srv.serve(handler))
        async with homa.open(host=LOCAL, **SLACK) as cli:
            calls: list[Awaitable[memoryview]] = [cli.call(srv.local_addr, m, timeout=5) for m in (b"a", b"b")]
            assert await asyncio.gather(*calls) == [b"a", b"b"]
        srv.close()
        await server

    run(main())


def test_read_only_sends_are_not_copied(run: Callable[[Any], Any], port: int) -> None:
    """A read-only buffer being sent is exported, not copied: the view cannot be released
    while its call is pending, and can once the call is over (homa released the export)."""

    async def main() -> None:
        srv = await homa.open(port=port, host=LOCAL)
        async with homa.open(host=LOCAL, **SLACK) as cli:
            data = bytearray(b"tensor" * 1000)
            view = memoryview(data).toreadonly()
            call = asyncio.create_task(cli.call(srv.local_addr, view, timeout=5))
            req = await srv.recv_request()
            with pytest.raises(BufferError):
                view.release()  # exported: homa holds it until the RPC is over
            await req.reply(bytes(req.message))
            assert await call == data
            view.release()  # released
        srv.close()

    run(main())


def test_writable_sends_are_copied(run: Callable[[Any], Any], port: int) -> None:
    """A writable buffer is copied when the call starts (homa's thread reads the bytes
    while Python runs): changing it meanwhile changes nothing that is sent, and it is not
    held (it can be resized at once)."""

    async def main() -> None:
        srv = await homa.open(port=port, host=LOCAL)
        async with homa.open(host=LOCAL, **SLACK) as cli:
            payload = bytearray(b"a" * 300_000)
            call = asyncio.create_task(cli.call(srv.local_addr, payload, timeout=5))
            await asyncio.sleep(0)  # the call starts: its bytes are taken now
            payload[:] = b"b" * len(payload)
            payload.append(0)  # not exported
            req = await srv.recv_request()
            assert req.message == b"a" * 300_000
            await req.reply(b"ok")
            assert bytes(await call) == b"ok"
        srv.close()

    run(main())


def test_open_works_with_async_with_and_with_await(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        async with homa.open(port=port, host=LOCAL, **SLACK) as srv:
            assert isinstance(srv, homa.AsyncSocket) and not srv.closed
            cli = await homa.open(host=LOCAL, **SLACK)
            serving = asyncio.ensure_future(srv.serve(echo))
            assert bytes(await cli.call(srv.local_addr, b"both forms")) == b"both forms"
            cli.close()
            serving.cancel()
        assert srv.closed  # the block closed it

    run(main())


async def echo(req: homa.Request) -> memoryview:
    return req.message


def test_serve_runs_a_plain_function_in_a_thread(run: Callable[[Any], Any], port: int) -> None:
    threads: list[int] = []

    def handler(req: homa.Request) -> memoryview:
        threads.append(threading.get_ident())
        return req.message[::-1]

    async def main() -> None:
        async with homa.open(port=port, host=LOCAL, **SLACK) as srv, homa.open(
            host=LOCAL, **SLACK
        ) as cli:
            serving = asyncio.ensure_future(srv.serve(handler))
            replies = await asyncio.gather(*(cli.call(srv.local_addr, b"abc") for _ in range(8)))
            assert replies == [b"cba"] * 8
            assert threading.get_ident() not in threads  # not on the loop's thread
            serving.cancel()

    run(main())


def test_serve_refuses_what_is_not_a_function(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        async with homa.open(port=port, host=LOCAL) as srv:
            with pytest.raises(TypeError, match="function of the request"):
                await srv.serve(b"not a handler")  # type: ignore[arg-type]

    run(main())


def test_more_calls_than_the_send_buffer_holds_wait_for_room(
    run: Callable[[Any], Any], port: int
) -> None:
    """200 concurrent 1,000,000-byte calls need 200 MB of send buffer: with a 20 MB
    `wmem_max` most wait for room, and all complete. With block=False one fails fast."""
    big = bytes(range(256)) * 3906 + bytes(64)  # 1,000,000 bytes

    async def main() -> None:
        async with homa.open(port=port, host=LOCAL, **SLACK) as srv, homa.open(
            host=LOCAL, wmem_max=20_000_000, **SLACK
        ) as cli:
            serving = asyncio.ensure_future(srv.serve(lambda req: b"ok"))
            replies = await asyncio.gather(*(cli.call(srv.local_addr, big) for _ in range(200)))
            assert replies == [b"ok"] * 200
            # Fill the buffer, then ask not to wait.
            waiting = [asyncio.ensure_future(cli.call(srv.local_addr, big)) for _ in range(40)]
            await asyncio.sleep(0)
            with pytest.raises(homa.ResourceLimitError) as err:
                await cli.call(srv.local_addr, big, block=False)
            assert err.value.kind == "tx_buffer_full"
            assert await asyncio.gather(*waiting) == [b"ok"] * 40
            serving.cancel()

    run(main())


def test_host_names_are_resolved(run: Callable[[Any], Any], port: int) -> None:
    async def main() -> None:
        async with homa.open(port=port, host="localhost", **SLACK) as srv, homa.open(
            host="localhost", **SLACK
        ) as cli:
            assert srv.local_addr == ("127.0.0.1", port)
            serving = asyncio.ensure_future(srv.serve(echo))
            assert bytes(await cli.call(("localhost", port), b"by name")) == b"by name"
            assert bytes(await cli.call(f"localhost:{port}", b"by name")) == b"by name"
            with pytest.raises(homa.InvalidArgumentError, match="cannot resolve"):
                await cli.call(("no-such-host.invalid", port), b"x")
            serving.cancel()

    run(main())


def test_a_message_longer_than_the_server_accepts_is_logged_once(
    run: Callable[[Any], Any], port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the client raised max_message_length: the server drops the message, counts it
    as too long and says so once, in the "homa" logger."""

    async def main() -> None:
        async with homa.open(port=port, host=LOCAL, **SLACK) as srv, homa.open(
            host=LOCAL, max_message_length=2_000_000
        ) as cli:
            serving = asyncio.ensure_future(srv.serve(echo))
            with caplog.at_level(logging.WARNING, logger="homa"):
                for _ in range(2):
                    with pytest.raises(homa.TimeoutError):
                        await cli.call(srv.local_addr, bytes(1_500_000), timeout=0.5)
            warned = [r for r in caplog.records if "max_message_length" in r.getMessage()]
            assert len(warned) == 1, [r.getMessage() for r in caplog.records]
            assert "1500000 bytes" in warned[0].getMessage()
            drops = srv.metrics()["core"]["drops"]
            assert drops["too_long"] > 0 and drops["malformed"] == 0, drops
            serving.cancel()

    run(main())


def test_a_server_serves_on_after_icmp_errors(run) -> None:  # type: ignore[no-untyped-def]
    """Clients that close before the server's last packets reach them leave ICMP port
    unreachable errors on the server's socket (an error condition on its descriptor, which
    uvloop's reader used to be dropped for). Two servers sharing a port: their sockets have
    no receiving thread of homa-io's that would read the errors first."""

    async def main() -> None:
        port = free_port()
        servers = [await homa.open(port, "127.0.0.1", reuse_port=True, **SLACK) for _ in range(2)]
        serving = [asyncio.ensure_future(s.serve(lambda req: req.message)) for s in servers]
        for i in range(64):
            async with homa.open(host="127.0.0.1", **SLACK) as client:
                assert await client.call(("127.0.0.1", port), bytes([i]), timeout=10) == bytes([i])
        assert sum(s.metrics()["transport"]["unreachable"] for s in servers) > 0
        for s in servers:
            s.close()
        await asyncio.gather(*serving, return_exceptions=True)

    run(main())
