"""The one note and remedy every view shows for a machine (domain/rollout/remedies.py): a drain that
is Blocked or waits on budgets, an uncordon that fails, a Node not Ready after an upgrade or
in Deploy, with what the operator can do; and the upgrade plan's warning that drains will
block."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.model import (
    NO_ACCESS_DRAINS_SKIPPED,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    ItemProgress,
    Machine,
    MachineState,
    NodeStatus,
)
from coordinator.domain.nodes.kubeaccess import NO_DRAIN, NO_KUBECONFIG
from coordinator.domain.rollout.planner import upgrade_plan
from coordinator.domain.rollout.remedies import DRAIN_ANSWERS, Note, drain_failure, drain_warnings
from coordinator.domain.rollout.remedies import machine_note as decided
from coordinator.domain.rollout.steps import History, machine_step
from coordinator.domain.views.status import stages
from tests.support.builders import (
    at_release,
    cluster,
    finish_phase,
    item,
    items,
    machine,
    upgraded_cluster,
)

SPEC = cluster(manager=items("deploy", 1, "m"), worker=items("deploy", 1, "w"),
               kubernetes={"kubeconfig": "/etc/coordinator/kubeconfig",
                           "nodeReadyTimeoutSeconds": 60},
               drain={"timeoutSeconds": 600})
NOW = 10_000.0


def note(m: Machine, spec: ClusterSpec = SPEC, now: float = NOW, waits: str = "") -> Note:
    return decided(spec, m, machine_step(spec, m, now), now, waits)


def upgrading(drain: DrainStatus, state: MachineState = MachineState.UPGRADE) -> Machine:
    return replace(machine("w1", state=state), drain=drain, state_since=NOW - 900)


def test_a_blocked_drain_names_its_pods_and_budgets_and_the_three_answers() -> None:
    blocked = upgrading(DrainStatus(
        DrainStage.BLOCKED, started_at=NOW - 720, attempt=2,
        message="drain timed out: default/web-1 (budget default/web)",
        blocking_pods=("default/web-1",), blocking_budgets=("default/web",), held=True))
    found = note(blocked)
    assert found.text == ("drain Blocked (attempt 2, cordoned for 12m00s): drain timed out: "
                          "default/web-1 (budget default/web)")
    assert found.remedy.startswith("relax budget default/web or move its pods, then "
                                   "coordinator upgrade retry|skip|force w1 (retry: drain again")
    assert "skip: upgrade with the pods left on the node" in found.remedy
    assert found.failing and found.actions == ("drain/retry", "drain/skip", "drain/force")


def test_a_removals_blocked_drain_skips_to_the_reset() -> None:
    leaving = upgrading(DrainStatus(DrainStage.BLOCKED, NOW - 60, message="cannot evict 1 pods",
                                    blocking_pods=("default/solo",)), MachineState.DELETING)
    assert "move the pods named, then" in note(leaving).remedy
    assert "skip: reset with the pods left" in note(leaving).remedy


def test_a_drain_without_a_kubeconfig_says_how_to_give_one_or_do_without() -> None:
    blocked = upgrading(DrainStatus(DrainStage.BLOCKED, NOW - 5, message=NO_DRAIN))
    # Never cordoned: the coordinator had no way to the cluster's API.
    assert note(blocked).text == f"drain Blocked (attempt 1, not cordoned, for 5s): {NO_DRAIN}"
    remedy = note(blocked).remedy
    assert "settings.kubernetes.kubeconfig" in remedy and "kubeconfigFrom" in remedy
    assert "settings.drain.enabled: false" in remedy
    assert remedy.endswith("then coordinator upgrade retry w1 (or skip w1)")


def test_a_drain_waiting_on_a_budget_may_be_answered_before_its_timeout() -> None:
    waiting = upgrading(DrainStatus(DrainStage.DRAINING, NOW - 100, message=(
        "waiting: default/web-1 (budget default/web)"), blocking_pods=("default/web-1",),
        blocking_budgets=("default/web",)))
    found = note(waiting)
    assert found.text == ("drain Draining (attempt 1, 8m20s of its timeout left): waiting: "
                          "default/web-1 (budget default/web)")
    assert found.remedy.startswith("wait, or coordinator upgrade retry|skip|force w1")
    assert not found.failing and found.actions == DRAIN_ANSWERS
    plain = note(upgrading(DrainStatus(DrainStage.DRAINING, NOW - 1, message="cordon and drain")))
    assert (plain.remedy, plain.actions) == ("", ())


def test_a_failing_uncordon_says_for_how_long_why_and_what_to_check() -> None:
    failing = upgrading(DrainStatus(
        DrainStage.DRAINED, NOW - 300, message="uncordon failed, retrying: 403 Forbidden",
        step_error="403 Forbidden: nodes \"w1\" is forbidden", step_error_since=NOW - 65))
    found = note(failing)
    assert found.text == ("uncordon failing for 1m05s, retrying: 403 Forbidden: nodes \"w1\" is "
                          "forbidden")
    assert "kubectl auth can-i patch nodes" in found.remedy
    assert found.failing and found.actions == ()  # the API takes no drain answer now
    unreachable = replace(failing, drain=replace(failing.drain, step_error=NO_KUBECONFIG))
    assert "settings.kubernetes.kubeconfig" in note(unreachable).remedy
    leaving = replace(failing, state=MachineState.DELETING)
    assert note(leaving).text.startswith("Node deletion failing for 1m05s")


def test_a_node_not_ready_after_its_upgrade_says_its_condition_how_long_and_what_to_check() -> None:
    late = upgrading(DrainStatus(
        DrainStage.NOT_READY, NOW - 900, uncordoned_at=NOW - 400, message=(
            "node w1.lab is not Ready 300s after the uncordon: Ready=False (KubeletNotReady) "
            "(container runtime is down); still checking")))
    late = replace(late, node=NodeStatus(NOW - 2000, name="w1.lab", ready=True))
    found = note(late)
    assert found.text == ("node w1.lab is not Ready 300s after the uncordon: Ready=False "
                          "(KubeletNotReady) (container runtime is down); still checking "
                          "(uncordoned 6m40s ago)")
    assert found.remedy == ("check the kubelet on w1 (journalctl -u kubelet) and `kubectl "
                            "describe node w1.lab`; the machine leaves Upgrade once its node is "
                            "Ready")
    assert found.failing and found.actions == ()


def test_a_drained_node_steps_aside_for_the_items_notes() -> None:
    drained = upgrading(DrainStatus(DrainStage.DRAINED, NOW - 100, message="3 pods evicted"))
    spec = upgraded_cluster(SPEC)
    failing = replace(drained, progress=ItemProgress(
        "upgrade-worker-2.0.0", 2, "failed", "exit status 1", failing_since=NOW - 30,
        updated_at=NOW))
    assert note(failing, spec).text == "failing for 30s: exit status 1"
    assert note(drained) == Note()


def deploy_done(node: NodeStatus | None) -> Machine:
    m = finish_phase(SPEC, replace(machine("w3", state=MachineState.DEPLOY), state_since=NOW - 200))
    return replace(m, node=node, progress=ItemProgress("wdeploy-0", 1, "succeeded",
                                                       updated_at=NOW - 190))


def test_a_node_not_ready_in_deploy_names_its_condition_and_what_to_check() -> None:
    node = NodeStatus(NOW - 30, name="w3.lab", condition="False", reason="KubeletNotReady",
                      message="cni plugin not initialized")
    found = note(deploy_done(node))
    assert found.text == ("waiting for node w3.lab to become Ready: Ready=False (KubeletNotReady) "
                          "(cni plugin not initialized) (30s)")
    assert found.remedy.startswith("check the kubelet on w3 (journalctl -u kubelet) and `kubectl "
                                   "describe node w3.lab`")
    assert not found.failing
    late = note(deploy_done(replace(node, waiting_since=NOW - 90)))
    assert late.failing and late.text.startswith("failing for 30s: waiting for node w3.lab")


def test_a_node_that_never_registers_points_at_the_kubelets_mark_once_late() -> None:
    assert note(deploy_done(NodeStatus(NOW - 10))).remedy == ""  # early: nothing to do yet
    late = note(deploy_done(NodeStatus(NOW - 61)))
    assert late.failing and "kubelet --node-labels nodeagent.io/machine-id=id-w3" in late.remedy
    assert "--provider-id nodeagent://edge/id-w3" in late.remedy


def test_a_node_the_coordinator_cannot_look_at_says_how_to_let_it() -> None:
    unreachable = note(deploy_done(NodeStatus(NOW - 10, error=NO_KUBECONFIG)))
    assert unreachable.text.startswith("waiting for node w3 to register (cannot look: no kubeconfig")
    assert unreachable.remedy.startswith("set settings.kubernetes.kubeconfig")
    down = note(deploy_done(NodeStatus(NOW - 10, error="list nodes: connection refused")))
    assert down.remedy == "check that the coordinator reaches the cluster's API with its kubeconfig"


def test_the_other_notes_read_as_before() -> None:
    assert note(machine("p1", approved=False)).text == "waiting for approval"
    assert note(machine("p2", role=None)).text == "approved; waiting for a role"
    silent = replace(machine("p3", approved=False), responding=False, last_seen=NOW - 90)
    assert note(silent) == Note(
        "NOT RESPONDING for 1m30s; waiting for approval", "start the agent on p3 (systemctl "
        "status nodeagent; journalctl -u nodeagent); it goes on once the agent answers")
    assert note(machine("p4", hard_failure=True)).text.startswith("prechecks failed: ")
    waits = replace(machine("w5", state=MachineState.DEPLOY), state_since=NOW)
    assert note(waits, waits="waits for outputs.mint.token").text == "waits for outputs.mint.token"


def test_the_upgrade_plan_says_when_drains_are_skipped_or_will_block() -> None:
    """A cluster that gives no way to its API upgrades in place, which the plan says once; one
    whose kubeconfigFrom no manager has reported yet would block every drain."""
    old = cluster(manager=items("deploy", 1, "m"), worker=items("deploy", 1, "w"))
    new = old.model_copy(update={"release": "2.0.0", "machine_types": old.machine_types.model_copy(
        update={"worker": [*old.machine_types.worker, item("kubelet", "upgrade")]})})
    ready = [at_release(old, finish_phase(old, replace(machine(f"w{i}", state=MachineState.READY))))
             for i in range(6)]
    assert upgrade_plan(new, ready).warnings == [NO_ACCESS_DRAINS_SKIPPED]
    assert NO_ACCESS_DRAINS_SKIPPED.startswith("no Kubernetes access: drains skipped (")
    assert drain_warnings(new, ready, []) == []  # nothing to upgrade: nothing to say
    in_place = new.model_copy(update={"settings": new.settings.model_copy(update={
        "drain": new.settings.drain.model_copy(update={"enabled": False})})})
    assert upgrade_plan(in_place, ready).warnings == []
    assert upgrade_plan(replace_kubeconfig(new), ready).warnings == []
    reported = new.model_copy(update={"machine_types": new.machine_types.model_copy(update={
        "manager": [item("m", "deploy").model_copy(update={"kubeconfig_from": "/etc/k.conf"})]})})
    [warning] = drain_warnings(reported, ready, ready)
    assert warning.startswith("drains will block: no manager has reported the kubeconfig its "
                              "kubeconfigFrom item leaves yet, so the nodes of w0, w1, w2, w3 and "
                              "2 more cannot be cordoned and drained")
    assert "or set settings.drain.enabled: false" in warning


def replace_kubeconfig(spec: ClusterSpec) -> ClusterSpec:
    return spec.model_copy(update={"settings": spec.settings.model_copy(update={
        "kubernetes": spec.settings.kubernetes.model_copy(update={"kubeconfig": "/k"})})})


def test_the_cluster_ready_stage_fails_on_a_stuck_drain_as_on_a_failing_item() -> None:
    blocked = upgrading(DrainStatus(DrainStage.BLOCKED, NOW - 700, message="drain timed out: "
                                    "default/web-1 (budget default/web)", held=True))
    ready = next(s for s in stages(SPEC, 0.0, [blocked], History([]), NOW) if s.name == "ready")
    assert (ready.state, ready.since) == ("failing", NOW - 100)  # since its timeout ran out
    assert ready.message == ("0 of 1 Ready; Upgrade: w1; w1: drain Blocked (attempt 1, cordoned "
                             "for 11m40s): drain timed out: default/web-1 (budget default/web)")
    uncordoning = upgrading(DrainStatus(DrainStage.UNCORDONED, NOW - 700, uncordoned_at=NOW - 5,
                                        message="uncordoned; waiting for node w1 to report Ready"))
    calm = next(s for s in stages(SPEC, 0.0, [uncordoning], History([]), NOW) if s.name == "ready")
    assert calm.state == "in-progress"


# When a drain or the node step after it fails the status's stages as a failing item would
# (drain_failure), as a table: w1's drain, and since when it fails with the words shown
# (None: it does not fail, whatever its note says). The drain's timeout is 600 s, its
# nodeReadyTimeoutSeconds the default 300 s.
STARTED = NOW - 900
DRAIN_FAILURES = [
    pytest.param(None, None, id="no drain: nothing fails"),
    pytest.param(DrainStatus(DrainStage.DRAINING, NOW - 60), None,
                 id="a drain under way does not fail"),
    pytest.param(DrainStatus(DrainStage.DRAINING, NOW - 60, blocking_pods=("app/web-0",),
                             blocking_budgets=("app/web",)), None,
                 id="a drain waiting on a budget does not fail before its timeout"),
    pytest.param(DrainStatus(DrainStage.BLOCKED, STARTED, message="1 pod left"),
                 (STARTED + 600, "w1: drain Blocked (attempt 1"),
                 id="a Blocked drain fails since its timeout ran out"),
    pytest.param(DrainStatus(DrainStage.BLOCKED, STARTED, message=NO_KUBECONFIG),
                 (STARTED, "w1: drain Blocked (attempt 1"),
                 id="a drain with no way to the cluster fails since it began, not from now on"),
    pytest.param(DrainStatus(DrainStage.DRAINED, STARTED, step_error="connection refused",
                             step_error_since=NOW - 30),
                 (NOW - 30, "w1: uncordon failing for 30s, retrying: connection refused"),
                 id="a failing uncordon fails since its first error"),
    pytest.param(DrainStatus(DrainStage.NOT_READY, STARTED, message="node w1 not Ready",
                             uncordoned_at=NOW - 400),
                 (NOW - 100, "w1: node w1 not Ready (uncordoned 6m40s ago)"),
                 id="a node not Ready past its timeout fails since then"),
    pytest.param(DrainStatus(DrainStage.UNCORDONED, STARTED, message="waits for Ready",
                             uncordoned_at=NOW - 10), None,
                 id="an uncordoned node waiting for Ready does not fail"),
    pytest.param(DrainStatus(DrainStage.DRAINED, STARTED), None,
                 id="a drained node running its items does not fail"),
]


@pytest.mark.parametrize(("drain", "fails"), DRAIN_FAILURES)
def test_drain_failure_table(drain: DrainStatus | None, fails: tuple[float, str] | None) -> None:
    failed = drain_failure(SPEC, upgrading(drain) if drain else machine("w1"), NOW)  # type: ignore[arg-type]
    if fails is None:
        assert failed is None
    else:
        assert failed is not None and failed[0] == fails[0] and failed[1].startswith(fails[1]), \
            failed


def _released(spec: ClusterSpec, paused: bool = False) -> ClusterSpec:
    """spec at release 2.0.0 with an upgrade item for workers; paused: upgrades held."""
    return spec.model_copy(update={
        "release": "2.0.0",
        "machine_types": spec.machine_types.model_copy(
            update={"worker": [*spec.machine_types.worker, item("kubelet", "upgrade")]}),
        "settings": spec.settings.model_copy(update={
            "upgrade": spec.settings.upgrade.model_copy(update={"paused": paused})})})


READY_AT_1 = at_release(SPEC, replace(finish_phase(SPEC, machine("w1", state=MachineState.DEPLOY)),
                                      state=MachineState.READY))
PREPARED = replace(machine("w1", state=MachineState.PREPARE), state_since=NOW - 100)
MANAGER = machine("m1", "manager", state=MachineState.PREPARE)
DEPLOYED = replace(MANAGER, state=MachineState.READY)
LEAVING = replace(machine("w1", state=MachineState.DELETING), responding=False,
                  last_seen=NOW - 120)


@pytest.mark.parametrize("spec, waiting, managers, expected", [
    (_released(SPEC, paused=True), READY_AT_1, None, Note(
        "the upgrade from release 1.0.0 to 2.0.0 waits: upgrades are paused",
        "coordinator upgrade resume edge (coordinator upgrade plan edge shows what it runs)")),
    (_released(SPEC), READY_AT_1, None, Note(
        "the upgrade from release 1.0.0 to 2.0.0 waits for its turn: managers one at a time, "
        "then workers in batches")),
    (SPEC, READY_AT_1, None, Note()),
    (SPEC, PREPARED, [], Note(
        "prepared; waiting for the first manager to be Ready (1m40s): the cluster has no manager",
        "approve a machine as a manager: coordinator approve HOSTNAME --role manager")),
    (SPEC, PREPARED, [MANAGER], Note(
        "prepared; waiting for the first manager to be Ready (1m40s): m1 is in Prepare",
        "nothing while m1 gets there; if it is stuck, its note says why: coordinator machines "
        "get m1")),
    (SPEC, PREPARED, [DEPLOYED], Note("prepared; waiting for a deploy slot")),
    (SPEC, PREPARED, None, Note("prepared; waiting for a deploy slot")),  # managers not read
    (SPEC, LEAVING, None, Note(
        "NOT RESPONDING for 2m00s: its reset items wait for its agent",
        "start the agent on w1 (systemctl status nodeagent; journalctl -u nodeagent); or, if w1 "
        "is gone, remove it without its reset items: coordinator delete w1 --skip-reset (and "
        "reset w1 yourself)")),
])
def test_a_waiting_machine_names_what_it_waits_for_table(
        spec: ClusterSpec, waiting: Machine, managers: list[Machine] | None,
        expected: Note) -> None:
    assert decided(spec, waiting, machine_step(spec, waiting, NOW), NOW,
                   managers=managers) == expected


@pytest.mark.parametrize(("revoked", "text", "remedy"), [
    (replace(machine("w1", state=MachineState.READY), credential_hash=""),
     "credential revoked: its agent is refused until it rejoins as this machine",
     "coordinator machines reissue w1, then on w1, set join: in the agent's config to the string "
     "it printed, remove identity.json from the agent's state dir and restart the agent; or take "
     "the machine out: coordinator delete w1"),
    (replace(machine("w1", state=MachineState.READY), credential_hash="", reissue_hash="h",
             reissue_expires_at=NOW + 600),
     "credential revoked; the join string `coordinator machines reissue w1` printed waits to be "
     "used (expires in 10m00s)",
     "on w1, set join: in the agent's config to the string it printed, remove identity.json from "
     "the agent's state dir and restart the agent; or take the machine out: coordinator delete w1"),
    (replace(machine("w1", state=MachineState.DELETING), credential_hash="", reissue_hash="h",
             reissue_expires_at=NOW - 1),  # expired: a new one is needed
     "credential revoked: its agent is refused until it rejoins as this machine",
     "coordinator machines reissue w1, then on w1, set join: in the agent's config to the string "
     "it printed, remove identity.json from the agent's state dir and restart the agent; or take "
     "the machine out: coordinator delete w1 --skip-reset (and reset w1 yourself)"),
])
def test_a_revoked_machine_says_its_agent_is_refused_and_how_it_rejoins(
        revoked: Machine, text: str, remedy: str) -> None:
    assert note(revoked) == Note(text, remedy, True)
