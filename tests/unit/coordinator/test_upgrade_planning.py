"""Upgrade, Reconfigure and the post-deploy step in the planner, one scenario each."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.model import (
    DrainStage,
    KubernetesSettings,
    Machine,
    MachineState,
    phase_items,
)
from coordinator.domain.nodes.kubeaccess import KubeAccess, kube_access
from coordinator.domain.rollout.planner import (
    Decision,
    assignment_notices,
    enact,
    node_action,
    plan,
    plan_to_fixpoint,
    post_deploy_host,
    upgrade_plan,
)
from nodeagent.wire.protocol import StateItem, VersionAction
from tests.support.builders import (
    KUBE_ACCESS,
    at_release,
    cluster,
    drained,
    finish_phase,
    item,
    items,
    machine,
    moves,
    node_down,
    upgraded_cluster,
)

READY, UPGRADE, RECONF = MachineState.READY, MachineState.UPGRADE, MachineState.RECONFIGURE


def ready(hostname: str, role: str = "worker", release: str = "1.0.0", created_at: float = 0,
          managers: tuple[str, ...] = ("m1",)) -> Machine:
    m = machine(hostname, role, state=READY, release=release, created_at=created_at)  # type: ignore[arg-type]
    return replace(m, managers=managers)


def fleet(managers: int = 2, workers: int = 5) -> list[Machine]:
    return ([ready(f"m{i}", "manager", created_at=i) for i in range(1, managers + 1)]
            + [ready(f"w{i}", created_at=10 + i) for i in range(1, workers + 1)])


def test_a_new_release_upgrades_managers_one_at_a_time_first() -> None:
    spec = upgraded_cluster(cluster(batch=2))
    machines = fleet()
    decisions = plan(spec, machines)
    assert moves(decisions) == [("m1", UPGRADE)]
    assert decisions[0].reason == "manager upgrades (one at a time): runs upgrade/upgrade-manager-2.0.0"
    machines = enact(machines, decisions, now=1.0)
    assert plan(spec, machines) == [], "a second manager or a worker joined a manager's upgrade"


def test_the_manager_that_deployed_first_upgrades_first_whatever_registered_first() -> None:
    """Its control plane goes first (kubeadm upgrade apply): m2 registered earlier but m1 was
    admitted into Deploy first, so m1 upgrades, then m2."""
    machines = [replace(m, deploy_order=2 if m.hostname == "m2" else 1) if m.role == "manager"
                else m for m in fleet()]
    machines = [replace(m, created_at=5) if m.hostname == "m1" else m for m in machines]
    spec = upgraded_cluster(cluster(batch=2))
    assert moves(plan(spec, machines)) == [("m1", UPGRADE)]


def test_a_machine_at_the_release_never_upgrades_to_it() -> None:
    spec = upgraded_cluster(cluster())
    assert plan(spec, [at_release(spec, ready("m1", "manager"))]) == []
    assert plan(cluster(), fleet()) == [], "nothing changed, no upgrade"


def test_the_upgrade_items_wait_for_the_drain_and_ready_waits_for_the_uncordon() -> None:
    spec = upgraded_cluster(cluster(**KUBE_ACCESS))
    m1 = enact([ready("m1", "manager")], plan(spec, [ready("m1", "manager")]), now=1.0)[0]
    assert m1.state is UPGRADE and m1.drain is None
    items_done = finish_phase(spec, m1)
    assert plan(spec, [items_done]) == [], "Ready before the node was drained and uncordoned"
    assert plan(spec, [drained(items_done)]) == [], "Ready while the node is still cordoned"
    for waiting in (DrainStage.UNCORDONED, DrainStage.NOT_READY):
        assert plan(spec, [drained(items_done, waiting)]) == [], "Ready before the node was"
        assert node_action(spec, drained(items_done, waiting)) == "await-ready"
    decisions = plan(spec, [drained(items_done, DrainStage.NODE_READY)])
    assert moves(decisions) == [("m1", READY)]
    assert decisions[0].reason == "upgrade items applied; node uncordoned and Ready"
    assert node_action(spec, drained(items_done, DrainStage.NODE_READY)) is None
    assert enact([drained(items_done, DrainStage.NODE_READY)], decisions, 2.0)[0].release == "2.0.0"


def test_without_drain_managers_a_manager_upgrades_in_place() -> None:
    spec = upgraded_cluster(cluster(), drain_managers=False)
    m1 = enact([ready("m1", "manager")], plan(spec, [ready("m1", "manager")]), now=1.0)[0]
    assert moves(plan(spec, [finish_phase(spec, m1)])) == [("m1", READY)]


def test_workers_upgrade_in_batches_after_every_manager() -> None:
    spec = upgraded_cluster(cluster(batch=50), worker_batch_size=2)
    machines = [at_release(spec, ready("m1", "manager")), *fleet(managers=0)]
    decisions = plan(spec, machines)
    assert moves(decisions) == [("w1", UPGRADE), ("w2", UPGRADE)]
    assert decisions[-1].reason == "worker upgrades (2 of 2 worker slots): runs upgrade/upgrade-worker-2.0.0"
    behind = [ready("m1", "manager"), *fleet(managers=0)]
    in_upgrade = enact(behind, [Decision("id-m1", "m1", READY, UPGRADE, "test")], 1.0)
    assert plan(spec, in_upgrade) == [], "workers upgraded while a manager was"


def test_max_unavailable_counts_workers_that_stopped_responding() -> None:
    spec = upgraded_cluster(cluster(batch=3), max_unavailable_workers=2)
    machines = [at_release(spec, ready("m1", "manager")), *fleet(managers=0)]
    machines[1] = replace(machines[1], responding=False)
    assert moves(plan(spec, machines)) == [("w2", UPGRADE)]


def test_a_paused_upgrade_admits_nobody_and_the_running_one_finishes() -> None:
    spec = upgraded_cluster(cluster(), paused=True)
    upgrading = drained(finish_phase(spec, replace(ready("m1", "manager"), state=UPGRADE)),
                        DrainStage.NODE_READY)
    assert moves(plan(spec, [upgrading, ready("m2", "manager", created_at=2)])) == [("m1", READY)]


def test_a_new_manager_waits_for_a_manager_upgrade() -> None:
    spec = upgraded_cluster(cluster(manager=items("deploy", 1)))
    upgrading = replace(ready("m1", "manager"), state=UPGRADE)
    prepared = machine("m2", "manager", state=MachineState.PREPARE)
    assert plan(spec, [upgrading, prepared]) == []


def test_a_changed_manager_set_reconfigures_every_machine_the_new_manager_included() -> None:
    spec = cluster(manager=items("reconfigure", 1), worker=items("reconfigure", 1))
    m2 = machine("m2", "manager", state=MachineState.PREPARE, created_at=1)
    machines = [ready("m1", "manager"), m2, ready("w1", created_at=5)]
    machines = enact(machines, plan(spec, machines), now=1.0)  # m2 deploys, seeing m1
    machines = [finish_phase(spec, m) for m in machines]
    decisions = plan(spec, machines)
    assert moves(decisions) == [("m2", READY)], "reconfigured before the list changed"
    machines = enact(machines, decisions, now=2.0)
    assert [m.managers for m in machines] == [("m1",)] * 3
    decisions = plan(spec, machines)
    assert moves(decisions) == [("m1", RECONF), ("w1", RECONF)]
    assert decisions[0].reason == "the manager set changed: reconfigure (managers one at a time)"
    for now in (3.0, 4.0):
        machines = [finish_phase(spec, m, ("m1", "m2")) for m in machines]
        machines = enact(machines, plan(spec, machines), now=now)
    assert [(m.hostname, m.state) for m in machines] == [
        ("m1", READY), ("m2", RECONF), ("w1", READY)], "the new manager was left out"
    machines, _ = plan_to_fixpoint(spec, [finish_phase(spec, m, ("m1", "m2")) for m in machines],
                                   now=5.0)
    assert all(m.state is READY and m.managers == ("m1", "m2") for m in machines)


def test_reconfigure_takes_managers_one_at_a_time_and_workers_in_batches() -> None:
    spec = cluster(manager=items("reconfigure", 1), worker=items("reconfigure", 1), batch=2)
    machines = [replace(m, managers=("m1", "m2")) for m in fleet(managers=3, workers=5)]
    decisions = plan(spec, machines)
    assert moves(decisions) == [("m1", RECONF), ("w1", RECONF), ("w2", RECONF)]
    assert decisions[-1].reason == "the manager set changed: reconfigure (2 of 2 worker slots)"
    machines = enact(machines, decisions, now=1.0)
    assert plan(spec, machines) == []
    managers = ("m1", "m2", "m3")
    machines = [finish_phase(spec, m, managers) if m.hostname in ("m1", "w1") else m
                for m in machines]
    assert moves(plan(spec, machines)) == [("m1", READY), ("w1", READY), ("m2", RECONF),
                                           ("w3", RECONF)]


def test_a_manager_reconfigures_only_while_no_manager_deploys_or_upgrades() -> None:
    spec = upgraded_cluster(cluster(manager=[*items("reconfigure", 1), *items("deploy", 1)],
                                    worker=items("reconfigure", 1)))
    stale = [at_release(spec, ready("m1", "manager", release="2.0.0", managers=())),
             at_release(spec, ready("w1", release="2.0.0", managers=()))]
    for busy in (MachineState.DEPLOY, UPGRADE):
        m2 = replace(ready("m2", "manager", created_at=1), state=busy)
        assert moves(plan(spec, [*stale, m2])) == [("w1", RECONF)]
    reconfiguring = [replace(stale[0], state=RECONF), stale[1]]
    upgradable = ready("m2", "manager", created_at=1, managers=("m1",))
    prepared = machine("m3", "manager", state=MachineState.PREPARE, created_at=2)
    assert moves(plan(spec, [*reconfiguring, upgradable, prepared])) == [("w1", RECONF)], \
        "a manager deployed or upgraded beside a reconfiguring one"


def test_a_machine_reconfiguring_when_the_list_changes_is_given_the_items_for_the_new_one() -> None:
    spec = cluster(worker=items("reconfigure", 1))
    w1 = replace(ready("w1", created_at=5), state=RECONF)  # sent the items for ("m1",)
    managers = [ready(m, "manager", created_at=n, managers=("m1", "m2"))
                for n, m in enumerate(("m1", "m2"))]  # m2 joined meanwhile
    (noticed,) = assignment_notices(spec, [*managers, w1])
    assert (noticed.hostname, noticed.managers) == ("w1", ("m1", "m2"))
    assert noticed.generation == w1.generation + 1, "its agent would keep the old items"
    assert plan(spec, [*managers, finish_phase(spec, w1, ("m1",))]) == []
    assert moves(plan(spec, [*managers, finish_phase(spec, noticed, ("m1", "m2"))])) == [
        ("w1", READY)]


def test_a_removed_manager_reconfigures_the_rest() -> None:
    spec = cluster(worker=items("reconfigure", 1))
    machines = [ready("m1", "manager", managers=("m1", "m2")),
                replace(ready("m2", "manager", created_at=1), state=MachineState.DELETING),
                ready("w1", created_at=2, managers=("m1", "m2"))]
    assert moves(plan(spec, machines)) == [("m2", None), ("w1", RECONF)]


def test_the_post_deploy_step_runs_on_a_manager_once_a_manager_and_a_worker_are_ready() -> None:
    spec = cluster(manager=[item("helm-controller", "postdeploy")])
    assert post_deploy_host(spec, [ready("m1", "manager")]) is None
    host = post_deploy_host(spec, [ready("m1", "manager"), ready("m2", "manager"), ready("w1")])
    assert host is not None and host.hostname == "m1"
    done = replace(ready("m2", "manager"), applied=frozenset(
        {spec.items("manager", "postdeploy")[0].fingerprint()}))
    assert post_deploy_host(spec, [ready("m1", "manager"), done, ready("w1")]) is None


def test_the_post_deploy_step_runs_again_after_an_upgrade_changed_its_version() -> None:
    old = cluster(manager=[item("helm-controller", "postdeploy")])
    applied = frozenset({old.items("manager", "postdeploy")[0].fingerprint()})
    spec = upgraded_cluster(cluster(manager=[item("helm-controller-v2", "postdeploy")]))
    m1 = replace(ready("m1", "manager"), applied=applied)
    assert post_deploy_host(spec, [m1, ready("w1")]) is None, "ran before the upgrade finished"
    upgraded = [replace(m1, release="2.0.0"), ready("w1", release="2.0.0")]
    host = post_deploy_host(spec, upgraded)
    assert host is not None and host.hostname == "m1"


def admitted(hostname: str, order: int, state: MachineState = READY, **changes: object) -> Machine:
    """A manager the planner admitted into Deploy order-th, registered in hostname order."""
    return replace(ready(hostname, "manager", created_at=int(hostname[1:])), state=state,
                   deploy_order=order, **changes)


def test_the_post_deploy_step_runs_on_the_manager_deployed_first() -> None:
    spec = cluster(manager=[item("helm-controller", "postdeploy")])
    host = post_deploy_host(spec, [admitted("m1", 2), admitted("m2", 1), ready("w3")])
    assert host is not None and host.hostname == "m2"


def test_the_post_deploy_step_waits_for_its_host_rather_than_move() -> None:
    spec = cluster(manager=[item("helm-controller", "postdeploy")])
    m2, w3 = admitted("m2", 2), ready("w3")
    for away in (admitted("m1", 1, RECONF), admitted("m1", 1, UPGRADE),
                 admitted("m1", 1, responding=False), admitted("m1", 1, MachineState.DELETING)):
        assert post_deploy_host(spec, [away, m2, w3]) is None, f"moved off m1 ({away.state})"
    host = post_deploy_host(spec, [m2, w3])  # m1's record is gone: its agent left the step
    assert host is not None and host.hostname == "m2"


def test_a_worker_reconfiguring_or_silent_leaves_the_step_running() -> None:
    spec = cluster(manager=[item("helm-controller", "postdeploy")])
    for worker in (replace(ready("w3"), state=RECONF), replace(ready("w3"), responding=False)):
        host = post_deploy_host(spec, [admitted("m1", 1), worker])
        assert host is not None and host.hostname == "m1"


def test_a_manager_whose_assignment_gains_or_loses_the_step_gets_a_new_generation() -> None:
    spec = cluster(manager=[item("helm-controller", "postdeploy")])
    m1, m2, w3 = admitted("m1", 1), admitted("m2", 2), ready("w3")
    (told,) = assignment_notices(spec, [m1, m2, w3])
    assert (told.hostname, told.post_deploy, told.generation) == ("m1", True, m1.generation + 1)
    assert assignment_notices(spec, [told, m2, w3]) == [], "told twice"
    (silent,) = assignment_notices(spec, [replace(told, responding=False), m2, w3])
    assert not silent.post_deploy and silent.generation == told.generation + 1
    # Its heartbeats came back between passes: the pass that finds it answering tells it.
    (back,) = assignment_notices(spec, [replace(silent, responding=True), m2, w3])
    assert back.post_deploy and back.generation == silent.generation + 1
    (moved,) = assignment_notices(spec, [m2, w3])  # m1's record is gone
    assert moved.hostname == "m2" and moved.post_deploy


def test_upgrade_plan_lists_the_exact_steps_the_rollout_takes() -> None:
    spec = upgraded_cluster(cluster(batch=2))
    machines = fleet(managers=3, workers=5)
    machines[-1] = replace(machines[-1], responding=False)
    result = upgrade_plan(spec, machines)
    assert [[u.machine.hostname for u in step] for step in result.steps] == [
        ["m1"], ["m2"], ["m3"], ["w1", "w2"], ["w3", "w4"]]
    assert [(u.machine.hostname, u.waiting) for u in result.waiting] == [("w5", "not responding")]
    paused = upgraded_cluster(cluster(batch=2), paused=True)
    assert upgrade_plan(paused, machines).steps == result.steps
    assert plan(paused, machines) == []


def checked(version: str) -> StateItem:
    """The helm-controller post-deploy item at version, with a command saying what is installed."""
    return StateItem.model_validate({
        "name": "helm-controller", "phase": "postdeploy", "version": version,
        "versionCommand": ["helm-controller", "--version"],
        "action": {"type": "exec", "argv": ["helm", "upgrade", "--install", version]}})


def test_a_version_command_adds_a_check_of_the_declared_version_per_release() -> None:
    spec = cluster(manager=[checked("0.15.0")])
    item, check = phase_items(spec, "manager", "postdeploy")
    assert item == checked("0.15.0")
    assert (check.name, check.version) == ("helm-controller.version", "0.15.0+release.1.0.0")
    assert check.action == VersionAction(type="version", argv=["helm-controller", "--version"],
                                         expect="0.15.0")
    later = upgraded_cluster(spec)
    assert phase_items(later, "manager", "postdeploy")[0] == item, "the install runs again"
    assert phase_items(later, "manager", "postdeploy")[1].fingerprint() != check.fingerprint()


def test_the_post_deploy_step_is_checked_again_after_every_upgrade() -> None:
    spec = cluster(manager=[checked("0.15.0")])
    done = frozenset(i.fingerprint() for i in phase_items(spec, "manager", "postdeploy"))
    m1 = replace(ready("m1", "manager"), applied=done)
    assert post_deploy_host(spec, [m1, ready("w1")]) is None
    later = upgraded_cluster(spec)  # new release, the same post-deploy item
    upgraded = [replace(m1, release="2.0.0"), ready("w1", release="2.0.0")]
    host = post_deploy_host(later, upgraded)
    assert host is not None and host.hostname == "m1"
    assert post_deploy_host(later, [replace(upgraded[0], applied=done | {
        phase_items(later, "manager", "postdeploy")[1].fingerprint()}), upgraded[1]]) is None


def test_drains_use_the_setting_else_the_first_managers_reported_kubeconfig() -> None:
    spec = cluster()
    m1, m2 = ready("m1", "manager", created_at=1), ready("m2", "manager", created_at=2)
    w1 = replace(ready("w1"), kubeconfig="from a worker: never")
    assert kube_access(spec, [m1, m2, w1]) is None
    m2 = replace(m2, kubeconfig="m2's")
    assert kube_access(spec, [m1, m2, w1]) == KubeAccess(text="m2's")
    m1 = replace(m1, kubeconfig="m1's")
    assert kube_access(spec, [m2, w1, m1]) == KubeAccess(text="m1's")
    assert kube_access(spec, [replace(m1, state=MachineState.DELETING), m2]) == KubeAccess(text="m2's")
    configured = spec.model_copy(update={"settings": spec.settings.model_copy(update={
        "kubernetes": KubernetesSettings(kubeconfig="/etc/coordinator/kubeconfig")})})
    assert kube_access(configured, [m1]) == KubeAccess(path="/etc/coordinator/kubeconfig")
    assert "m1's" not in repr(m1), "a machine's repr shows its kubeconfig"


def test_no_manager_upgrades_while_a_managers_node_is_down() -> None:
    """Restarting another control plane while one manager's Node is down risks the etcd
    quorum: the upgrade waits, and its plan says for which Node."""
    spec = upgraded_cluster(cluster(kubernetes={"kubeconfig": "/etc/kubeconfig"}))
    machines = fleet(managers=3, workers=0)
    assert moves(plan(spec, machines)) == [("m1", UPGRADE)]
    machines[2] = node_down(spec, machines[2])
    assert plan(spec, machines) == []
    waiting = upgrade_plan(spec, machines).waiting
    assert {u.waiting for u in waiting} == {"the Node of manager m3 is down"}
    assert plan(cluster(), machines) == [], "without Kubernetes access no Node is looked at"


def test_max_unavailable_counts_workers_whose_node_is_down() -> None:
    spec = upgraded_cluster(cluster(batch=3, kubernetes={"kubeconfig": "/etc/kubeconfig"}),
                            max_unavailable_workers=2)
    machines = [at_release(spec, ready("m1", "manager")), *fleet(managers=0)]
    machines[1] = node_down(spec, machines[1])
    # w1 (down) and one more: two unavailable at most, w1 counted once.
    assert moves(plan(spec, machines)) == [("w1", UPGRADE), ("w2", UPGRADE)]
    machines[1] = at_release(spec, machines[1])
    assert moves(plan(spec, machines)) == [("w2", UPGRADE)]
