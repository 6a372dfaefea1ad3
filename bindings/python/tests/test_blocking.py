"""The blocking socket: threads, timeouts, close, the context manager; the GIL is released
while a call or a receive waits (else the server thread below could never run)."""

from __future__ import annotations

import gc
import os
import platform
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import homa
from conftest import SLACK, rss_bytes

LOCAL = "127.0.0.1"


def serve_in_thread(server: homa.Socket) -> threading.Thread:
    def loop() -> None:
        while True:
            try:
                req = server.recv_request()
            except homa.ShutdownError:
                return
            req.reply(req.message[::-1])

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def test_call_and_reply_between_threads(port: int) -> None:
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(host=LOCAL, **SLACK) as client:
        assert server.port == port and server.transport == "udp"
        assert client.port >= homa.MIN_EPHEMERAL_PORT
        thread = serve_in_thread(server)
        for size in (1, 1424, 100_000, 1_000_000):
            message = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)
            assert client.call(server.local_addr, message, timeout=10) == message.tobytes()[::-1]
        server.close()  # wakes the blocked recv_request
        thread.join()
    assert server.closed and client.closed


def test_mtu_and_link_rate_come_from_the_interface_unless_given() -> None:
    """On loopback a socket sends 64 KB packets unpaced; values given win, the module's
    defaults (1500, 25,000) included."""
    with homa.Socket(host=LOCAL) as s:
        assert (s.mtu, s.link_mbps) == (65_535, 1_000_000)
    with homa.Socket(host=LOCAL, mtu=1500, link_mbps=25_000) as s:
        assert (s.mtu, s.link_mbps) == (1500, 25_000)
    with homa.Socket(host=LOCAL, mtu=9000) as s:
        assert (s.mtu, s.link_mbps) == (9000, 1_000_000)


def test_many_threads_share_a_socket(port: int) -> None:
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(host=LOCAL, **SLACK) as client:
        serve_in_thread(server)
        results: dict[int, memoryview] = {}

        def worker(i: int) -> None:
            for j in range(50):
                results[i * 100 + j] = client.call(server.local_addr, b"%d" % (i * 100 + j), timeout=10)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {k: (b"%d" % k)[::-1] for k in results} and len(results) == 400


def test_recv_request_timeout(port: int) -> None:
    with homa.Socket(port, host=LOCAL) as server:
        with pytest.raises(homa.TimeoutError):
            server.recv_request(timeout=0.01)
        with pytest.raises(TypeError):
            server.recv_request(timeout="1")  # type: ignore[arg-type]


def test_request_is_answered_once(port: int) -> None:
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(host=LOCAL, **SLACK) as client:
        results: list[memoryview] = []
        t = threading.Thread(target=lambda: results.append(client.call(server.local_addr, b"q", timeout=10)))
        t.start()
        req = server.recv_request(timeout=10)
        assert (bytes(req.message), req.answered) == (b"q", False)
        assert req.peer == client.local_addr
        assert req.id % 2 == 1
        req.reply(bytearray(b"a"))
        assert req.answered
        with pytest.raises(homa.InvalidArgumentError):
            req.reply(b"again")
        t.join()
        assert results == [b"a"]


def test_closed_socket(port: int) -> None:
    client = homa.Socket(host=LOCAL)
    client.close()
    with pytest.raises(homa.ShutdownError):
        client.call((LOCAL, port), b"x")
    with pytest.raises(homa.ShutdownError):
        client.recv_request(timeout=0.01)
    assert "closed" in repr(client)
    m = client.metrics()
    assert set(m) >= {"core", "transport", "pending_calls", "queued_requests"}


def test_a_bad_busy_poll_names_itself() -> None:
    with pytest.raises(TypeError, match="busy_poll must be a number of seconds"):
        homa.Socket(host=LOCAL, busy_poll="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="busy_poll must be a finite"):
        homa.Socket(host=LOCAL, busy_poll=-1.0)


def test_port_of_a_closed_socket_is_free_again(port: int) -> None:
    homa.Socket(port, host=LOCAL).close()
    homa.Socket(port, host=LOCAL).close()


def test_blocking_read_only_sends_are_not_copied(port: int) -> None:
    """A read-only buffer being sent is exported, not copied: its view cannot be released
    while its call is pending (the server tries, before answering), and can once the call
    is over."""
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(host=LOCAL, **SLACK) as client:
        data = bytearray(b"abc" * 10_000)
        view = memoryview(data).toreadonly()
        released: list[bool] = []

        def answer() -> None:
            req = server.recv_request(timeout=10)
            try:
                view.release()
                released.append(True)
            except BufferError:
                released.append(False)
            req.reply(req.message)

        t = threading.Thread(target=answer)
        t.start()
        assert client.call(server.local_addr, view, timeout=10) == bytes(data)
        t.join()
        assert released == [False], "the view could be released during its call: it was copied"
        view.release()  # the export ended with the call


def test_blocking_writable_sends_are_copied(port: int) -> None:
    """A writable buffer is copied when the call starts: the server, changing it before it
    answers, changes nothing that was sent, and can resize it (it is not exported)."""
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(host=LOCAL, **SLACK) as client:
        payload = bytearray(b"a" * 300_000)

        def answer() -> None:
            req = server.recv_request(timeout=10)
            payload[:] = b"b" * len(payload)
            payload.append(0)  # not exported
            req.reply(req.message)

        t = threading.Thread(target=answer)
        t.start()
        assert client.call(server.local_addr, payload, timeout=10) == b"a" * 300_000
        t.join()


def test_received_messages_are_views_of_the_receive_buffer(port: int) -> None:
    """A received message is a read-only memoryview over the buffer Homa received it into:
    receiving a 4 MB request and its 4 MB echo allocates none of their bytes in Python, and
    a slice keeps the buffer alive after the message itself is gone."""
    big = dict(SLACK, max_message_length=8_000_000)
    with homa.Socket(port, host=LOCAL, **big) as server, homa.Socket(host=LOCAL, **big) as client:
        payload = np.random.default_rng(4).integers(0, 255, 4_000_000, dtype=np.uint8).tobytes()
        seen: list[memoryview] = []

        def answer() -> None:
            req = server.recv_request(timeout=10)
            seen.append(req.message)
            req.reply(req.message)  # read-only: sent from the receive buffer as it is

        t = threading.Thread(target=answer)
        tracemalloc.start()
        t.start()
        reply = client.call(server.local_addr, payload, timeout=10)
        t.join()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 200_000, f"Python allocated {peak} bytes: a message was copied"
        for message in (reply, seen[0]):
            assert isinstance(message, memoryview) and message.readonly
            assert (message.nbytes, message.format, message.ndim) == (4_000_000, "B", 1)
            assert type(message.obj).__name__ == "ReceivedBuffer"
            with pytest.raises(TypeError, match="only from received messages"):
                type(message.obj)()
            with pytest.raises(TypeError):
                message[0] = 1
        assert reply == payload and np.frombuffer(reply, dtype=np.uint8)[-1] == payload[-1]
        tail = reply[-1000:]
        del reply, seen[:]
        gc.collect()
        assert tail == payload[-1000:]


def test_held_messages_are_lent_and_bound_what_new_ones_may_take(port: int) -> None:
    """Received messages are lent by the socket: while a view of one lives it counts
    against max_rx_bytes (``metrics()["lent_bytes"]``), so a response that does not fit
    beside the held ones waits, past Homa's timeout, until a view is released; views stay
    readable after the socket is closed."""
    server = homa.Socket(port, host=LOCAL)
    client = homa.Socket(host=LOCAL, max_rx_bytes=2_500_000)
    thread = serve_in_thread(server)
    held = [client.call(server.local_addr, bytes([i]) * 1_000_000, timeout=10) for i in range(2)]
    assert client.metrics()["lent_bytes"] == 2_000_000
    piece = held[0][10:20]  # a slice keeps its whole message lent
    result: list[memoryview] = []

    def call_third() -> None:
        result.append(client.call(server.local_addr, b"\2" * 1_000_000, timeout=10))

    third = threading.Thread(target=call_third)
    third.start()
    third.join(0.3)  # three times Homa's timeout: the call waits for memory, it does not fail
    assert third.is_alive() and client.metrics()["core"]["drops"]["rx_memory"] > 0
    held.pop().release()
    third.join(10)
    assert result[0] == b"\2" * 1_000_000
    del result[:]
    assert client.metrics()["lent_bytes"] == 1_000_000, "the first is still held"
    client.close()
    server.close()
    thread.join()
    readable = bytes(piece) == b"\0" * 10 and held[0][-1] == 0
    assert readable, "after close"
    del held
    gc.collect()
    assert bytes(piece) == b"\0" * 10, "a slice keeps its message"
    piece.release()


def test_a_held_megabyte_message_costs_a_megabyte(port: int) -> None:
    """A server holding 64 received 1 MB requests grows by at most 1.1 MB of resident
    memory per request: each is received once, in place, and lent to Python uncopied. (The
    clients send one shared bytes object, from its buffer.)"""
    count, payload = 64, b"\5" * 1_000_000
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(host=LOCAL, **SLACK) as client:
        thread = serve_in_thread(server)
        client.call(server.local_addr, payload, timeout=10)  # warm up: pages, threads
        server.close()
        thread.join()
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(host=LOCAL, **SLACK) as client:
        args = (server.local_addr, payload, 10)
        callers = [threading.Thread(target=client.call, args=args) for _ in range(count)]
        before = rss_bytes()
        for t in callers:
            t.start()
        held = [server.recv_request(timeout=10) for _ in range(count)]
        grown = rss_bytes() - before
        assert all(r.message == payload for r in held)
        assert server.metrics()["lent_bytes"] == count * 1_000_000
        for r in held:
            r.reply(b"ok")
        for t in callers:
            t.join()
        assert grown <= count * 1_100_000, f"{grown / count:,.0f} bytes per held 1 MB request"


def test_port_is_free_while_a_request_is_held(port: int) -> None:
    """close() releases the port even while a request (which refers to the socket's shared
    state) lives on; answering it then raises ShutdownError."""
    server = homa.Socket(port, host=LOCAL)
    client = homa.Socket(host=LOCAL)
    done: list[BaseException] = []

    def call() -> None:
        try:
            client.call((LOCAL, port), b"held")
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            done.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    req = server.recv_request()
    # The client goes first: its call ends with ShutdownError, not with an ICMP error from
    # the closed server port that its next RESEND would draw.
    client.close()
    t.join()
    assert len(done) == 1 and isinstance(done[0], homa.ShutdownError)
    server.close()
    homa.Socket(port, host=LOCAL).close()  # the port is free again
    with pytest.raises(homa.ShutdownError):
        req.reply(b"too late")


class Interrupted(Exception):
    pass


def test_a_signal_interrupts_a_blocking_call(port: int) -> None:
    """A blocking call wakes up periodically to run signal handlers (Ctrl-C): an exception
    a handler raises ends the call (the RPC is abandoned)."""
    import signal

    server = homa.Socket(port, host=LOCAL)  # receives, never answers

    def handler(signum: int, frame: object) -> None:
        raise Interrupted

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with homa.Socket(host=LOCAL, timeout_ticks=100_000) as client, pytest.raises(Interrupted):
            client.call((LOCAL, port), b"anyone?")
        assert client.metrics()["pending_calls"] == 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        server.close()


def test_retain_freed_buffers_is_set_where_malloc_is_glibc() -> None:
    tuned = "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "") or any(
        v in os.environ for v in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    )
    expected = platform.libc_ver()[0] == "glibc" and sys.maxsize > 2**32 and not tuned
    assert homa.retain_freed_buffers() is expected
    assert homa.retain_freed_buffers() is expected  # idempotent


def test_blocking_calls_wait_for_room_unless_told_not_to(port: int) -> None:
    """More 1,000,000-byte calls in flight (from threads) than a 5 MB send buffer holds:
    they wait for room and complete; with block=False a call fails fast instead."""
    big = bytes(1_000_000)
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(
        host=LOCAL, wmem_max=5_000_000, **SLACK
    ) as client:
        serve_in_thread(server)
        results: list[memoryview] = []
        threads = [
            threading.Thread(target=lambda: results.append(client.call(server.local_addr, big)))
            for _ in range(20)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 20 and all(r == big for r in results)


def test_a_call_told_not_to_block_fails_fast_on_a_full_send_buffer(port: int) -> None:
    """Five unanswered 1,000,000-byte requests fill a 5 MB send buffer (a request's bytes
    stay until its response comes): one more with block=False fails at once."""
    with homa.Socket(port, host=LOCAL, **SLACK) as server, homa.Socket(
        host=LOCAL, wmem_max=5_000_000, **SLACK
    ) as client:
        calls = [
            threading.Thread(target=client.call, args=(server.local_addr, bytes(1_000_000)))
            for _ in range(5)
        ]
        for t in calls:
            t.start()
        held = [server.recv_request(timeout=10) for _ in range(5)]
        with pytest.raises(homa.ResourceLimitError) as err:
            client.call(server.local_addr, b"one more", block=False)
        assert err.value.kind == "tx_buffer_full"
        for req in held:
            req.reply(b"done")
        for t in calls:
            t.join()


def test_blocking_host_names_are_resolved(port: int) -> None:
    with homa.Socket(port, host="localhost", **SLACK) as server, homa.Socket(
        host="localhost", **SLACK
    ) as client:
        assert server.local_addr == ("127.0.0.1", port)
        serve_in_thread(server)
        assert bytes(client.call(f"localhost:{port}", b"abc", timeout=10)) == b"cba"
        with pytest.raises(homa.InvalidArgumentError, match="cannot resolve"):
            client.call(("no-such-host.invalid", port), b"x", timeout=10)
