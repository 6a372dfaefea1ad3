"""Property tests of the binding's entry points that read peer bytes (issue 7's Python part):
arbitrary and mutated packets through `homa.wire.decode` and `homa.Endpoint.handle_packet`,
mixed with the Endpoint's API calls (arbitrary arguments), clock steps and timeouts.

In CI hypothesis runs derandomized, so every run tries the same inputs. A longer, random run
(fuzz/README.md records one)::

    HOMA_HYPOTHESIS_EXAMPLES=50000 pytest tests/test_hypothesis.py
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import homa

CAMPAIGN = int(os.environ.get("HOMA_HYPOTHESIS_EXAMPLES", "0"))
SETTINGS = settings(
    derandomize=not CAMPAIGN, max_examples=CAMPAIGN or 1500, deadline=None, database=None
)

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
    assert homa.wire.decode(encoded) == fields


PEERS = [("198.18.0.2", 4000), ("198.18.0.3", 4000), ("198.18.0.2", 4001), ("2001:db8::2", 4000)]
OURS = 70_000  # stands for the endpoint's ephemeral port in a "request" step

CONFIGS = st.fixed_dictionaries(
    {
        "max_peers": st.sampled_from([10_000, 1, 2]),
        "max_rpcs_per_peer": st.sampled_from([10_000, 1, 2]),
        "max_rx_bytes": st.sampled_from([1 << 30, 1_000_000]),
        "max_gaps": st.sampled_from([1024, 0, 2]),
        "max_pending_control": st.sampled_from([65_536, 1, 4]),
        "timeout_ticks": st.sampled_from([100, 3]),
        "resend_ticks": st.just(2),
        "ack_timeout_ticks": st.sampled_from([1000, 4]),
        "mtu": st.sampled_from([1500, 576, 9000]),
    }
)

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("packet"), st.integers(0, len(PEERS) - 1), packets),
        st.tuples(st.just("time"), st.integers(0, 20_000_000)),
        st.tuples(st.just("timeout")),
        st.tuples(
            st.just("request"),
            st.integers(0, len(PEERS) - 1),
            st.sampled_from([OURS, OURS, OURS, 0, 99, 5, 40_000, 65_535]),
            st.integers(0, 65_535),
            st.sampled_from([0, 1, 100, 5000, 60_000, 1_000_001]),
            st.integers(0, 2**64 - 1),
        ),
        st.tuples(st.just("abort"), st.integers(0, 2**64 - 1)),
        st.tuples(st.just("respond"), st.integers(0, 10), st.sampled_from([0, 1, 3000])),
        st.tuples(st.just("unreachable"), st.integers(0, len(PEERS) - 1)),
        st.tuples(st.just("bind"), st.integers(0, 65_535)),
        st.tuples(st.just("unbind"), st.integers(0, 65_535)),
    ),
    max_size=60,
)


@SETTINGS
@given(CONFIGS, STEPS)
def test_endpoint_survives_any_packets_and_calls(config: dict[str, int], steps: list[Any]) -> None:
    """Whatever arrives and whatever the application asks: `handle_packet` returns or raises
    `WireError`, API calls return or raise a `HomaError`, every packet sent decodes and fits
    the MTU, events name only live client RPCs (with their cookies), and the metrics add up
    and stay within the configured limits."""
    ep = homa.Endpoint(**config)
    ep.bind(99)
    ours = ep.bind_ephemeral()
    now, handed = 0, 0
    live: dict[int, int] = {}  # client RPC id -> cookie
    requests: list[homa.ServerRpc] = []
    max_packet = ep.config["mtu"] - ep.config["outer_header_bytes"]
    for step in steps:
        kind = step[0]
        try:
            if kind == "packet":
                handed += 1
                try:
                    ep.handle_packet(now, PEERS[step[1]], step[2])
                except homa.WireError:
                    pass
            elif kind == "time":
                now += step[1]
                ep.handle_timeout(now)
            elif kind == "timeout":
                ep.handle_timeout(now)
            elif kind == "request":
                _, peer, port, dport, length, cookie = step
                port = ours if port == OURS else port
                rpc = ep.send_request(now, port, PEERS[peer], dport, bytes(length), cookie)
                assert rpc not in live and rpc % 2 == 0
                live[rpc] = cookie
            elif kind == "abort":
                rpc = next(iter(live)) if live and step[1] % 2 == 0 else step[1]
                ep.abort(rpc)
                assert live.pop(rpc, None) is not None, f"aborted {rpc}, not a live RPC"
            elif kind == "respond" and requests:
                ep.send_response(now, requests.pop(step[1] % len(requests)), bytes(step[2]))
            elif kind == "unreachable":
                ep.handle_unreachable(PEERS[step[1]])
            elif kind == "bind":
                ep.bind(step[1])
            elif kind == "unbind":
                ep.unbind(step[1])
        except homa.HomaError:
            pass  # a refused call; anything else is a bug
        while (t := ep.poll_transmit(now)) is not None:
            assert len(t.data) <= max_packet, (len(t.data), max_packet)
            assert 0 <= t.priority <= 7
            homa.wire.decode(t.data)
        while (e := ep.poll_event()) is not None:
            if isinstance(e, homa.RequestReceived):
                requests.append(e.rpc)
            else:
                assert live.pop(e.id, None) == e.cookie, f"event for RPC {e.id}, not live"
        m = ep.metrics()
        assert m["packets_in"] == handed
        assert m["packets_in"] == m["accepted"] + m["drops"]["total"], m
        assert m["rx_bytes"] <= config["max_rx_bytes"]
        assert m["peers"] <= config["max_peers"]
        # Each server RPC needs a packet, and the limits cap them too.
        server_rpcs = min(handed, config["max_peers"] * config["max_rpcs_per_peer"])
        assert m["rpcs"] <= len(live) + server_rpcs


def test_the_captured_packets_cover_the_exchange() -> None:
    kinds = {homa.wire.decode(p)["type"] for p in PACKETS}
    assert {"DATA", "CUTOFFS"} <= kinds, kinds
    assert len(PACKETS) >= 8


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
