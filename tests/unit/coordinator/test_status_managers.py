"""The status keeps a cluster's managers apart from its machines (statuscache.Kept.managers),
so that choosing the kubeconfig whose certificate it shows never walks every worker: the
view follows every write (a new manager, a role changed, a machine gone)."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.rollout.steps import History
from coordinator.service.statuscache import Kept
from tests.support.builders import machine


def test_the_managers_follow_every_write() -> None:
    m1, w1 = machine("m1", "manager"), machine("w1", "worker")
    kept = Kept(0.0, {m.id: m for m in (m1, w1)}, History(), 0)
    assert kept.managers == [m1]
    m2 = machine("m2", "manager")
    kept.put(m2)
    kept.put(replace(w1, role="manager"))
    kept.put(replace(m1, role="worker"))
    assert sorted(m.hostname for m in kept.managers) == ["m2", "w1"]
    kept.drop(m2.id)
    assert [m.hostname for m in kept.managers] == ["w1"]
