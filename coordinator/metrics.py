"""Prometheus metrics of the coordinator, served at /metrics.

Counters and histograms live in one registry for the process (`METRICS`); the gauges of
machines by state are computed from the store at each scrape, so they can never drift from it.

For code recording what it does (drains included), the entry points are the
`record_*` functions below: they take plain values and never raise on odd input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from coordinator.domain.model import MachineState
from coordinator.domain.records import MachineCount
from coordinator.gcpolicy import GcPauses

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Item and drain times run from a second to many minutes; API calls from a millisecond.
SLOW_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 3600)
disable_created_metrics()  # the *_created series double the output and nobody graphs them
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.item_seconds = Histogram(
            "nodeagent_item_duration_seconds", "Wall time of one attempt at a StateItem, as reported",
            ["cluster", "phase", "status"], buckets=SLOW_BUCKETS, registry=self.registry)
        self.drain_seconds = Histogram(
            "nodeagent_drain_duration_seconds", "Wall time of draining one node",
            ["cluster", "outcome"], buckets=SLOW_BUCKETS, registry=self.registry)
        self.evictions_blocked = Counter(
            "nodeagent_evictions_blocked", "Evictions refused by a PodDisruptionBudget (HTTP 429)",
            ["cluster"], registry=self.registry)
        self.api_seconds = Histogram(
            "nodeagent_api_request_duration_seconds",
            "Time to answer an API request (long polls and streams include their wait)",
            ["method", "endpoint", "code"], buckets=API_BUCKETS, registry=self.registry)
        self.agents_connected = Gauge(
            "nodeagent_agents_connected", "Machines with an assignment long-poll open now",
            registry=self.registry)
        self._polling: dict[str, int] = {}
        self.gc_pauses = GcPauses()  # counts only once `coordinator serve` installs it
        self.registry.register(self.gc_pauses)

    def poll_opened(self, machine_id: str) -> None:
        self._polling[machine_id] = self._polling.get(machine_id, 0) + 1
        self.agents_connected.set(len(self._polling))

    def poll_closed(self, machine_id: str) -> None:
        left = self._polling.get(machine_id, 0) - 1
        if left > 0:
            self._polling[machine_id] = left
        else:
            self._polling.pop(machine_id, None)
        self.agents_connected.set(len(self._polling))

    def exposition(self, counts: Iterable[MachineCount]) -> bytes:
        """The text format: this registry plus the machine gauges of this scrape."""
        snapshot = CollectorRegistry(auto_describe=False)
        snapshot.register(_MachineGauges(counts))
        return generate_latest(self.registry) + generate_latest(snapshot)


class _MachineGauges(Collector):
    def __init__(self, counts: Iterable[MachineCount]) -> None:
        self._counts = list(counts)

    def collect(self) -> Iterator[Metric]:
        by_state = GaugeMetricFamily("nodeagent_machines", "Machines by cluster and state",
                                     labels=["cluster", "state"])
        silent = GaugeMetricFamily("nodeagent_machines_not_responding",
                                   "Machines whose heartbeats stopped, by cluster",
                                   labels=["cluster"])
        states: dict[tuple[str, str], int] = {}
        not_responding: dict[str, int] = {}
        for c in self._counts:
            # Every state of every cluster is listed, zeros included, so rates and alerts see 0.
            for state in MachineState:
                states.setdefault((c.cluster, state.value), 0)
            states[(c.cluster, c.state)] = states.get((c.cluster, c.state), 0) + c.count
            not_responding[c.cluster] = not_responding.get(c.cluster, 0) + (
                0 if c.responding else c.count)
        for (cluster, state), count in sorted(states.items()):
            by_state.add_metric([cluster, state], count)
        for cluster, count in sorted(not_responding.items()):
            silent.add_metric([cluster], count)
        yield by_state
        yield silent


METRICS = Metrics()


def record_item(cluster: str, phase: str, status: str, seconds: float) -> None:
    """One finished attempt at an item (status succeeded or failed)."""
    METRICS.item_seconds.labels(cluster, phase, status).observe(max(0.0, seconds))


def record_drain(cluster: str, seconds: float, outcome: str = "drained") -> None:
    """One drain attempt of one node, when it ends: how long it took and how it ended
    (drained, forced: drained with budgets bypassed, or timed-out)."""
    METRICS.drain_seconds.labels(cluster, outcome).observe(max(0.0, seconds))


def record_blocked_eviction(cluster: str) -> None:
    """One eviction a PodDisruptionBudget refused (HTTP 429), counted as it happens, retries
    included, so a drain that is stuck shows while it is stuck."""
    METRICS.evictions_blocked.labels(cluster).inc()


def record_request(method: str, endpoint: str, code: int, seconds: float) -> None:
    METRICS.api_seconds.labels(method, endpoint, str(code)).observe(seconds)
