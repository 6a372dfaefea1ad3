"""Property tests of the binding's entry points that read peer bytes (issue 7's Python part):
arbitrary and mutated packets through `homa.wire.decode` and `homa.Endpoint.handle_packet`.
Hypothesis runs derandomized, so every CI run tries the same inputs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import homa

SETTINGS = settings(derandomize=True, max_examples=1500, deadline=None)

# Real packets to mutate: one of each kind the engine emits in an exchange.
CLIENT = ("198.18.0.1", 4000)
SERVER = ("198.18.0.2", 4000)


def captured() -> list[bytes]:
    client = homa.Endpoint()
    server = homa.Endpoint()
    server.bind(99)
    port = client.bind_ephemeral()
    packets: list[bytes] = []
    now = 0
    client.send_request(now, port, SERVER, 99, b"x" * 5000, 1)
    for _ in range(200):
        moved = False
        while (t := client.poll_transmit(now)) is not None:
            packets.append(t.data)
            server.handle_packet(now, CLIENT, t.data)
            moved = True
        while (e := server.poll_event()) is not None:
            if isinstance(e, homa.RequestReceived):
                server.send_response(now, e.rpc, e.message)
        while (t := server.poll_transmit(now)) is not None:
            packets.append(t.data)
            client.handle_packet(now, SERVER, t.data)
            moved = True
        while client.poll_event() is not None:
            pass
        if not moved:
            deadline = min(d for d in (client.poll_timeout(), server.poll_timeout(), now + 10**9) if d is not None)
            now = max(now + 1, deadline)
            client.handle_timeout(now)
            server.handle_timeout(now)
    return packets


PACKETS = captured()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    packet = bytearray(draw(st.sampled_from(PACKETS)))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.integers(0, 3))
        if action == 0 and packet:
            i = draw(st.integers(0, len(packet) - 1))
            packet[i] = draw(st.integers(0, 255))
        elif action == 1:
            del packet[draw(st.integers(0, len(packet))) :]
        elif action == 2:
            packet += draw(st.binary(max_size=40))
        elif len(packet) >= 32:
            at = draw(st.sampled_from([4, 20, 28]))
            packet[at : at + 4] = draw(st.binary(min_size=4, max_size=4))
    return bytes(packet)


packets = st.one_of(st.binary(max_size=200), mutated())


@SETTINGS
@given(packets)
def test_decode_either_errors_cleanly_or_round_trips(data: bytes) -> None:
    try:
        fields: dict[str, Any] = homa.wire.decode(data)
    except homa.WireError as e:
        assert e.kind in {
            "truncated",
            "unknown_type",
            "too_many_acks",
            "bad_message_length",
            "past_message_end",
            "bad_priority",
        }
        return
    encoded = homa.wire.encode(fields)
    assert data.startswith(encoded)


@SETTINGS
@given(st.lists(st.tuples(packets, st.integers(0, 3), st.integers(0, 20_000_000)), max_size=30))
def test_endpoint_survives_any_packets(steps: list[tuple[bytes, int, int]]) -> None:
    ep = homa.Endpoint(max_rx_bytes=2_000_000, max_peers=3, max_rpcs_per_peer=4)
    ep.bind(99)
    ep.bind_ephemeral()
    now = 0
    for data, peer, dt in steps:
        now += dt
        try:
            ep.handle_packet(now, (f"198.18.0.{peer + 1}", 4000), data)
        except homa.WireError:
            pass
        ep.handle_timeout(now)
        while (t := ep.poll_transmit(now)) is not None:
            homa.wire.decode(t.data)  # everything the endpoint sends parses
        while (e := ep.poll_event()) is not None:
            if isinstance(e, homa.RequestReceived):
                ep.discard(e.rpc)
        m = ep.metrics()
        assert m["packets_in"] == m["accepted"] + m["drops"]["total"]
        assert m["rx_bytes"] <= 2_000_000
        assert m["peers"] <= 3


def test_the_captured_packets_cover_the_exchange() -> None:
    kinds = {homa.wire.decode(p)["type"] for p in PACKETS}
    assert {"DATA", "CUTOFFS"} <= kinds, kinds
    assert len(PACKETS) >= 8


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
