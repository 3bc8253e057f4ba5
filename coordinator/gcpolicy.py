"""When `coordinator serve` collects cyclic garbage: on a schedule of its own, not CPython's.

CPython's automatic full (generation 2) collection walks every tracked object. A coordinator
holding thousands of agent connections tracks ~130 objects per connection (transports, TLS
objects, parsers, tasks), so each full collection stopped it for ~1 s at 5,000 agents, and
every request arriving meanwhile waited: that set the p99 (docs/benchmarks.md).

What runs instead:

- at start-up, and after every scheduled collection, the survivors are frozen
  (`gc.freeze()`): long-lived objects (connections, caches) are no longer walked;
- every `interval` seconds one collection runs over the objects not frozen, that is those
  that survived since the previous one (little outlives a request but the waiting long-polls:
  each is walked once, then frozen), and CPython never runs a full collection by itself (its
  generation-2 threshold is set out of reach);
- CPython's young collections remain only as a safety net for bursts (YOUNG_THRESHOLD);
- cyclic garbage among frozen objects (a connection that closed in a cycle, say) is found only
  by a collection of everything: one runs (unfreeze, collect, freeze) when the interpreter's
  allocated memory blocks grew by THAW_GROWTH since the last such collection, so such garbage
  cannot grow memory by more than that between two. (Counting the frozen objects instead
  walks them all: 60 ms at 5,000 agents, every time.) It stops the coordinator for 0.1-0.2 s
  at 1,000 agents (over a second at 10,000), so while the coordinator is busy (a rollout
  admitting machines, which that pause would hold up) it waits until memory grew by
  BUSY_THAW_GROWTH.

Every collection's pause is counted and exposed at /metrics (`GcPauses`), so what is left can
be seen.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 0.25
# A collection of everything when allocated blocks grew by this share since the last one;
# while the coordinator is busy, by the second.
THAW_GROWTH = 0.25
BUSY_THAW_GROWTH = 1.0
# CPython's young collections only as a safety net, for what a burst allocates between two
# scheduled collections (CPython's default, 700, ran ~25 a second at 5,000 agents, each
# walking much the same waiting requests again); generation 2 never automatic.
YOUNG_THRESHOLD = 100_000
NEVER = 2**31 - 1
KINDS = ("0", "1", "2", "all")  # generation, or "all": frozen objects included


class GcPauses(Collector):
    """Collections and the time they stopped the process, by kind, from `gc.callbacks`.

    The callback runs inside the collector, in whichever thread allocated: it only adds to
    plain numbers (no lock, which that thread might already hold); /metrics reads them."""

    def __init__(self) -> None:
        self.count = dict.fromkeys(KINDS, 0)
        self.seconds = dict.fromkeys(KINDS, 0.0)
        self.longest = dict.fromkeys(KINDS, 0.0)
        self.collected = dict.fromkeys(KINDS, 0)
        self.thawing = False  # set by GcPolicy around a collection of everything
        self._started = 0.0

    @property
    def installed(self) -> bool:
        """Whether collections are counted now (the callback is in gc.callbacks)."""
        return self._callback in gc.callbacks

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self.installed:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # CPU time of the collecting thread: wall time would add the waits for the GIL and
        # the CPU that the other threads and processes of a busy machine cause.
        if phase == "start":
            self._started = time.thread_time()
            return
        pause = time.thread_time() - self._started
        kind = "all" if self.thawing else str(info["generation"])
        self.count[kind] += 1
        self.seconds[kind] += pause
        self.longest[kind] = max(self.longest[kind], pause)
        self.collected[kind] += info["collected"]

    def collect(self) -> Iterator[Metric]:
        families = (
            (CounterMetricFamily, "nodeagent_gc_collections",
             "Garbage collections by generation (all: frozen objects included)", self.count),
            (CounterMetricFamily, "nodeagent_gc_pause_seconds",
             "CPU time garbage collections held the coordinator", self.seconds),
            (GaugeMetricFamily, "nodeagent_gc_pause_longest_seconds",
             "Longest garbage collection (CPU time) since start", self.longest),
            (CounterMetricFamily, "nodeagent_gc_collected_objects",
             "Unreachable objects garbage collections freed", self.collected),
        )
        for family, name, text, values in families:
            metric = family(name, text, labels=["generation"])
            for kind in KINDS:
                metric.add_metric([kind], values[kind])
            yield metric


class GcPolicy:
    """Start with `start()` once the process has loaded what it keeps, then `run()` as a
    background task; `stop()` gives CPython its own collection back."""

    def __init__(self, pauses: GcPauses, interval: float = DEFAULT_INTERVAL_SECONDS,
                 young_threshold: int = YOUNG_THRESHOLD,
                 busy: Callable[[], bool] = lambda: False) -> None:
        self.pauses = pauses
        self.interval = interval
        self.young_threshold = young_threshold
        self.busy = busy
        self._thresholds = gc.get_threshold()
        self._blocks_after_thaw = 0

    def start(self) -> None:
        self.pauses.install()
        _, middle, _ = self._thresholds
        gc.set_threshold(self.young_threshold, middle, NEVER)
        self.collect_all()

    def stop(self) -> None:
        gc.unfreeze()
        gc.set_threshold(*self._thresholds)
        self.pauses.uninstall()

    def collect(self) -> None:
        """The scheduled step: collect what is not frozen, freeze the survivors; everything
        when allocated blocks grew by THAW_GROWTH since the last collection of everything
        (BUSY_THAW_GROWTH while busy)."""
        growth = sys.getallocatedblocks() / max(self._blocks_after_thaw, 1) - 1
        if growth > BUSY_THAW_GROWTH or (growth > THAW_GROWTH and not self.busy()):
            self.collect_all()
            return
        gc.collect()
        gc.freeze()

    def collect_all(self) -> None:
        started = time.perf_counter()
        gc.unfreeze()
        self.pauses.thawing = True
        try:
            collected = gc.collect()
        finally:
            self.pauses.thawing = False
        gc.freeze()
        self._blocks_after_thaw = sys.getallocatedblocks()
        log.info("garbage collection of everything: %.0f ms, %d unreachable objects freed, "
                 "%d memory blocks in use", (time.perf_counter() - started) * 1000, collected,
                 self._blocks_after_thaw)

    async def run(self) -> None:
        """Every interval seconds, until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.collect()
