"""homa's metrics for Prometheus, through ``prometheus_client`` (an optional dependency:
``pip install 'homa-transport[prometheus]'``).

    import homa.prometheus
    from prometheus_client import start_http_server

    sock = await homa.aio.open(4000)
    homa.prometheus.register(sock)        # its counters, gauges and latency histograms
    start_http_server(9464)               # http://localhost:9464/metrics

Every registered socket is scraped through :meth:`homa.Socket.metrics_text` (the text homa-io
writes, so every binding exports the same names) and its samples carry the label
``socket="<local address>"``. The collector holds each socket until it is closed; then its
last counters are exported once more and it is dropped.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["HomaCollector", "register"]


class _Exporting(Protocol):
    """A socket that can be exported: :class:`homa.Socket` or :class:`homa.AsyncSocket`."""

    @property
    def closed(self) -> bool: ...
    def metrics_text(self, labels: dict[str, str] | None = None) -> str: ...


class HomaCollector(Collector):
    """Collects the metrics of the sockets :meth:`add` was given, merged into one family per
    metric (the samples of each socket told apart by their ``socket`` label)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[tuple[_Exporting, dict[str, str] | None]] = []

    def add(self, sock: _Exporting, labels: dict[str, str] | None = None) -> None:
        """Exports ``sock`` from the next scrape on, its samples with ``labels`` too."""
        with self._lock:
            self._sockets.append((sock, labels))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            sockets = list(self._sockets)
            self._sockets = [(s, labels) for s, labels in sockets if not s.closed]
        families: dict[str, Metric] = {}
        for sock, labels in sockets:
            for family in text_string_to_metric_families(sock.metrics_text(labels)):
                if family.name in families:
                    families[family.name].samples.extend(family.samples)
                else:
                    families[family.name] = family
        yield from families.values()


#: One collector per registry.
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, HomaCollector] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def register(
    sock: _Exporting,
    labels: dict[str, str] | None = None,
    registry: CollectorRegistry = REGISTRY,
) -> HomaCollector:
    """Exports ``sock``'s metrics through ``registry`` (prometheus_client's default one
    unless given), with ``labels`` on every sample besides ``socket``. One collector per
    registry holds every socket registered with it; it is returned."""
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = HomaCollector()
            registry.register(collector)
            _collectors[registry] = collector
    collector.add(sock, labels)
    return collector
