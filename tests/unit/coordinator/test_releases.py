"""What each release asks of machines already deployed, through the planner and the agents'
assignments: a machine never runs the upgrade items of the release it deployed at; an upgrade
runs the prepare and deploy items that changed, then the upgrade items it has not applied; a
release with nothing to run for a machine records it at that release."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coordinator.domain.assignments.assignment import AssignmentInputs, build_assignment
from coordinator.domain.assignments.reports import fold_report
from coordinator.domain.model import ClusterSpec, DrainStage, Machine, MachineState, Role
from coordinator.domain.records import StoredCluster
from coordinator.domain.rollout.planner import plan, plan_to_fixpoint, upgrade_plan
from coordinator.domain.rollout.steps import machine_step
from nodeagent.wire.protocol import ItemReport, StateItem
from tests.support.builders import cluster, decided, drained, machine

READY, UPGRADE = MachineState.READY, MachineState.UPGRADE
DEPLOY_ITEM: dict[Role, str] = {"manager": "control-plane", "worker": "join"}

# Per hostname, what its agent ran, in order: fingerprint -> "phase/name". Like the agent's
# journal, it runs an item of its assignment only if the journal does not hold it.
Journal = dict[str, dict[str, str]]


def versioned(name: str, phase: str, version: str = "1") -> StateItem:
    return StateItem.model_validate({"name": name, "phase": phase, "version": version,
                                     "action": {"type": "exec", "argv": ["true", name]}})


def spec_at(release: str, upgrades: Sequence[str] = (), join: str = "1", base: str = "1",
            manager_upgrades: Sequence[str] | None = None) -> ClusterSpec:
    """The cluster at release: a prepare and a deploy item per role (the worker's deploy item
    and both prepare items at the versions given), and an upgrade item per role for each of
    `upgrades` (written to upgrade to that release), kept from release to release."""
    def role_items(role: Role, releases: Sequence[str]) -> list[StateItem]:
        return [versioned("base", "prepare", base),
                versioned(DEPLOY_ITEM[role], "deploy", join if role == "worker" else "1"),
                *(versioned(f"upgrade-{role}-{r}", "upgrade", r) for r in releases)]

    return cluster(manager=role_items("manager", upgrades if manager_upgrades is None
                                      else manager_upgrades),
                   worker=role_items("worker", upgrades), release=release)


def agents_run(spec: ClusterSpec, machines: list[Machine], journal: Journal) -> list[Machine]:
    """Every answering agent runs what its assignment lists and its journal does not hold,
    and reports it applied; an upgrading node is drained before and Ready after."""
    stored = StoredCluster(spec, 1, 0.0, 0.0)
    after = []
    for m in machines:
        if m.responding and m.state is UPGRADE:
            m = drained(m)
        told = build_assignment(AssignmentInputs(stored, m, machines), None).items if m.responding else []
        runs = journal.setdefault(m.hostname, {})
        for item in told:
            runs.setdefault(item.fingerprint(), f"{item.phase}/{item.name}")
        m = replace(m, applied=m.applied | {i.fingerprint() for i in told})
        after.append(drained(m, DrainStage.NODE_READY) if told and m.state is UPGRADE else m)
    return after


def converge(spec: ClusterSpec, machines: list[Machine], journal: Journal) -> list[Machine]:
    for _ in range(30):
        machines, _ = plan_to_fixpoint(spec, machines, 0.0)
        ran = agents_run(spec, machines, journal)
        if ran == machines:
            return machines
        machines = ran
    raise AssertionError("the fleet did not settle")


def ran(journal: Journal, hostname: str) -> list[str]:
    return list(journal[hostname].values())


def fleet_at_1_5(journal: Journal) -> list[Machine]:
    """m1 and w1 deployed at 1.4.0 and upgraded to 1.5.0; then w2 joined, at 1.5.0."""
    machines = converge(spec_at("1.4.0"), [machine("m1", "manager"), machine("w1", created_at=1)],
                        journal)
    machines = converge(spec_at("1.5.0", ["1.5.0"]), machines, journal)
    return converge(spec_at("1.5.0", ["1.5.0"]), [*machines, machine("w2", created_at=2)], journal)


def test_a_worker_that_joined_at_a_release_never_runs_that_releases_upgrade_items() -> None:
    journal: Journal = {}
    machines = fleet_at_1_5(journal)
    assert ran(journal, "w1") == ["prepare/base", "deploy/join", "upgrade/upgrade-worker-1.5.0"]
    assert ran(journal, "w2") == ["prepare/base", "deploy/join"]

    machines = converge(spec_at("1.6.0", ["1.5.0", "1.6.0"]), machines, journal)
    assert ran(journal, "w2")[2:] == ["upgrade/upgrade-worker-1.6.0"], \
        "w2 ran the upgrade to the release it deployed at"
    assert ran(journal, "w1")[3:] == ["upgrade/upgrade-worker-1.6.0"]
    assert [(m.state, m.release) for m in machines] == [(READY, "1.6.0")] * 3


def test_a_ready_machine_runs_its_changed_deploy_item_then_the_upgrade_items() -> None:
    journal: Journal = {}
    machines = fleet_at_1_5(journal)
    v16 = spec_at("1.6.0", ["1.5.0", "1.6.0"], join="2")
    planned = upgrade_plan(v16, machines)
    assert [(u.machine.hostname, [f"{i.phase}/{i.name}" for i in u.items])
            for step in planned.steps for u in step] == [
        ("m1", ["upgrade/upgrade-manager-1.6.0"]),
        ("w1", ["deploy/join", "upgrade/upgrade-worker-1.6.0"]),
        ("w2", ["deploy/join", "upgrade/upgrade-worker-1.6.0"])]

    machines = converge(v16, machines, journal)
    for hostname, before in (("w1", 3), ("w2", 2)):
        assert ran(journal, hostname)[before:] == ["deploy/join", "upgrade/upgrade-worker-1.6.0"]
    assert ran(journal, "m1")[3:] == ["upgrade/upgrade-manager-1.6.0"]
    assert all(m.state is READY and m.release == "1.6.0" for m in machines)


def test_a_release_with_nothing_for_a_role_records_its_machines_at_it_without_an_upgrade() -> None:
    journal: Journal = {}
    machines = fleet_at_1_5(journal)
    v16 = spec_at("1.6.0", ["1.5.0"], manager_upgrades=["1.5.0", "1.6.0"])
    planned = upgrade_plan(v16, machines)
    assert [[u.machine.hostname for u in step] for step in planned.steps] == [["m1"]]
    assert [m.hostname for m in planned.nothing_to_run] == ["w1", "w2"]

    decisions = plan(v16, machines)
    assert [(d.hostname, d.to_state, d.reason) for d in decisions if d.machine_id != "id-m1"] == [
        (w, READY, "release 1.6.0 has nothing for it to run: recorded at 1.6.0") for w in ("w1", "w2")]
    machines = converge(v16, machines, journal)
    assert {m.hostname: m.release for m in machines} == {"m1": "1.6.0", "w1": "1.6.0", "w2": "1.6.0"}
    assert len(ran(journal, "w1")) == 3 and len(ran(journal, "w2")) == 2, "a worker ran something"


def test_items_changed_at_the_same_release_are_rolled_out_without_upgrade_items() -> None:
    journal: Journal = {}
    machines = fleet_at_1_5(journal)
    fixed = spec_at("1.5.0", ["1.5.0"], join="2")
    machines = converge(fixed, machines, journal)
    assert ran(journal, "w1")[3:] == ["deploy/join"]
    assert ran(journal, "w2")[2:] == ["deploy/join"]
    assert len(ran(journal, "m1")) == 3, "the manager's items did not change"


def test_upgrade_items_added_at_a_release_run_only_where_it_is_not_reached_yet() -> None:
    journal: Journal = {}
    machines = converge(spec_at("1.4.0"), [machine("m1", "manager"), machine("w1", created_at=1)],
                        journal)
    machines[1] = replace(machines[1], responding=False)  # w1 misses the upgrade to 1.5.0
    machines = converge(spec_at("1.5.0", ["1.5.0"]), [*machines, machine("w2", created_at=2)],
                        journal)
    late = spec_at("1.5.0", ["1.4.5", "1.5.0"])  # a step forgotten in 1.5.0
    assert [(d.hostname, d.to_state) for d in plan(late, machines)] == [("m1", READY), ("w2", READY)]
    machines = converge(late, [replace(m, responding=True) for m in machines], journal)
    assert ran(journal, "w1")[2:] == ["upgrade/upgrade-worker-1.4.5", "upgrade/upgrade-worker-1.5.0"]
    assert len(ran(journal, "w2")) == 2 and len(ran(journal, "m1")) == 3
    converge(spec_at("1.6.0", ["1.4.5", "1.5.0", "1.6.0"]), machines, journal)
    assert ran(journal, "w2")[2:] == ["upgrade/upgrade-worker-1.6.0"], "its baseline ran"


def test_a_machine_deploying_while_the_release_changes_upgrades_to_the_new_one() -> None:
    """w3 prepared at 1.5.0 (base 1) and entered Deploy with 1.5.0's upgrade items as its
    baseline; 1.6.0 changes base (a new Kubernetes version of the package items) while it
    deploys. It joined on what 1.5.0's prepare items installed, so it is not at 1.6.0: it
    upgrades, base again then 1.6.0's upgrade items, as the machines deployed before it do
    (before, it was recorded at 1.6.0 with 1.6.0's upgrade items as baseline: never run)."""
    journal: Journal = {}
    machines = fleet_at_1_5(journal)
    w3 = machine("w3", state=MachineState.PREPARE, created_at=3)
    w3 = replace(w3, applied=frozenset({versioned("base", "prepare").fingerprint()}))
    journal["w3"] = {versioned("base", "prepare").fingerprint(): "prepare/base"}
    machines, admitted = plan_to_fixpoint(spec_at("1.5.0", ["1.5.0"]), [*machines, w3], 0.0)
    assert [(d.hostname, d.to_state) for d in admitted] == [("w3", MachineState.DEPLOY)]
    machines = converge(spec_at("1.6.0", ["1.5.0", "1.6.0"], base="2"), machines, journal)
    assert ran(journal, "w3") == ["prepare/base", "deploy/join", "prepare/base",
                                  "upgrade/upgrade-worker-1.6.0"]
    assert [(m.state, m.release) for m in machines][-1] == (READY, "1.6.0")


def test_an_upgrade_keeps_its_list_while_its_items_are_reported() -> None:
    journal: Journal = {}
    machines = fleet_at_1_5(journal)
    v16 = spec_at("1.6.0", ["1.5.0", "1.6.0"], join="2")
    m1 = converge(v16, machines[:1], journal)[0]
    w1 = drained(plan_to_fixpoint(v16, [m1, machines[1]], 0.0)[0][1])
    assert w1.state is UPGRADE
    join, upgrade = build_assignment(AssignmentInputs(StoredCluster(v16, 1, 0.0, 0.0), w1, [m1]),
                                     None).items
    report = ItemReport(item="join", fingerprint=join.fingerprint(), phase="deploy",
                        status="succeeded", attempt=1, started_at=1.0, finished_at=2.0)
    folded = decided(fold_report(v16, ("m1",), w1, report, now=3.0))
    assert [e.message for e in folded.events] == [
        "deploy item join succeeded (attempt 1) in the upgrade"]
    assert folded.events[0].data["state"] == "Upgrade"
    step = machine_step(v16, folded.machine, now=3.0)
    assert (step.done, step.total, step.item, step.status) == (1, 2, upgrade.name, "waiting")
    again = build_assignment(AssignmentInputs(StoredCluster(v16, 1, 0.0, 0.0), folded.machine,
                                              [m1]), None)
    assert again.items == [join, upgrade], "the agent would restart a shorter phase"
