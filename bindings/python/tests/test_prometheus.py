"""Prometheus: ``metrics_text()`` parses with prometheus_client's own parser and counts known
traffic; ``homa.prometheus`` exports several sockets through one registry; the histograms
in ``metrics()`` count the calls and the served requests."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import homa
import homa.prometheus

LOCAL = "127.0.0.1"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_exposition_parses_and_counts_known_traffic(port: int) -> None:
    with homa.Socket(port, host=LOCAL) as server, homa.Socket(host=LOCAL) as client:

        def serve() -> None:
            for _ in range(7):
                req = server.recv_request(timeout=10)
                req.reply(req.message)

        t = threading.Thread(target=serve)
        t.start()
        for i in range(7):
            assert client.call(server.local_addr, b"x" * (i * 1000 + 1), timeout=10)
        t.join()
        text = client.metrics_text({"job": "test"})
        got = samples(text)
        me = {("socket", "{}:{}".format(*client.local_addr)), ("job", "test")}
        assert got[("homa_messages_received_total", frozenset(me | {("kind", "response")}))] == 7
        assert got[("homa_call_duration_seconds_count", frozenset(me))] == 7
        assert got[("homa_call_duration_seconds_bucket", frozenset(me | {("le", "+Inf")}))] == 7
        sent = sum(i * 1000 + 1 for i in range(7))
        assert got[("homa_message_sent_bytes_total", frozenset(me))] == sent
        kinds = {f.name: f.type for f in text_string_to_metric_families(text)}
        assert kinds["homa_packets_received"] == "counter"
        assert kinds["homa_lent_bytes"] == "gauge"
        assert kinds["homa_call_duration_seconds"] == "histogram"
        m = client.metrics()
        assert m["calls"]["count"] == 7 and sum(m["calls"]["buckets"]) == 7
        assert len(m["calls"]["buckets"]) == len(m["calls"]["bounds"]) + 1
        assert server.metrics()["served"]["count"] == 7
        with pytest.raises(ValueError, match="label name"):
            client.metrics_text({"bad-name": "x"})
        with pytest.raises(ValueError, match="homa's own samples"):
            client.metrics_text({"le": "x"})


def test_registered_sockets_share_one_family_per_metric(port: int) -> None:
    registry = CollectorRegistry()
    server = homa.Socket(port, host=LOCAL)
    client = homa.Socket(host=LOCAL)
    homa.prometheus.register(server, registry=registry)
    homa.prometheus.register(client, {"role": "client"}, registry=registry)
    t = threading.Thread(target=lambda: server.recv_request(timeout=10).reply(b"ok"))
    t.start()
    assert bytes(client.call(server.local_addr, b"hi", timeout=10)) == b"ok"
    t.join()
    text = generate_latest(registry).decode()
    assert text.count("# TYPE homa_packets_received_total counter") == 1
    got = samples(text)
    request = {("socket", f"{LOCAL}:{port}"), ("kind", "request")}
    assert got[("homa_messages_received_total", frozenset(request))] == 1
    role = {("socket", "{}:{}".format(*client.local_addr)), ("role", "client")}
    assert got[("homa_call_duration_seconds_count", frozenset(role))] == 1
    client.close()
    server.close()
    generate_latest(registry)  # the last scrape of the closed sockets
    assert "homa_" not in generate_latest(registry).decode(), "closed sockets are dropped"
