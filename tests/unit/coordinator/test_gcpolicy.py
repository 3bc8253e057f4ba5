"""The coordinator's garbage collection schedule: cycles are still freed, frozen ones too."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from coordinator.gcpolicy import BUSY_THAW_GROWTH, THAW_GROWTH, GcPauses, GcPolicy


class Node:
    """Weak-referenceable, so a test sees when the collector frees it."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, list[bool]]:
    """Two nodes referring to each other (only a collection frees them), and a flag set when
    they are freed."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    freed: list[bool] = []
    weakref.finalize(a, freed.append, True)
    return a, freed


@pytest.fixture
def policy() -> Iterator[GcPolicy]:
    thresholds = gc.get_threshold()
    started = GcPolicy(GcPauses(), young_threshold=700)  # CPython's: many young collections
    started.start()
    yield started
    started.stop()
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0
    assert not started.pauses.installed


def test_cpython_runs_no_full_collection_and_the_scheduled_one_frees_new_cycles(
        policy: GcPolicy) -> None:
    # Survivors enough for CPython to start full collections (more than a quarter of the
    # objects that survived the last one), through hundreds of young collections.
    survivors = [[] for _ in range(len(gc.get_objects()) + 2 * gc.get_freeze_count())]
    assert policy.pauses.count["0"] > 100 and policy.pauses.count["2"] == 0
    del survivors

    node, freed = cycle()
    del node
    policy.collect()
    assert freed == [True]
    assert policy.pauses.count["2"] == 1 and policy.pauses.collected["2"] >= 2
    assert gc.get_freeze_count() > 0  # what survived is out of the next scheduled ones


def test_a_cycle_that_was_frozen_is_freed_once_memory_in_use_grew_by_a_quarter(
        policy: GcPolicy) -> None:
    node, freed = cycle()
    policy.collect()  # alive: frozen
    del node
    policy.collect()
    assert freed == []  # garbage now, but frozen: a scheduled collection does not see it
    assert policy.pauses.count["all"] == 1  # the one at start

    grown = [[] for _ in range(int(sys.getallocatedblocks() * THAW_GROWTH) + 1)]
    policy.collect()
    assert freed == [True]
    assert policy.pauses.count["all"] == 2 and policy.pauses.collected["all"] >= 2
    del grown


def test_while_busy_the_collection_of_everything_waits_until_memory_doubled(
        policy: GcPolicy) -> None:
    busy = [True]
    policy.busy = lambda: busy[0]
    node, freed = cycle()
    policy.collect()  # alive: frozen
    del node
    blocks = sys.getallocatedblocks()
    grown = [[] for _ in range(int(blocks * (THAW_GROWTH + BUSY_THAW_GROWTH) / 2))]
    policy.collect()
    assert freed == [] and policy.pauses.count["all"] == 1  # a rollout is not held up

    busy[0] = False
    policy.collect()
    assert freed == [True] and policy.pauses.count["all"] == 2

    node, freed = cycle()
    policy.collect()
    del node
    busy[0] = True
    grown += [[] for _ in range(int(sys.getallocatedblocks() * BUSY_THAW_GROWTH) + 1)]
    policy.collect()
    assert freed == [True] and policy.pauses.count["all"] == 3  # busy or not: bounded
    del grown
