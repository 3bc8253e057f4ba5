"""The gate into Deploy: a prepared machine enters Deploy only once its agent's prechecks after
Prepare (--prepared) find every Kubernetes prerequisite holding and its containerd recent
enough for the cluster's Kubernetes version; until then it stays in Prepare with a note naming
the check and its remedy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain.errors import Conflict
from coordinator.domain.machines.approval import prechecked
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.rollout.planner import plan
from coordinator.domain.rollout.prerequisites import containerd_shortfall, deploy_gate
from coordinator.domain.rollout.remedies import machine_note
from coordinator.domain.rollout.steps import machine_step
from nodeagent.prechecks import CHECKS
from nodeagent.prechecks.kernel import evaluate_ip_forward
from nodeagent.prechecks.runner import grade, summarize
from nodeagent.prechecks.runtime import evaluate_runtime
from nodeagent.wire.protocol import PrecheckReport
from tests.support.builders import cluster, decided, finish_phase, item, machine

S = MachineState
CHECK = {c.name: c for c in CHECKS}
SOCKET = {"/run/containerd/containerd.sock": "containerd"}


def report(forwarding: str = "1", containerd: str | None = "1.7.24",
           prepared: bool | None = True) -> dict[str, Any]:
    """An agent's report with ip-forward and container-runtime as the checks judge them, run
    after Prepare (prepared), before it, or by an agent that only checks before approval."""
    results = [grade(CHECK["ip-forward"], evaluate_ip_forward(forwarding), 0.0, frozenset(),
                     bool(prepared)),
               grade(CHECK["container-runtime"], evaluate_runtime(SOCKET, containerd), 0.0,
                     frozenset(), bool(prepared))]
    return PrecheckReport(hostname="w1", role="worker", started_at=1.0, duration=0.1,
                          ok=all(r.status != "fail" for r in results), prepared=prepared,
                          summary=summarize(results), checks=results
                          ).model_dump(mode="json", by_alias=True)


def spec(kubernetes: str | None = "1.33.4") -> ClusterSpec:
    base = cluster(manager=[item("m", "prepare")], worker=[item("w", "prepare")])
    settings_ = base.settings.model_copy(update={"kubernetes": base.settings.kubernetes.model_copy(
        update={"version": kubernetes})})
    return base.model_copy(update={"settings": settings_})


def prepared(name: str, role: str, precheck: dict[str, Any], s: ClusterSpec) -> Machine:
    """A machine in Prepare whose prepare items are all applied."""
    m = machine(name, role, state=S.PREPARE)  # type: ignore[arg-type]
    return replace(finish_phase(s, m), precheck=precheck)


def admitted(s: ClusterSpec, machines: list[Machine]) -> set[str]:
    return {d.hostname for d in plan(s, machines) if d.to_state is S.DEPLOY}


def test_containerd_is_judged_against_the_clusters_kubernetes_version() -> None:
    """From Kubernetes 1.26 the kubelet speaks CRI v1 only: containerd 1.6.15+, 1.7+, 2.x."""
    assert containerd_shortfall("1.33.4", "1.6.14") == (
        "containerd 1.6.14 is older than Kubernetes 1.33.4 supports (it runs on containerd "
        "1.6.15+ or 1.7.0+ or 2.0.0+)")
    assert containerd_shortfall("1.26.0", "1.5.18") is not None  # no CRI v1 series
    assert containerd_shortfall("1.33.4", "1.6.20") is None  # Debian 12's
    assert containerd_shortfall("1.33.4", "1.7.0") is None
    assert containerd_shortfall("1.33.4", "2.1.0") is None
    assert containerd_shortfall("1.25.9", "1.5.18") is None  # CRI v1alpha2 still served


def test_from_kubernetes_1_36_containerd_1_x_is_refused() -> None:
    """Kubernetes 1.35 is the last release to run on containerd 1.x: Debian 12's 1.6.20 and
    Ubuntu's 1.7 fall short of 1.36, containerd 2.0 does not."""
    assert containerd_shortfall("1.36.0", "1.7.28") == (
        "containerd 1.7.28 is older than Kubernetes 1.36.0 supports (it runs on containerd "
        "2.0.0+)")
    assert containerd_shortfall("1.37.2", "1.6.20") is not None
    assert containerd_shortfall("1.35.3", "1.7.28") is None
    assert containerd_shortfall("1.36.0", "2.0.0") is None
    assert containerd_shortfall("1.36.0", "2.2.1") is None


def test_a_prepared_machine_on_containerd_1_x_waits_in_prepare_for_kubernetes_1_36() -> None:
    """The precheck path: the agent's report after Prepare (`precheck --prepared`) carries the
    containerd it measured; the coordinator holds the machine in Prepare with the remedy."""
    s = spec(kubernetes="1.36.0")
    m1 = replace(machine("m1", "manager", state=S.READY), applied=frozenset())
    ubuntu = prepared("w1", "worker", report(containerd="1.7.28"), s)
    assert admitted(s, [m1, ubuntu]) == set()
    note = machine_note(s, ubuntu, machine_step(s, ubuntu, 0.0), 0.0)
    assert "container-runtime: containerd 1.7.28 is older than Kubernetes 1.36.0" in note.text
    assert "containerd.io from the Docker repository" in note.remedy
    upgraded = prepared("w1", "worker", report(containerd="2.1.5"), s)
    assert admitted(s, [m1, upgraded]) == {"w1"}


def test_a_prepared_machine_waits_for_its_prerequisites_checked_after_prepare() -> None:
    s = spec()
    m1 = replace(machine("m1", "manager", state=S.READY), applied=frozenset())
    before = prepared("w1", "worker", report(forwarding="0", prepared=False), s)
    assert before.precheck_failures() == []  # deferred: to be set by Prepare
    assert admitted(s, [m1, before]) == set()
    note = machine_note(s, before, machine_step(s, before, 0.0), 0.0)
    assert note.text.startswith("prepared; waiting for its agent to check the Kubernetes "
                                "prerequisites again")

    failing, _ = decided(prechecked(s.settings, before,
                                    PrecheckReport.model_validate(report(forwarding="0")), 5.0))
    assert failing.state is S.PREPARE and admitted(s, [m1, failing]) == set()
    note = machine_note(s, failing, machine_step(s, failing, 5.0), 5.0)
    assert note.failing
    assert note.text == ("Kubernetes prerequisites fail after Prepare: ip-forward: IPv4 "
                         "forwarding is off (/proc/sys/net/ipv4/ip_forward = 0)")
    assert note.remedy.startswith("ip-forward: `sysctl -w net.ipv4.ip_forward=1`")

    fixed, events = decided(prechecked(s.settings, failing, PrecheckReport.model_validate(report()), 9.0))
    assert events[0].message == "w1's Kubernetes prerequisites hold after Prepare"
    assert admitted(s, [m1, fixed]) == {"w1"}


def test_an_old_containerd_holds_the_machine_in_prepare_naming_the_matrix() -> None:
    s = spec()
    m1 = replace(machine("m1", "manager", state=S.READY), applied=frozenset())
    old = prepared("w1", "worker", report(containerd="1.5.18"), s)
    assert admitted(s, [m1, old]) == set()
    note = machine_note(s, old, machine_step(s, old, 0.0), 0.0)
    assert "container-runtime: containerd 1.5.18 is older than Kubernetes 1.33.4" in note.text
    assert admitted(spec(kubernetes=None), [m1, old]) == {"w1"}  # no version to judge against


def test_reports_of_the_wrong_stage_are_refused() -> None:
    s = spec()
    pending = machine("w1", "worker", approved=False)
    with pytest.raises(Conflict, match=r"those before approval \(without --prepared\)"):
        prechecked(s.settings, pending, PrecheckReport.model_validate(report()), 1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["0", "1", None]),
                          st.sampled_from(["1.5.18", "1.6.20", "1.7.24", "2.0.4", None]),
                          st.sampled_from([True, False, None]),
                          st.sampled_from(["manager", "worker"])), min_size=1, max_size=6),
       st.sampled_from(["1.28.2", "1.33.4", None]))
def test_no_machine_enters_deploy_with_a_failing_prerequisite(
        fleet: list[tuple[str | None, str | None, bool | None, str]],
        kubernetes: str | None) -> None:
    s = spec(kubernetes)
    ready = replace(machine("m0", "manager", state=S.READY), applied=frozenset())
    machines = [ready, *(prepared(f"n{i}", role, report(forwarding, containerd, stage), s)
                         for i, (forwarding, containerd, stage, role) in enumerate(fleet))]
    for m in machines[1:]:
        gate = deploy_gate(kubernetes, m.precheck)
        if m.hostname in admitted(s, machines):
            assert gate.checked is not False and not gate.unmet, m.precheck
            if gate.checked:  # checked after Prepare: every prerequisite held
                checks = {c["name"]: c for c in m.precheck["checks"]}
                assert checks["ip-forward"]["status"] == "pass"
                assert checks["container-runtime"]["status"] == "pass"
