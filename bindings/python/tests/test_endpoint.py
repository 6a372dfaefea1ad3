"""The sans-IO Endpoint beyond the conformance vectors: a full RPC between two endpoints,
configuration, argument errors, events and metrics; cutoffs; wire errors."""

from __future__ import annotations

from typing import Any

import pytest

import homa

A, B = ("198.18.0.1", 4000), ("198.18.0.2", 4000)


def exchange(client: homa.Endpoint, server: homa.Endpoint, now: int) -> None:
    while (t := client.poll_transmit(now)) is not None:
        assert t.to == B
        server.handle_packet(now, A, t.data)
    while (t := server.poll_transmit(now)) is not None:
        assert t.to == A
        client.handle_packet(now, B, t.data)


def test_rpc_between_two_endpoints() -> None:
    client, server = homa.Endpoint(), homa.Endpoint()
    server.bind(99)
    port = client.bind_ephemeral()
    assert port == homa.MIN_EPHEMERAL_PORT
    message = bytes(range(256)) * 1000  # 256,000 bytes: needs grants
    now = 0
    rpc_id = client.send_request(now, port, B, 99, message, cookie=7)
    assert rpc_id == 2
    response: Any = None
    for _ in range(10_000):
        exchange(client, server, now)
        while (e := server.poll_event()) is not None:
            assert isinstance(e, homa.RequestReceived)
            assert (e.port, e.client_port, e.client, e.rpc.client) == (99, port, A, A)
            assert repr(e.rpc) == f"ServerRpc(client={A!r}, id={e.rpc.id})"
            server.send_response(now, e.rpc, e.message[:10])
        while (e := client.poll_event()) is not None:
            response = e
        if response is not None:
            break
        deadlines = [d for d in (client.poll_timeout(), server.poll_timeout()) if d is not None]
        if deadlines:
            now = max(now, min(deadlines))
            client.handle_timeout(now)
            server.handle_timeout(now)
    assert isinstance(response, homa.ResponseReceived)
    assert (response.id, response.cookie, response.message) == (rpc_id, 7, message[:10])
    m = client.metrics()
    assert m["responses_received"] == 1 and m["drops"]["total"] == 0
    assert server.metrics()["requests_received"] == 1
    assert "Transmit" not in repr(client)


def test_config_keywords() -> None:
    ep = homa.Endpoint(mtu=9000, unsched_bytes=60_000, unsched_cutoffs=[0, 0, 0, 0, 1_000_000, 1, 1, 1])
    assert ep.config["mtu"] == 9000 and ep.config["unsched_bytes"] == 60_000
    assert set(ep.config) == set(homa.CONFIG_FIELDS)
    with pytest.raises(homa.ConfigError) as err:
        homa.Endpoint(max_overcommit=9)
    assert err.value.field == "max_overcommit" and isinstance(err.value, ValueError)
    assert "max_overcommit" in str(err.value)
    with pytest.raises(homa.ConfigError) as err:
        homa.Endpoint(mtu=-1)
    assert err.value.field == "mtu"
    with pytest.raises(homa.ConfigError) as err:
        homa.Endpoint(num_priorities=300)
    assert err.value.field == "num_priorities"
    with pytest.raises(TypeError, match="must be an int"):
        homa.Endpoint(mtu="1500")
    with pytest.raises(TypeError, match="must be an int"):
        homa.Endpoint(mtu=True)
    with pytest.raises(TypeError, match="unknown config field `mtuu`"):
        homa.Endpoint(mtuu=1500)
    with pytest.raises(ValueError, match="8 entries"):
        homa.Endpoint(unsched_cutoffs=[1, 2])


def test_api_errors_have_kinds() -> None:
    ep = homa.Endpoint()
    ep.bind(99)
    with pytest.raises(homa.PortInUseError) as e1:
        ep.bind(99)
    assert e1.value.kind == "port_in_use" and isinstance(e1.value, OSError)
    with pytest.raises(homa.InvalidArgumentError) as e2:
        ep.bind(40_000)
    assert e2.value.kind == "invalid_port"
    with pytest.raises(ValueError, match="out of range"):
        ep.bind(70_000)
    with pytest.raises(homa.PeerUnknownError) as e3:
        ep.abort(1234)
    assert e3.value.kind == "unknown_rpc"
    with pytest.raises(homa.MessageTooLargeError, match=r"1,000,001 bytes is longer than max_message_length \(1,000,000 bytes\)"):
        ep.send_request(0, 99, B, 99, bytes(1_000_001))
    raised = homa.Endpoint(max_message_length=2_000_000)
    raised.bind(99)
    raised.send_request(0, 99, B, 99, bytes(1_000_001))
    with pytest.raises(homa.MessageTooLargeError, match=r"max_message_length \(2,000,000 bytes\)"):
        raised.send_request(0, 99, B, 99, bytes(2_000_001))
    with pytest.raises(homa.InvalidArgumentError) as e4:
        ep.send_request(0, 98, B, 99, b"x")
    assert e4.value.kind == "port_not_bound"
    with pytest.raises(TypeError):
        ep.send_request(0, 99, B, 99, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="now must be an int"):
        ep.handle_timeout(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="now"):
        ep.handle_timeout(-1)
    with pytest.raises(homa.WireError) as e5:
        ep.handle_packet(0, B, b"\x00" * 10)
    assert e5.value.kind == "truncated"
    assert ep.metrics()["drops"]["malformed"] == 1
    ep.unbind(99)
    with pytest.raises(homa.InvalidArgumentError):
        ep.unbind(99)


def test_failed_rpc_event_and_addresses() -> None:
    ep = homa.Endpoint()
    port = ep.bind_ephemeral()
    rpc_v6 = ep.send_request(0, port, "[2001:db8::1]:4000", 99, b"x", cookie=3)
    rpc_v4 = ep.send_request(0, port, ("198.18.0.9", 4000), 99, memoryview(b"y"))
    t = ep.poll_transmit(0)
    assert t is not None and t.to == ("2001:db8::1", 4000) and 0 <= t.priority <= 7
    ep.unbind(port)
    events = [ep.poll_event(), ep.poll_event(), ep.poll_event()]
    failed = [e for e in events if isinstance(e, homa.RpcFailed)]
    assert {(e.id, e.reason) for e in failed} == {(rpc_v6, "port_closed"), (rpc_v4, "port_closed")}
    assert events[2] is None
    assert homa.ServerRpc(("1.2.3.4", 5), 7) == homa.ServerRpc("1.2.3.4:5", 7)
    with pytest.raises(ValueError):
        homa.ServerRpc("nowhere", 1)


def test_cutoffs_for_workload() -> None:
    for w in ("w1", "w2", "w3", "w4", "w5"):
        cutoffs = homa.cutoffs_for_workload(w)
        assert len(cutoffs) == 8 and cutoffs[4] == 1_000_000
        assert cutoffs[5] >= cutoffs[6] >= cutoffs[7] > 0
        homa.Endpoint(unsched_cutoffs=cutoffs)  # valid as a config
    custom = homa.cutoffs_for_workload([(100, 0.5), (10_000, 0.9), (1_000_000, 1.0)], unsched_levels=2)
    assert custom[6] == 1_000_000 and custom[7] > 0
    assert homa.cutoffs_for_workload("w3", num_priorities=4, unsched_levels=2)[2] == 1_000_000
    with pytest.raises(ValueError, match="workload"):
        homa.cutoffs_for_workload([(100, 0.5)])  # does not end at 1
    with pytest.raises(ValueError, match="w1"):
        homa.cutoffs_for_workload("no-such-workload")
    with pytest.raises(ValueError, match="unsched_levels"):
        homa.cutoffs_for_workload("w1", unsched_levels=9)
    with pytest.raises(TypeError):
        homa.cutoffs_for_workload(42)  # type: ignore[arg-type]


def test_wire_round_trip_and_errors() -> None:
    fields = {"type": "GRANT", "sport": 1, "dport": 2, "sender_id": 3, "offset": 10_000, "priority": 5}
    data = homa.wire.encode(fields)
    decoded = homa.wire.decode(data)
    assert {k: decoded[k] for k in fields} == fields
    assert homa.wire.encode(decoded) == data
    with pytest.raises(ValueError, match="offset"):
        homa.wire.encode({**fields, "offset": -1})
    with pytest.raises(ValueError, match="missing field `priority`"):
        homa.wire.encode({k: v for k, v in fields.items() if k != "priority"})
    with pytest.raises(homa.WireError) as err:
        homa.wire.decode(b"\x00" * 11 + b"\x99" + b"\x00" * 20)
    assert err.value.kind == "unknown_type"
    with pytest.raises(TypeError):
        homa.wire.decode("not bytes")  # type: ignore[arg-type]
