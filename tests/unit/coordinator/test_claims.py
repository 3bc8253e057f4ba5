"""A cluster's claims on the pool (domain/pool/claims.py), a machine's life in the pool
(domain/machines/pooling.py) and the health policy that replaces unhealthy claimed machines
(domain/pool/remediation.py): situation in, the one change out, as an operator would read it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.assignments.assignment import assigned_items
from coordinator.domain.errors import Conflict
from coordinator.domain.machines.deletion import removal
from coordinator.domain.machines.pooling import (
    available,
    pool_approval,
    pool_prechecked,
    pool_removal,
    returned,
)
from coordinator.domain.model import (
    POOL,
    ClusterSpec,
    Machine,
    MachineState,
    NodeStatus,
    remedy_running,
)
from coordinator.domain.pool.claims import claims, held
from coordinator.domain.pool.remediation import remediation
from coordinator.domain.poolspec import GIB, MachineSelector
from coordinator.domain.reconcile.reconciling import decide_pass
from coordinator.domain.records import StoredCluster
from nodeagent.wire.protocol import PrecheckReport
from tests.support.builders import cluster, items, machine, node_facts, precheck_report

S = MachineState
NOW = 100.0


def pooled(hostname: str, created_at: float, labels: dict[str, str] | None = None,
           memory_gib: int = 16, state: MachineState = S.UNINITIALIZED,
           last_seen: float = NOW) -> Machine:
    """An available pool machine (approved, prechecked), with the facts its agent sent."""
    facts = {**node_facts(), "cpu": {"logical": 4}, "memory": {"total_bytes": memory_gib * GIB}}
    return replace(machine(hostname, None, state=state, created_at=created_at), cluster=POOL,
                   facts=facts, labels=labels or {}, last_seen=last_seen)


def claiming(managers: int = 0, workers: int = 0, settings: dict[str, Any] | None = None,
             **worker_selector: Any) -> ClusterSpec:
    spec = cluster(manager=items("deploy", 1), worker=items("reset", 1), **(settings or {}))
    pool = {"managers": {"count": managers}, "workers": {"count": workers,
                                                         "selector": worker_selector}}
    return spec.model_copy(update={"pool": ClusterSpec.model_validate(
        {**spec.model_dump(by_alias=True), "pool": pool}).pool})


def member(hostname: str, role: str, claim: str, state: MachineState = S.READY) -> Machine:
    return replace(machine(hostname, role, state=state), claim=claim)  # type: ignore[arg-type]


POOL_OF_FOUR = [pooled("p3", 3.0, {"disk": "ssd"}), pooled("p1", 1.0, {"disk": "ssd"}),
                pooled("p2", 2.0), pooled("p4", 4.0, {"disk": "ssd"}, memory_gib=64)]


@pytest.mark.parametrize(("spec", "members", "pool", "claimed", "notes"), [
    # pool order (registration), lowest free places, managers and workers alike
    (claiming(managers=1, workers=2), [], POOL_OF_FOUR,
     {"p1": "manager-0", "p2": "worker-0", "p3": "worker-1"}, ()),
    # a selector: only the labelled ones; the one it cannot fill is said, with why
    (claiming(workers=4, labels={"disk": "ssd"}), [], POOL_OF_FOUR,
     {"p1": "worker-0", "p3": "worker-1", "p4": "worker-2"},
     ("needs 4 workers with label disk=ssd; has 3, and the pool has no more that fit "
      "(1 lack label disk=ssd)",)),
    (claiming(workers=1, minMemoryGiB=64), [], POOL_OF_FOUR, {"p4": "worker-0"}, ()),
    (claiming(workers=2, minMemoryGiB=64), [], POOL_OF_FOUR, {"p4": "worker-0"},
     ("needs 2 workers with >= 64 GiB memory; has 1, and the pool has no more that fit "
      "(3 lack >= 64 GiB memory)",)),
    # places held (worker-0, worker-2 leaving) stay held: the claim takes worker-1, worker-3
    (claiming(workers=3), [member("w0", "worker", "worker-0"),
                           member("w2", "worker", "worker-2", S.DELETING)],
     POOL_OF_FOUR, {"p1": "worker-1", "p2": "worker-3"}, ()),
    # enough already: nothing claimed
    (claiming(workers=1), [member("w0", "worker", "worker-0")], POOL_OF_FOUR, {}, ()),
    # not available: Pending (not prechecked since it came back), silent, a member's hostname
    (claiming(workers=3), [member("p2", "worker", "")],
     [pooled("p1", 1.0, state=S.PENDING), pooled("p3", 3.0, last_seen=0.0),
      pooled("p2", 2.0)], {},
     ("needs 3 workers with any machine; has 0, and the pool has no more that fit (1 lack a "
      "hostname no member has, 1 lack an agent that answers)",)),
])
def test_claims_table(spec: ClusterSpec, members: list[Machine], pool: list[Machine],
                      claimed: dict[str, str], notes: tuple[str, ...]) -> None:
    decided = claims(spec, members, pool, {}, NOW)
    got = {m.hostname: m.claim for m in decided.change.machines}
    assert (got, decided.notes) == (claimed, notes)
    for taken in decided.change.machines:
        assert (taken.cluster, taken.state, taken.approved, taken.role) == (
            "edge", S.PENDING, True, taken.claim.rsplit("-", 1)[0])
    assert sorted(e.message for e in decided.change.events) == sorted(
        f"{h} claimed from the pool as {c}" for h, c in claimed.items())
    assert set(decided.change.wake) == {m.id for m in decided.change.machines}


def test_scaling_workers_down_gives_back_the_highest_places_all_at_once() -> None:
    members = [member(f"w{i}", "worker", f"worker-{i}") for i in range(5)]
    decided = claims(claiming(workers=3), members, [], {}, NOW)
    leaving = {m.hostname: m.state for m in decided.change.machines}
    assert leaving == {"w4": S.DELETING, "w3": S.DELETING}
    assert {e.message for e in decided.change.events if e.kind == "released"} == {
        "w4 (worker-4) goes back to the pool: pool.workers.count is 3",
        "w3 (worker-3) goes back to the pool: pool.workers.count is 3"}


def test_scaling_managers_down_goes_one_at_a_time_within_the_quorum_guard() -> None:
    managers = [member(f"m{i}", "manager", f"manager-{i}") for i in range(3)]
    decided = claims(claiming(managers=1), managers, [], {}, NOW)
    assert [(m.hostname, m.state) for m in decided.change.machines] == [("m2", S.DELETING)]
    leaving = [*managers[:2], replace(managers[2], state=S.DELETING)]
    waits = claims(claiming(managers=1), leaving, [], {}, NOW)
    assert (list(waits.change.machines), waits.notes) == (
        [], ("scaling managers to 1 waits: managers leave one at a time",))
    two = managers[:2]
    guarded = claims(claiming(managers=1), two, [], {}, NOW)
    assert not guarded.change.machines
    assert guarded.notes[0].startswith("scaling managers to 1 waits: deleting m1 would leave 1 "
                                       "of the 2 deployed managers")


def test_a_cluster_being_deleted_or_claiming_nothing_claims_nothing() -> None:
    assert not claims(claiming(workers=2), [], POOL_OF_FOUR, {}, NOW, deleting=True).change.writes
    assert not claims(cluster(), [], POOL_OF_FOUR, {}, NOW).change.writes


def test_held_counts_each_role_s_claimed_machines_not_leaving() -> None:
    members = [member("w0", "worker", "worker-0"), member("w1", "worker", "worker-1", S.DELETING),
               member("x", "worker", "")]
    assert [(h.role, h.wanted, h.held) for h in held(claiming(managers=1, workers=2), members)] \
        == [("manager", 1, 0), ("worker", 2, 1)]


@pytest.mark.parametrize(("selector", "says"), [
    ({}, "any machine"),
    ({"labels": {"rack": "a"}, "minCpus": 8}, "label rack=a, >= 8 CPUs"),
    ({"disk": {"minSizeGiB": 500, "type": "ssd"}, "interface": "eth9"},
     "a >= 500 GiB ssd disk, interface eth9"),
])
def test_a_selector_says_what_it_asks(selector: dict[str, Any], says: str) -> None:
    assert MachineSelector.model_validate(selector).text() == says


def test_a_selector_with_a_label_kubernetes_would_refuse_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="rack a"):
        MachineSelector.model_validate({"labels": {"rack a": "x"}})


def test_a_claimed_machine_that_ran_nothing_goes_back_to_the_pool_at_once() -> None:
    change = removal(member("w0", "worker", "worker-0", S.PENDING), [], claiming(workers=1), NOW)
    assert change is not None
    (back,) = change.machines
    assert (back.cluster, back.state, back.claim, back.role, back.incarnation, change.removed) \
        == (POOL, S.PENDING, "", None, 1, {})
    assert change.events[0].message == ("w0 (worker-0) returned to the pool: it had run no "
                                        "item; available again once its prechecks pass")


def test_a_claimed_machine_whose_reset_items_ran_goes_back_to_the_pool_not_away() -> None:
    spec = claiming(workers=1)
    leaving = replace(member("w0", "worker", "worker-0", S.DELETING), applied=frozenset(
        i.fingerprint() for i in spec.items("worker", "reset")), outputs={"a.b": "secret"},
        remediation="its Node is gone", remedy_serial=2, remedy_since=1.0)
    passed = decide_pass(StoredCluster(spec, 1, 0.0, 0.0), [leaving], NOW)
    assert passed.change.removed == {}
    (back,) = passed.change.machines
    assert (back.cluster, back.state, back.approved, back.claim, back.incarnation,
            back.applied, back.outputs, back.precheck, back.remediation, back.remedy_since) == (
        POOL, S.PENDING, True, "", 1, frozenset(), {}, {}, "", None)
    assert [e.kind for e in passed.change.events] == ["returned"]
    assert passed.current == []


def test_back_in_the_pool_a_machine_is_available_only_on_a_passing_report() -> None:
    back, _ = returned(member("w0", "worker", "worker-0", S.DELETING), "its reset items ran", NOW)
    assert not available(back)
    failing = PrecheckReport.model_validate(precheck_report("w0", failing=("os", "old")))
    still = pool_prechecked(back, failing, NOW, ()).machines[0]
    assert (still.state, available(still)) == (S.PENDING, False)
    passing = PrecheckReport.model_validate(precheck_report("w0"))
    change = pool_prechecked(still, passing, NOW, ())
    assert available(change.machines[0])
    assert [e.message for e in change.events] == [
        "w0 prechecks now pass", "w0 prechecked again: available in the pool"]


def test_pool_approval_takes_labels_and_refuses_what_a_claim_gives() -> None:
    waiting = pooled("p1", 1.0, state=S.PENDING)
    waiting = replace(waiting, approved=False)
    change = pool_approval(waiting, None, {"disk": "ssd"}, None, None, NOW)
    assert (change.machines[0].state, change.machines[0].labels) == (
        S.UNINITIALIZED, {"disk": "ssd"})
    with pytest.raises(Conflict, match="its role and ip come with the cluster"):
        pool_approval(waiting, "worker", None, None, "10.0.0.1", NOW)
    failing = replace(waiting, precheck=precheck_report("p1", failing=("os", "old")))
    with pytest.raises(Conflict, match="hard prechecks failed: os: old"):
        pool_approval(failing, None, None, None, None, NOW)


def test_a_pool_machine_is_removed_at_once() -> None:
    change = pool_removal(pooled("p1", 1.0), NOW)
    assert (change.removed, change.events[0].message) == (
        {"id-p1": NOW}, "p1 removed from the pool")


# -- the health policy (domain/pool/remediation.py) ---------------------------------------

def healing(after: float | None = 60, max_unhealthy: int = 1, workers: int = 5) -> ClusterSpec:
    """Its Nodes watched (a kubeconfig), so a Node found NotReady counts."""
    return claiming(managers=1, workers=workers, settings={
        "kubernetes": {"kubeconfig": "/etc/k.conf"},
        "health": {"unhealthyAfterSeconds": after, "maxUnhealthy": max_unhealthy}})


def node_down(m: Machine, since: float) -> Machine:
    return replace(m, node=NodeStatus(waiting_since=0.0, name=m.hostname, ready=False,
                                      reason="KubeletNotReady", condition="False",
                                      unready_since=since))


def silent(m: Machine, last_seen: float) -> Machine:
    return replace(m, responding=False, last_seen=last_seen)


FIVE = [member(f"w{i}", "worker", f"worker-{i}") for i in range(5)]


@pytest.mark.parametrize(("spec", "members", "replaced", "notes"), [
    # no policy: nothing, whatever is down
    (healing(after=None), [node_down(FIVE[0], 0.0), *FIVE[1:]], [], ()),
    # down for less than T: not yet
    (healing(), [node_down(FIVE[0], NOW - 30), *FIVE[1:]], [], ()),
    # Node NotReady, or agent silent (its heartbeat timeout counted), for longer than T
    (healing(), [node_down(FIVE[0], NOW - 61), *FIVE[1:]], ["w0"], ()),
    (healing(), [silent(FIVE[2], NOW - 30 - 61), *FIVE[:2], *FIVE[3:]], ["w2"], ()),
    # two unhealthy, maxUnhealthy 1: the circuit breaker holds, and says so
    (healing(), [node_down(FIVE[0], NOW - 61), node_down(FIVE[1], NOW - 10), *FIVE[2:]], [],
     ("2 machines unhealthy (w0, w1), more than health.maxUnhealthy (1): none is remediated; "
      "look for what they share (the network, the API server)",)),
    (healing(max_unhealthy=2), [node_down(FIVE[0], NOW - 61), node_down(FIVE[1], NOW - 61),
                                *FIVE[2:]], ["w0", "w1"], ()),
    # one already being replaced counts towards the limit
    (healing(), [node_down(FIVE[0], NOW - 61), replace(FIVE[1], state=S.DELETING,
                                                        remediation="gone"), *FIVE[2:]], [],
     ("1 machines unhealthy (w0) and 1 being replaced, more than health.maxUnhealthy (1): none "
      "is remediated; look for what they share (the network, the API server)",)),
    # not claimed from the pool: nothing can replace it
    (healing(), [node_down(replace(FIVE[0], claim=""), NOW - 61), *FIVE[1:]], [],
     ("w0 is unhealthy (its Node w0 is NotReady (KubeletNotReady)) but was not claimed from "
      "the pool: nothing replaces it; fix or delete it",)),
])
def test_remediation_table(spec: ClusterSpec, members: list[Machine], replaced: list[str],
                           notes: tuple[str, ...]) -> None:
    decided = remediation(spec, members, NOW)
    assert ([m.hostname for m in decided.change.machines], decided.notes) == (replaced, notes)
    for leaving in decided.change.machines:
        assert (leaving.state, bool(leaving.remediation)) == (S.DELETING, True)
    assert len(decided.actions) == len(replaced)


def test_a_replaced_machine_says_why_and_its_place_is_claimed_again() -> None:
    members = [node_down(FIVE[0], NOW - 125), *FIVE[1:]]
    decided = remediation(healing(), members, NOW)
    (leaving,) = decided.change.machines
    assert decided.change.events[-1].message == (
        "w0 (worker-0) unhealthy for 2m05s, longer than health.unhealthyAfterSeconds (1m00s): "
        "its Node w0 is NotReady (KubeletNotReady); replaced from the pool (its reset items run "
        "if its agent answers)")
    refill = claims(healing(), [leaving, *FIVE[1:]], POOL_OF_FOUR, {}, NOW)
    assert [(m.hostname, m.claim) for m in refill.change.machines] == [
        ("p1", "manager-0"), ("p2", "worker-5")]  # worker-0 is held until w0 is gone


def test_a_silent_machine_being_replaced_is_removed_without_its_reset_not_returned() -> None:
    spec = healing()
    leaving = silent(replace(FIVE[0], state=S.DELETING, remediation="silent"), 0.0)
    passed = decide_pass(StoredCluster(spec, 1, 0.0, 0.0), [leaving], NOW)
    assert passed.change.removed == {leaving.id: NOW}
    assert passed.change.events[-1].message.endswith(
        "being replaced while its agent is silent: reset items skipped: machine removed")
    answering = replace(leaving, responding=True)
    waits = decide_pass(StoredCluster(spec, 1, 0.0, 0.0), [answering], NOW)
    assert waits.change.removed == {}  # it answers: its reset items run first


def test_an_unhealthy_machine_runs_its_remedy_items_once_before_it_is_replaced() -> None:
    spec = healing().model_copy(update={"machine_types": type(healing().machine_types)(
        manager=items("deploy", 1), worker=[*items("reset", 1), *items("remedy", 1, "kick-")])})
    down = node_down(FIVE[0], NOW - 61)
    first = remediation(spec, [down, *FIVE[1:]], NOW)
    (running,) = first.change.machines
    assert (running.state, running.remedy_serial, running.remedy_since) == (S.READY, 1, NOW)
    assert first.actions[0].startswith("w0 unhealthy for 1m01s: its Node w0 is NotReady "
                                       "(KubeletNotReady); runs its remedy items (kick-remedy-0)")
    assert remedy_running(spec, running)
    # handed out with its own version: its agent runs them again each time
    (phase, handed) = assigned_items(spec, running, [], None)
    assert (phase, [i.version.endswith("+remedy.1") for i in handed.items]) == ("remedy", [True])
    # done, still down: nothing until unhealthyAfterSeconds from the remedy, then replaced
    done = replace(running, remedy_done=("kick-remedy-0",))
    assert not remediation(spec, [done, *FIVE[1:]], NOW + 30).change.writes
    later = remediation(spec, [done, *FIVE[1:]], NOW + 61)
    assert [(m.hostname, m.state) for m in later.change.machines] == [("w0", S.DELETING)]
    # silent, it cannot run them: replaced at once
    gone = silent(FIVE[0], NOW - 100)
    assert [m.state for m in remediation(spec, [gone, *FIVE[1:]], NOW).change.machines] == [
        S.DELETING]


def test_a_machine_upgrading_or_reconfiguring_is_not_judged_unhealthy() -> None:
    for state in (S.UPGRADE, S.RECONFIGURE, S.DEPLOY):
        down = node_down(replace(FIVE[0], state=state), NOW - 600)
        assert not remediation(healing(), [down, *FIVE[1:]], NOW).change.writes


def test_unhealthy_managers_are_replaced_one_at_a_time_and_never_below_quorum() -> None:
    managers = [member(f"m{i}", "manager", f"manager-{i}") for i in range(3)]
    spec = healing(max_unhealthy=3)
    leaving = replace(managers[1], state=S.DELETING, remediation="gone")
    waits = remediation(spec, [node_down(managers[0], NOW - 61), leaving, managers[2]], NOW)
    assert (list(waits.change.machines), waits.notes) == (
        [], ("m0 is unhealthy: managers are replaced one at a time",))
    two = [node_down(managers[0], NOW - 61), managers[1]]
    guarded = remediation(spec, two, NOW)
    assert not guarded.change.writes
    assert guarded.notes[0].startswith("m0 is unhealthy, not replaced: deleting m0 would leave "
                                       "1 of the 2 deployed managers")
