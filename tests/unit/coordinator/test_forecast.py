"""What a node's drain will meet, forecast from the live cluster's pods, budgets and replica
counts (domain/nodes/forecast.py): the blocks and slow-downs `upgrade plan` lists."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.domain.model import DrainSettings
from coordinator.domain.nodes.forecast import Hindrance, forecast, selects

SETTINGS = DrainSettings()


def pod(name: str, labels: dict[str, str] | None = None, owner: str | None = "web-rs",
        kind: str = "ReplicaSet", phase: str = "Running", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}",
                            "labels": labels or {"app": "web"}}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": kind, "name": owner, "uid": f"uid-{owner}",
                                    "controller": True}]
    return {"metadata": meta, "spec": extra.get("spec", {}), "status": {"phase": phase}}


def budget(name: str, allowed: int, selector: dict[str, Any] | None = None,
           **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": selector if selector is not None
                     else {"matchLabels": {"app": "web"}}, **spec},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "expectedPods": 2}}


def test_a_budget_that_allows_no_disruption_blocks_and_names_its_pods() -> None:
    found = forecast("w1", [pod("web-1"), pod("web-2")],
                     [budget("web", 0, minAvailable=2)], {"uid-web-rs": 2}, SETTINGS)
    assert found.evicted == ("default/web-1", "default/web-2") and found.blocked
    [blocks] = found.hindrances
    assert blocks == Hindrance(
        "blocks", "budget default/web allows no disruption now (minAvailable 2, 2 of 2 pods "
        "healthy): it holds default/web-1, default/web-2",
        "scale the workload up or relax budget default/web before the upgrade; or, once "
        "blocked, coordinator upgrade force (bypasses the budget)")


def test_a_budget_allowing_fewer_disruptions_than_its_pods_here_slows_the_drain() -> None:
    found = forecast("w1", [pod("web-1"), pod("web-2")], [budget("web", 1, maxUnavailable=1)],
                     {"uid-web-rs": 4}, SETTINGS)
    assert not found.blocked
    [slows] = found.hindrances
    assert slows.severity == "slows"
    assert slows.what.startswith("budget default/web allows 1 disruption(s) at a time "
                                 "(maxUnavailable 1, 2 of 2 pods healthy): 2 of its pods leave")


def test_a_single_replica_workload_is_down_until_its_replacement_runs() -> None:
    found = forecast("w1", [pod("solo-1", {"app": "solo"}, owner="solo-rs")], [],
                     {"uid-solo-rs": 1}, SETTINGS)
    [slows] = found.hindrances
    assert slows.severity == "slows" and "only replica of ReplicaSet solo-rs" in slows.what
    assert "run 2 or more replicas" in slows.remedy


def test_pods_the_settings_do_not_let_go_block_and_daemonsets_and_finished_pods_do_not() -> None:
    pods = [pod("bare", owner=None), pod("agent", owner="node-agent", kind="DaemonSet"),
            pod("job-1", owner="job", kind="Job", phase="Succeeded"),
            pod("cache", spec={"volumes": [{"name": "s", "emptyDir": {}}]})]
    found = forecast("w1", pods, [budget("web", 0)], {"uid-web-rs": 1}, SETTINGS)
    assert found.evicted == ("default/job-1",)
    assert [h.what for h in found.hindrances] == [
        "pod default/bare: no controller manages it (drain.force)",
        "pod default/cache: uses emptyDir data (drain.deleteEmptyDirData)"]
    # A finished pod leaves whatever its budget says; one the settings let go is in the way
    # of a budget like any other.
    allowed = DrainSettings.model_validate({"deleteEmptyDirData": True})
    found = forecast("w1", pods[2:], [budget("web", 0)], {}, allowed)
    assert [h.severity for h in found.hindrances] == ["blocks"]
    assert "it holds default/cache" in found.hindrances[0].what


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    ({}, {"app": "web"}, True),  # empty: every pod of the namespace
    (None, {"app": "web"}, False),  # null: none
    ({"matchLabels": {"app": "web"}}, {"app": "api"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
     {"tier": "b"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]},
     {"tier": "a"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
])
def test_a_budgets_selector_reads_as_the_api_server_reads_it(
        selector: dict[str, Any] | None, labels: dict[str, str], selected: bool) -> None:
    assert selects(selector, labels) is selected


def test_a_budget_of_another_namespace_or_selector_is_not_in_the_way() -> None:
    other = budget("api", 0, {"matchLabels": {"app": "api"}})
    elsewhere = {**budget("web", 0), "metadata": {"name": "web", "namespace": "prod"}}
    assert forecast("w1", [pod("web-1")], [other, elsewhere], {}, SETTINGS).hindrances == ()
