"""Any manager can do what the first one did (issue 33): the cluster keeps its outputs when the
manager that produced them goes, and a value another manager produces never replaces one it
keeps; the upgrade's control-plane step runs on whichever manager upgrades first in a release,
decided at its admission and kept while it upgrades; the coordinator's kubeconfig comes from
any Ready manager that answers; and an item waiting for an output no manager can produce any
more says so, with what to do, rather than wait for ever."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from coordinator.domain.assignments.assignment import assigned_items
from coordinator.domain.model import ClusterSpec, Machine, MachineState, Material, machine_items
from coordinator.domain.nodes.kubeaccess import KubeAccess, kube_access
from coordinator.domain.records import ClusterOutput
from coordinator.domain.releases.releases import (
    baseline,
    first_only_notes,
    first_upgrader,
    first_upgrader_items,
    next_upgrader,
    to_run,
)
from coordinator.domain.rollout.planner import enact, plan, plan_to_fixpoint, upgrade_plan
from coordinator.domain.specs.outputs import (
    adopted,
    cluster_outputs,
    differing,
    differing_text,
    problems,
    waits_text,
)
from coordinator.domain.views.rendering import render_cluster
from nodeagent.wire.protocol import StateItem
from tests.support.builders import machine, moves

READY, UPGRADE, DELETING = MachineState.READY, MachineState.UPGRADE, MachineState.DELETING
SPEC = """
name: edge
release: "1"
settings: {drain: {enabled: false}}
machineTypes:
  manager:
    - name: init
      phase: deploy
      when: {firstManager: true}
      outputs: [{name: endpoint, secret: false}]
      action: {type: exec, argv: [init]}
    - name: join
      phase: deploy
      when: {firstManager: false}
      action: {type: exec, argv: [join, "${outputs.control-plane.endpoint}"]}
    - name: control-plane
      phase: deploy
      outputs: [{name: caCertHash}, {name: endpoint, secret: false}]
      action: {type: exec, argv: [outputs]}
    - name: apply
      phase: upgrade
      version: "1"
      when: {firstUpgrader: true}
      action: {type: exec, argv: [kubeadm, upgrade, apply]}
    - name: node
      phase: upgrade
      version: "1"
      when: {firstUpgrader: false}
      action: {type: exec, argv: [kubeadm, upgrade, node]}
  worker:
    - {name: join, phase: deploy, action: {type: exec, argv: [join, "${outputs.init.endpoint}"]}}
    - {name: node, phase: upgrade, version: "1", action: {type: exec, argv: [kubeadm, upgrade, node]}}
"""


def spec_at(release: str = "1", text: str = SPEC) -> ClusterSpec:
    """The spec at a release whose upgrade items are versioned by it (as the profile's are)."""
    return ClusterSpec.model_validate(yaml.safe_load(text.replace('release: "1"', f'release: "{release}"')
                                                     .replace('version: "1"', f'version: "{release}"')))


def manager(hostname: str, order: int, **changes: object) -> Machine:
    """A manager deployed at release 1 (its deploy items applied, its upgrade items as
    baseline), admitted order-th (a worker with order 0)."""
    role = "manager" if order else "worker"
    admitted = replace(machine(hostname, role, state=READY, created_at=order or 10),
                       deploy_order=order, release="1")
    deployed = {i.fingerprint() for i in machine_items(spec_at("1"), admitted, "deploy")}
    changes = {"applied": frozenset(deployed) | baseline(spec_at("1"), role), **changes}
    return replace(admitted, **changes)  # type: ignore[arg-type]


def upgraded(spec: ClusterSpec, machines: list[Machine]) -> list[Machine]:
    """machines once every item of their upgrade ran (the planner then records them Ready)."""
    return [replace(m, applied=m.applied | {f for _, f in to_run(spec, m)})
            if m.state is UPGRADE else m for m in machines]


def step_names(spec: ClusterSpec, m: Machine) -> list[str]:
    return [i.name for i, _ in to_run(spec, m)]


def test_the_manager_that_upgrades_first_runs_the_control_plane_step_with_the_first_gone() -> None:
    """m1, which deployed first, was deleted: m2 upgrades first and runs `upgrade apply`, m3
    `upgrade node` after it. Before, the step was the first manager's: nobody ran it."""
    spec = spec_at("2")
    machines = [manager("m2", 2), manager("m3", 3)]
    decisions = plan(spec, machines)
    assert moves(decisions) == [("m2", UPGRADE)]
    assert decisions[0].first_upgrader
    assert decisions[0].reason == ("manager upgrades first in this release (one at a time): "
                                   "runs upgrade/apply")
    machines = enact(machines, decisions, now=1.0)
    assert machines[0].first_upgrader and step_names(spec, machines[0]) == ["apply"]
    assert next_upgrader(spec, machines) == machines[0]
    machines, decisions = plan_to_fixpoint(spec, upgraded(spec, machines), now=2.0)
    assert moves(decisions) == [("m2", READY), ("m3", UPGRADE)]
    m2, m3 = machines
    assert not m2.first_upgrader and not m3.first_upgrader, "recorded only while it upgrades"
    assert step_names(spec, m3) == ["node"]
    machines, decisions = plan_to_fixpoint(spec, upgraded(spec, machines), now=3.0)
    assert [m.release for m in machines] == ["2", "2"] and next_upgrader(spec, machines) is None


def test_a_manager_that_joined_at_the_release_leaves_the_control_plane_step_to_an_older_one(
        ) -> None:
    """m4 joined once release 2 was applied (its upgrade items taken as its baseline), to a
    control plane still at release 1: m2 still upgrades it (`upgrade apply`); were m4 taken
    for an upgraded control plane, nobody would."""
    spec = spec_at("2")
    joined = replace(manager("m4", 4), release="2",
                     applied=manager("m4", 4).applied | baseline(spec, "manager"))
    decisions = plan(spec, [manager("m2", 2), joined])
    assert moves(decisions) == [("m2", UPGRADE)] and decisions[0].first_upgrader
    assert [i.name for i, _ in to_run(spec, joined)] == [], "m4 has nothing to run"


def test_a_release_that_leaves_the_control_plane_step_unchanged_runs_it_nowhere() -> None:
    """m1 starts the control plane at release 1 (init) and m2 joins it there: both take the
    first upgrader's items as baseline on reaching Ready, so release 2, which changes no
    upgrade item (a certificate renewal's release), has nothing for either to run. Before,
    no manager ever had them: every release ran `upgrade apply` again on the first upgrader."""
    spec, machines = spec_at("1"), []
    for name, order in (("m1", 1), ("m2", 2)):
        deploying = replace(manager(name, order), state=MachineState.DEPLOY, release="")
        deploying = replace(deploying, applied=frozenset(
            i.fingerprint() for i in machine_items(spec, deploying, "deploy")))
        machines, _ = plan_to_fixpoint(spec, [*machines, deploying], now=float(order))
    assert [(m.hostname, m.state, m.release) for m in machines] == [
        ("m1", READY, "1"), ("m2", READY, "1")]
    renewal = ClusterSpec.model_validate(yaml.safe_load(SPEC.replace('release: "1"', 'release: "2"')
        .replace("  worker:\n", "    - {name: renew, phase: upgrade, version: b, action: {type: exec, "
                 "argv: [kubeadm, certs, renew, all]}}\n  worker:\n")))
    machines, _ = plan_to_fixpoint(renewal, machines, now=3.0)
    assert [(m.state, step_names(renewal, m)) for m in machines] == [
        (UPGRADE, ["renew"]), (READY, ["renew"])], "m1 upgrades first, to run the new item alone"
    machines, _ = plan_to_fixpoint(renewal, upgraded(renewal, machines), now=4.0)
    assert [(m.state, step_names(renewal, m)) for m in machines] == [
        (READY, []), (UPGRADE, ["renew"])]


def test_the_first_manager_still_upgrades_first_when_it_is_there() -> None:
    spec = spec_at("2")
    machines = enact(ms := [manager("m1", 1), manager("m2", 2)], plan(spec, ms), now=1.0)
    assert [(m.hostname, m.first_upgrader, step_names(spec, m)) for m in machines] == [
        ("m1", True, ["apply"]), ("m2", False, ["node"])]


def test_a_first_upgrader_deleted_before_it_finished_leaves_the_step_to_the_next() -> None:
    spec = spec_at("2")
    machines = enact(ms := [manager("m2", 2), manager("m3", 3)], plan(spec, ms), now=1.0)
    assert not machines[0].with_state(DELETING, now=2.0).first_upgrader
    decisions = plan(spec, [machines[1]])  # m2's record gone
    assert moves(decisions) == [("m3", UPGRADE)] and decisions[0].first_upgrader


def test_the_upgrade_plan_and_the_rendering_name_the_manager_that_runs_the_step() -> None:
    spec = spec_at("2")
    machines = [manager("m2", 2), manager("m3", 3), manager("w1", 0)]
    plan_ = upgrade_plan(spec, machines)
    assert [[(u.machine.hostname, [i.name for i in u.items]) for u in step]
            for step in plan_.steps] == [[("m2", ["apply"])], [("m3", ["node"])], [("w1", ["node"])]]
    assert any("upgrade/apply (now: m2)" in note for note in plan_.notes), plan_.notes
    rendering = render_cluster(spec, machines, phase="upgrade")
    assert [(m.hostname, [i.name for p in m.phases for i in p.items])
            for m in rendering.machines] == [("m2", ["apply"]), ("m3", ["node"]), ("w1", ["node"])]
    assert first_only_notes(spec, machines) == list(rendering.notes)
    assert rendering.notes[0].startswith("only the first manager (deleted) runs deploy/init:")
    assert "(m1) runs" in first_only_notes(spec, [manager("m1", 1), *machines])[0]


def test_the_cluster_keeps_an_output_when_its_manager_goes_and_never_replaces_it() -> None:
    """m1 produced the endpoint; m2 produced another one and the CA hash: the cluster keeps
    m1's endpoint once m1 is gone (before, m2's took its place unseen) and adopts m2's hash."""
    m1 = manager("m1", 1, outputs={"control-plane.endpoint": "10.0.0.1:6443"})
    m2 = manager("m2", 2, outputs={"control-plane.endpoint": "10.0.0.9:6443",
                                   "control-plane.caCertHash": "sha256:aa"})
    assert cluster_outputs([m2, m1])["outputs.control-plane.endpoint"] == "10.0.0.1:6443"
    kept = adopted({}, [m2, m1], now=5.0)
    assert kept == {"control-plane.endpoint": ClusterOutput("10.0.0.1:6443", m1.id, "m1", 5.0),
                    "control-plane.caCertHash": ClusterOutput("sha256:aa", m2.id, "m2", 5.0)}
    assert adopted(kept, [m2], now=6.0) == {}, "a kept value is never adopted again"
    values = cluster_outputs([m2], kept)  # m1 deleted
    assert values == {"outputs.control-plane.endpoint": "10.0.0.1:6443",
                      "outputs.control-plane.caCertHash": "sha256:aa"}
    assert differing(m2, values) == ["outputs.control-plane.endpoint"]
    text = differing_text(differing(m2, values), kept)
    assert "${outputs.control-plane.endpoint} differs from the cluster's (first produced by " \
           "m1), which is kept" in text
    assert "10.0.0" not in text, "a value is never shown"
    assert "sha256" not in repr(kept), "a kept value's repr shows it"


def test_an_item_waiting_for_an_output_no_manager_can_produce_says_so_and_what_to_do() -> None:
    """The workers' join names the init item's output, which only the first manager produces:
    with it deleted, the status says so instead of waiting for ever."""
    spec = spec_at()
    w5 = replace(machine("w5", state=MachineState.DEPLOY), waits=("outputs.init.endpoint",))
    text = waits_text(spec, w5, [manager("m2", 2), manager("m3", 3), w5])
    assert text.startswith("waits for ${outputs.init.endpoint} from item init, which no manager "
                           "of the cluster can run now: it runs only on the first manager, "
                           "which was deleted")
    assert "control-plane" in text, text
    alive = waits_text(spec, w5, [manager("m1", 1, state=MachineState.DEPLOY), w5])
    assert "no manager" not in alive and "m1 (Deploy)" in alive
    joining = replace(machine("m4", "manager", state=MachineState.DEPLOY),
                      waits=("outputs.control-plane.endpoint",))
    assert "no manager" not in waits_text(spec, joining, [manager("m2", 2), joining])


def test_a_managers_item_after_its_join_is_handed_out_once_the_join_material_is_revoked() -> None:
    """m2's join used its token, revoked once the join succeeded: the join (applied) no longer
    holds back the control-plane item after it, which produces the outputs again on m2.
    Before, m2 stayed in Deploy with no item to run."""
    joining = replace(manager("m2", 2, state=MachineState.DEPLOY, applied=frozenset()),
                      material=Material(1, "m1", 0.0, ("token",), {"outputs.token.token": "t"},
                                        minted_at=0.0))
    m1 = manager("m1", 1, outputs={"control-plane.endpoint": "10.0.0.1:6443"})
    tokened = spec_at(text=SPEC.replace('argv: [join, "${outputs.control-plane.endpoint}"]',
                                        'argv: [join, "${outputs.control-plane.endpoint}", '
                                        '"${outputs.token.token}"]', 1))
    join = machine_items(tokened, joining, "deploy")[0]
    _, handed = assigned_items(tokened, joining, [m1, joining], None)
    assert [i.name for i in handed.items] == ["join", "control-plane"]
    joined = replace(joining, applied=frozenset({join.fingerprint()}),
                     material=replace(joining.material, used_at=1.0))  # type: ignore[arg-type]
    _, handed = assigned_items(tokened, joined, [m1, joined], None)
    assert [i.name for i in handed.items] == ["control-plane"] and handed.waits == ()
    unjoined = replace(joined, applied=frozenset())
    _, handed = assigned_items(tokened, unjoined, [m1, unjoined], None)
    assert handed.items == [] and handed.waits == ("outputs.token.token",)


def test_the_coordinator_uses_the_kubeconfig_of_a_ready_manager_that_answers() -> None:
    spec = spec_at()
    m1, m2, m3 = (manager(h, n, kubeconfig=f"{h}'s") for n, h in enumerate(("m1", "m2", "m3"), 1))
    assert kube_access(spec, [m3, m2, m1]) == KubeAccess(text="m1's")
    assert kube_access(spec, [replace(m1, responding=False), m2, m3]) == KubeAccess(text="m2's")
    assert kube_access(spec, [replace(m1, state=UPGRADE), m2]) == KubeAccess(text="m2's")
    assert kube_access(spec, [replace(m1, state=DELETING), m3]) == KubeAccess(text="m3's")
    assert kube_access(spec, [m3]) == KubeAccess(text="m3's"), "the first manager deleted"
    silent = [replace(m, responding=False) for m in (m1, m2)]
    assert kube_access(spec, silent) == KubeAccess(text="m1's"), "none answers: still one"


def test_conditions_that_would_leave_an_upgrade_step_to_nobody_are_refused() -> None:
    spec = ClusterSpec.model_validate(yaml.safe_load("""
name: edge
release: "1"
machineTypes:
  manager:
    - {name: apply, phase: upgrade, when: {firstManager: true}, action: {type: exec, argv: [a]}}
    - {name: early, phase: deploy, when: {firstUpgrader: true}, action: {type: exec, argv: [b]}}
  worker:
    - {name: node, phase: upgrade, when: {firstUpgrader: true}, action: {type: exec, argv: [c]}}
"""))
    found = {(where[1], where[-1]): why for where, why in problems(spec)}
    assert "use `firstUpgrader`" in found[("manager", "firstManager")]
    assert "use it on upgrade items, not deploy items" in found[("manager", "firstUpgrader")]
    assert "only managers" in found[("worker", "firstUpgrader")]


def test_a_condition_keeps_its_fingerprint_when_it_names_no_first_upgrader() -> None:
    """Items written before firstUpgrader existed run again on no deployed machine (the
    fingerprint of this item on the code before it)."""
    item = StateItem.model_validate({"name": "init", "phase": "deploy", "when": {
        "firstManager": True, "labels": {"a": "b"}}, "action": {"type": "exec", "argv": [
            "kubeadm", "init"]}})
    assert item.fingerprint() == "beb398b9169cf7e03a15cc445dc68ccc"
    flagged = item.model_copy(update={"when": item.when.model_copy(  # type: ignore[union-attr]
        update={"first_upgrader": False})})
    assert flagged.fingerprint() != item.fingerprint()


def _upgraded_control_plane(m: Machine) -> Machine:
    """m having run release 2's first-upgrader items (`kubeadm upgrade apply`)."""
    return replace(m, applied=m.applied | first_upgrader_items(spec_at("2")))


# Which manager runs the control plane's upgrade step of release 2 (next_upgrader), as a
# table: the managers as they stand (deployed at release 1 in admission order, a worker with
# order 0), and who `upgrade plan` and the planner name (None: nobody runs it now).
UPGRADERS = [
    pytest.param([manager("m1", 1), manager("m2", 2)], "m1",
                 id="the first manager upgrades first when it is there"),
    pytest.param([manager("m2", 2), manager("m3", 3)], "m2",
                 id="the first manager deleted: the next admitted"),
    pytest.param([manager("m1", 1, responding=False), manager("m2", 2)], "m2",
                 id="the first manager silent: the next that answers"),
    pytest.param([manager("m1", 1, state=MachineState.DEPLOY), manager("m2", 2)], "m2",
                 id="a manager still deploying is not taken"),
    pytest.param([manager("m1", 1), manager("m2", 2, state=UPGRADE, first_upgrader=True)], "m2",
                 id="the one admitted as first upgrader keeps the role while it upgrades"),
    pytest.param([_upgraded_control_plane(manager("m1", 1)), manager("m2", 2)], None,
                 id="the control plane is at the release already: nobody"),
    pytest.param([manager("m1", 1, responding=False), manager("w1", 0)], None,
                 id="no manager answers: nobody, and a worker never"),
]


@pytest.mark.parametrize(("machines", "upgrader"), UPGRADERS)
def test_next_upgrader_table(machines: list[Machine], upgrader: str | None) -> None:
    chosen = next_upgrader(spec_at("2"), machines)
    assert (chosen.hostname if chosen else None) == upgrader


# Whether a manager admitted into Upgrade now is the first upgrader of release 2
# (first_upgrader, recorded at its admission), as a table.
FIRST_UPGRADER = [
    pytest.param(manager("m2", 2), [manager("m1", 1)], True,
                 id="no other manager upgraded the control plane: it does"),
    pytest.param(manager("m2", 2), [_upgraded_control_plane(manager("m1", 1))], False,
                 id="another manager ran upgrade apply: it runs upgrade node"),
    pytest.param(manager("m2", 2), [_upgraded_control_plane(manager("m1", 1, state=DELETING))],
                 True, id="the one that ran it is leaving: it does not count"),
    pytest.param(manager("w1", 0), [manager("m1", 1)], False, id="a worker never"),
]


@pytest.mark.parametrize(("admitted", "others", "first"), FIRST_UPGRADER)
def test_first_upgrader_table(admitted: Machine, others: list[Machine], first: bool) -> None:
    assert first_upgrader(spec_at("2"), admitted, [admitted, *others]) is first
