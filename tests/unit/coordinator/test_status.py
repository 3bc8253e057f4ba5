"""Stage conditions, machine steps and rollout progress, on rollouts the real planner drives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.model import ItemProgress, Machine, MachineState, NodeStatus, phase_items
from coordinator.domain.records import Event
from coordinator.domain.rollout.planner import plan_to_fixpoint
from coordinator.domain.views.status import (
    History,
    Progress,
    Stage,
    held_by,
    machine_step,
    rollout,
    stages,
)
from tests.support.builders import cluster, finish_phase, items, machine

SPEC = cluster(manager=items("prepare", 1, "m") + items("deploy", 2, "m"),
               worker=items("prepare", 2, "w") + items("deploy", 1, "w"))


class SimulatedRollout:
    """Machines moved by the planner, with the state events the reconciler would record."""

    def __init__(self, *machines: Machine) -> None:
        self.now = 100.0
        self.machines = {m.hostname: replace(m, created_at=self.now, state_since=self.now)
                         for m in machines}
        self.events: list[Event] = []

    def tick(self, seconds: float = 10.0) -> None:
        self.now += seconds
        after, decisions = plan_to_fixpoint(SPEC, list(self.machines.values()), self.now)
        for d in decisions:
            self.events.append(Event(time=self.now, cluster="edge", kind="state", message="",
                                     machine=d.machine_id, hostname=d.hostname,
                                     data={"from": d.from_state.value, "to": d.to_state.value
                                           if d.to_state else None}))
        self.machines = {m.hostname: m for m in after}

    def finish(self, *hostnames: str) -> None:
        """Every item of the phase applied, the last success reported now."""
        for h in hostnames:
            m = finish_phase(SPEC, self.machines[h])
            self.machines[h] = replace(m, progress=ItemProgress(
                item="last", attempt=1, status="succeeded", updated_at=self.now))

    def fail(self, hostname: str, item: str, attempt: int, since: float) -> None:
        self.machines[hostname] = replace(self.machines[hostname], progress=ItemProgress(
            item=item, attempt=attempt, status="failed", error="exit status 1",
            next_retry_at=self.now + 4, updated_at=self.now, failing_since=since))

    def stages(self) -> dict[str, tuple[str, float | None, str]]:
        found = stages(SPEC, 50.0, list(self.machines.values()), History(self.events), self.now)
        return {s.name: (s.state, s.since, s.message) for s in found}


def states(r: SimulatedRollout) -> dict[str, str]:
    return {name: value[0] for name, value in r.stages().items()}


def test_an_empty_cluster_waits_since_it_was_created_and_says_what_to_do() -> None:
    r = SimulatedRollout()
    assert list(r.stages()) == ["registered", "approved", "prepared", "first-manager", "managers",
                                "workers", "ready"]  # no Kubernetes access: no nodes stage
    assert set(states(r).values()) == {"waiting"}
    assert r.stages()["registered"] == (
        "waiting", 50.0, "no machine has registered: create a join token and start agents")


def test_approval_waits_on_the_admin_and_fails_on_hard_prechecks() -> None:
    r = SimulatedRollout(machine("m1", "manager", approved=False), machine("w1", approved=False))
    assert r.stages()["approved"] == ("waiting", 100.0,
                                      "0 of 2 approved; waiting for approval: m1, w1")
    r.machines["w2"] = replace(machine("w2", approved=False, hard_failure=True), created_at=105.0)
    state, since, message = r.stages()["approved"]
    assert (state, since) == ("failing", 105.0)
    assert message.endswith("w2 fails hard prechecks: kernel: kernel too old")


def test_the_first_manager_deploying_alone_shows_in_each_stage() -> None:
    r = SimulatedRollout(machine("m1", "manager"), machine("w1"), machine("w2"))
    r.tick()  # 110: all approved machines start Prepare
    r.now += 5
    r.finish("m1", "w1", "w2")  # prepared at 115
    r.tick(5)  # 120: m1 deploys alone; the workers wait, prepared
    found = r.stages()
    assert found["registered"][:2] == ("done", 100.0)
    assert found["approved"][:2] == ("done", 110.0)
    assert found["prepared"][0] == "done"
    assert found["first-manager"] == ("in-progress", 120.0, "m1 deploying")
    assert found["workers"] == ("waiting", 115.0, "0 of 2 workers deployed; waiting for the "
                                "first manager to be Ready: w1, w2")
    assert found["ready"][:2] == ("in-progress", 110.0)


def test_a_failing_item_turns_its_stage_failing_since_its_first_failure() -> None:
    r = SimulatedRollout(machine("m1", "manager"), machine("w1"))
    r.tick()
    r.finish("m1", "w1")
    r.tick()  # 120: m1 in Deploy
    r.tick(30)
    r.fail("m1", "mdeploy-1", attempt=4, since=125.0)
    found = r.stages()
    assert found["first-manager"] == (
        "failing", 125.0, "m1: mdeploy-1 failing (attempt 4): exit status 1")
    assert found["ready"][0] == "failing"
    assert found["prepared"][0] == "done"  # the failure belongs to the deploy stages only


def test_a_finished_rollout_is_done_everywhere_with_the_times_each_stage_finished() -> None:
    r = SimulatedRollout(machine("m1", "manager"), machine("m2", "manager"), machine("w1"))
    r.tick()  # 110 prepare
    r.finish("m1", "m2", "w1")
    r.tick()  # 120 m1 deploy
    r.finish("m1")
    r.tick()  # 130 m1 ready; m2 and w1 deploy
    r.finish("m2", "w1")
    r.tick()  # 140 all ready
    found = r.stages()
    assert set(states(r).values()) == {"done"}
    assert found["first-manager"] == ("done", 130.0, "m1 runs the control plane")
    assert found["managers"][:2] == ("done", 140.0)
    assert found["ready"] == ("done", 140.0, "3 of 3 Ready")


def test_a_late_worker_reopens_approval_and_workers_but_not_managers() -> None:
    r = SimulatedRollout(machine("m1", "manager"), machine("w1"))
    for _ in range(3):
        r.tick()
        r.finish("m1", "w1")
    r.tick()
    assert set(states(r).values()) == {"done"}
    r.machines["w9"] = replace(machine("w9", approved=False), created_at=r.now)
    assert states(r)["approved"] == "waiting" and states(r)["ready"] == "done"
    r.machines["w9"] = replace(r.machines["w9"], approved=True)
    r.tick()
    found = states(r)
    assert found["managers"] == "done" and found["first-manager"] == "done"
    assert found["workers"] == "waiting" and found["ready"] == "in-progress"


def test_machine_step_says_item_n_of_m_attempt_and_elapsed() -> None:
    m = replace(machine("w1", state=MachineState.PREPARE), state_since=100.0,
                progress=ItemProgress(item="wprepare-1", attempt=1, status="running", updated_at=110))
    m = replace(m, applied=frozenset({items("prepare", 2, "w")[0].fingerprint()}))
    step = machine_step(SPEC, m, now=115.0)
    assert (step.phase, step.index, step.total, step.done) == ("prepare", 2, 2, 1)
    assert (step.item, step.status, step.attempt) == ("wprepare-1", "running", 1)
    assert (step.item_elapsed, step.state_elapsed) == (5.0, 15.0)
    assert step.failing_for is None and step.next_retry_in is None


def test_machine_step_of_a_failed_item_counts_down_to_its_retry() -> None:
    m = replace(machine("w1", state=MachineState.PREPARE), progress=ItemProgress(
        item="wprepare-0", attempt=3, status="failed", error="boom", next_retry_at=130.0,
        updated_at=120.0, failing_since=101.0))
    step = machine_step(SPEC, m, now=125.0)
    assert (step.index, step.status, step.attempt, step.error) == (1, "failed", 3, "boom")
    assert (step.next_retry_in, step.failing_for, step.item_elapsed) == (5.0, 24.0, None)


def test_machine_step_names_the_next_item_and_ignores_stale_progress() -> None:
    stale = ItemProgress(item="mdeploy-0", attempt=1, status="succeeded", updated_at=1.0)
    m = replace(machine("w1", state=MachineState.PREPARE), progress=stale)
    assert (machine_step(SPEC, m, 5.0).status, machine_step(SPEC, m, 5.0).item) == (
        "waiting", "wprepare-0")
    ready = replace(m, state=MachineState.READY)
    assert machine_step(SPEC, ready, 5.0).status is None
    done = finish_phase(SPEC, m)
    assert (machine_step(SPEC, done, 5.0).status, machine_step(SPEC, done, 5.0).index) == ("done", 0)


def test_machine_step_counts_the_reconfigure_items_of_the_list_it_reconfigures_for() -> None:
    spec = cluster(worker=items("reconfigure", 2, "w"))
    m = replace(machine("w1", state=MachineState.RECONFIGURE), managers=("10.0.0.1", "10.0.0.2"))
    versioned = phase_items(spec, "worker", "reconfigure", m.managers)
    half = replace(m, applied=frozenset({versioned[0].fingerprint()}))
    step = machine_step(spec, half, 5.0)
    assert (step.total, step.done, step.item) == (2, 1, "wreconfigure-1")
    done = finish_phase(spec, m, m.managers)
    assert (machine_step(spec, done, 5.0).status, machine_step(spec, done, 5.0).done) == ("done", 2)


def test_rollout_eta_follows_the_pace_so_far_and_ignores_long_finished_machines() -> None:
    r = SimulatedRollout(machine("m1", "manager"), machine("w1"))
    r.tick()  # 110: both start prepare; 6 items in this run
    assert rollout(SPEC, list(r.machines.values()), History(r.events), r.now).eta_seconds is None
    r.finish("m1", "w1")  # 3 of 6 items done
    r.now += 30  # at 140, 30 s after the start
    progress = rollout(SPEC, list(r.machines.values()), History(r.events), r.now)
    assert (progress.done, progress.total, progress.started_at) == (3, 6, 110.0)
    assert progress.eta_seconds == 30.0
    for _ in range(3):
        r.tick()
        r.finish("m1", "w1")
    r.tick()
    finished = rollout(SPEC, list(r.machines.values()), History(r.events), r.now)
    assert (finished.done, finished.total, finished.eta_seconds) == (6, 6, 0.0)
    r.machines["w2"] = machine("w2")
    r.tick()  # only w2's run counts now
    late = rollout(SPEC, list(r.machines.values()), History(r.events), r.now)
    assert (late.done, late.total, late.machines) == (0, 3, 1)


# -- a machine waiting for its Node ----------------------------------------------------------------

KUBE_SPEC = SPEC.model_copy(update={"settings": SPEC.settings.model_copy(update={
    "kubernetes": SPEC.settings.kubernetes.model_copy(update={
        "kubeconfig": "/etc/coordinator/kubeconfig", "node_ready_timeout_seconds": 60.0})})})


def deployed_items(node: NodeStatus | None) -> Machine:
    """w3 in Deploy since 100 with its deploy items applied, its last report at 110."""
    m = finish_phase(KUBE_SPEC, replace(machine("w3", state=MachineState.DEPLOY), state_since=100.0))
    return replace(m, node=node, progress=ItemProgress(item="wdeploy-0", attempt=1,
                                                       status="succeeded", updated_at=110.0))


def node_stage(m: Machine, now: float) -> tuple[str, float | None, str]:
    found = {s.name: s for s in stages(KUBE_SPEC, 50.0, [m], History([]), now)}
    assert list(found)[-2:] == ["nodes", "ready"]
    return found["nodes"].state, found["nodes"].since, found["nodes"].message


def test_a_machine_whose_node_has_not_registered_waits_for_it_and_says_so() -> None:
    step = machine_step(KUBE_SPEC, deployed_items(NodeStatus(waiting_since=112.0)), now=142.0)
    assert (step.phase, step.status, step.item) == ("deploy", "waiting", None)
    assert (step.node, step.node_waiting) == ("waiting for node w3 to register", 30.0)
    assert node_stage(deployed_items(NodeStatus(waiting_since=112.0)), 142.0) == (
        "in-progress", 112.0, "0 of 1 nodes Ready; w3: waiting for node w3 to register (30s)")


def test_before_the_first_look_the_wait_counts_from_the_last_report() -> None:
    assert machine_step(KUBE_SPEC, deployed_items(None), now=130.0).node_waiting == 20.0


def test_a_look_that_failed_says_why() -> None:
    node = NodeStatus(112.0, error="list nodes: the API server does not answer")
    assert machine_step(KUBE_SPEC, deployed_items(node), now=142.0).node == (
        "waiting for node w3 to register (cannot look: list nodes: the API server does not answer)")


def test_a_registered_node_not_ready_names_its_condition() -> None:
    node = NodeStatus(112.0, name="w3.lab", condition="False", reason="KubeletNotReady",
                      message="container runtime network not ready", registered_at=115.0)
    step = machine_step(KUBE_SPEC, deployed_items(node), now=150.0)
    assert step.node == ("waiting for node w3.lab to become Ready: Ready=False (KubeletNotReady) "
                         "(container runtime network not ready)")
    assert step.status == "waiting" and step.failing_for is None


def test_past_the_timeout_the_wait_shows_failing_and_still_waiting() -> None:
    node = NodeStatus(112.0, name="w3.lab", condition="False", reason="KubeletNotReady")
    step = machine_step(KUBE_SPEC, deployed_items(node), now=182.0)
    assert (step.status, step.failing_for) == ("failed", 10.0)
    assert step.error == ("waiting for node w3.lab to become Ready: Ready=False (KubeletNotReady) "
                          "(70s); still waiting")
    state, since, message = node_stage(deployed_items(node), 182.0)
    assert (state, since) == ("failing", 172.0)
    assert message == ("0 of 1 nodes Ready; w3: waiting for node w3.lab to become Ready: "
                       "Ready=False (KubeletNotReady) (70s; still waiting)")


def test_without_kubernetes_access_a_machine_with_its_deploy_items_done_waits_for_nothing() -> None:
    m = finish_phase(SPEC, replace(machine("w3", state=MachineState.DEPLOY), state_since=100.0))
    step = machine_step(SPEC, m, now=500.0)
    assert (step.status, step.node, step.failing_for) == ("done", "", None)


@pytest.mark.parametrize(("states", "paused", "held"), [
    ({"managers": "in-progress", "ready": "in-progress"}, False, None),
    ({"managers": "done", "ready": "done"}, False, None),
    ({"first": "failing", "workers": "waiting", "ready": "failing"}, False,
     "stalled: First is failing (its message says what to do)"),
    ({"managers": "done", "ready": "waiting"}, True,
     f"stalled: upgrades are paused (coordinator upgrade resume {SPEC.name})"),
    ({"managers": "done", "ready": "done"}, True, None),  # paused, nothing left to upgrade
    ({"managers": "failing", "ready": "waiting"}, True,
     "stalled: Managers is failing (its message says what to do)"),
])
def test_a_rollout_waiting_on_the_operator_gives_no_estimate(
        states: dict[str, str], paused: bool, held: str | None) -> None:
    spec = SPEC.model_copy(update={"settings": SPEC.settings.model_copy(update={
        "upgrade": SPEC.settings.upgrade.model_copy(update={"paused": paused})})})
    found = [Stage(name, name.capitalize(), state, 1.0, "") for name, state in states.items()]  # type: ignore[arg-type]
    assert held_by(spec, found) == held
    estimate = Progress(3, 6, 2, 100.0).at(130.0, held_by(spec, found))
    assert (estimate.eta_seconds, estimate.held) == ((None, held) if held else (30.0, None))
