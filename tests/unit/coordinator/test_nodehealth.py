"""The Node of a deployed machine, watched after it went Ready: looked at once every
NODE_HEALTH_SECONDS, and a Node gone NotReady or deleted makes the `nodes` stage fail and
the machine's note say so (naming the node, its Ready condition and since when), while the
machine keeps its state."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.model import DrainStage, DrainStatus, Machine, MachineState, NodeStatus
from coordinator.domain.nodes import NODE_HEALTH_SECONDS, health_due, observed
from coordinator.domain.planner import plan
from coordinator.domain.remedies import machine_note
from coordinator.domain.status import History, machine_step, stages
from tests.support.builders import cluster, machine

KUBE = {"kubernetes": {"kubeconfig": "/etc/coordinator/kubeconfig"}}
SPEC = cluster(**KUBE)
T0 = 1_000_000.0  # 1970-01-12T13:46:40Z
KUBELET_DOWN = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")


def ready_worker(state: MachineState = MachineState.READY) -> Machine:
    w1 = machine("w1", state=state)
    return replace(w1, node=observed(None, T0 - 100, "w1.lab", ("True", "KubeletReady", "")))


def test_a_deployed_machines_node_is_looked_at_once_every_interval() -> None:
    w1 = ready_worker()
    assert health_due(SPEC, w1, None, T0)  # never looked at by this coordinator
    assert not health_due(SPEC, w1, T0 - NODE_HEALTH_SECONDS + 1, T0)
    assert health_due(SPEC, w1, T0 - NODE_HEALTH_SECONDS, T0)
    assert health_due(SPEC, ready_worker(MachineState.UPGRADE), None, T0)
    assert not health_due(cluster(), w1, None, T0)  # no Kubernetes access
    assert not health_due(SPEC, machine("w2", state=MachineState.PREPARE), None, T0)
    draining = replace(w1, state=MachineState.UPGRADE,
                       drain=DrainStatus(DrainStage.DRAINING, started_at=T0))
    assert not health_due(SPEC, draining, None, T0)  # the drainer waits for its Node


def test_a_look_that_finds_the_same_is_no_change_to_record() -> None:
    w1 = ready_worker()
    assert w1.node is not None
    assert observed(w1.node, T0, "w1.lab", ("True", "KubeletReady", "")) == w1.node
    down = observed(w1.node, T0, "w1.lab", KUBELET_DOWN)
    assert (down.ready, down.unready_since) == (False, T0)
    assert observed(down, T0 + 30, "w1.lab", KUBELET_DOWN) == down  # still down: since T0
    back = observed(down, T0 + 60, "w1.lab", ("True", "KubeletReady", ""))
    assert (back.ready, back.ready_since, back.unready_since) == (True, T0 + 60, None)
    assert observed(down, T0 + 60, None).unready_since == T0  # then deleted


def nodes_stage(machines: list[Machine]) -> tuple[str, float | None, str]:
    found = next(s for s in stages(SPEC, 0.0, machines, History([]), T0 + 90) if s.name == "nodes")
    return found.state, found.since, found.message


def test_a_ready_machine_whose_node_goes_not_ready_fails_the_nodes_stage_and_keeps_its_state(
        ) -> None:
    w1 = ready_worker()
    assert nodes_stage([w1])[0] == "done"
    assert w1.node is not None
    down = replace(w1, node=observed(w1.node, T0, "w1.lab", KUBELET_DOWN))
    text = ("node w1.lab NotReady since 1970-01-12T13:46:40Z: Ready=Unknown (NodeStatusUnknown) "
            "(Kubelet stopped posting node status.)")
    assert nodes_stage([down]) == ("failing", T0, f"0 of 1 nodes Ready; w1: {text}")
    note = machine_note(SPEC, down, machine_step(SPEC, down, T0 + 90), T0 + 90)
    assert (note.text, note.failing) == (text, True)
    assert "journalctl -u kubelet" in note.remedy and "kubectl describe node w1.lab" in note.remedy
    assert plan(SPEC, [down]) == []  # it stays Ready
    back = replace(down, node=observed(down.node, T0 + 60, "w1.lab", ("True", "KubeletReady", "")))
    assert nodes_stage([back])[0] == "done"


def test_a_deleted_node_fails_the_stage_and_the_note_points_at_the_mark() -> None:
    w1 = ready_worker()
    gone = replace(w1, node=observed(w1.node, T0, None))
    state, _, message = nodes_stage([gone])
    assert (state, message) == ("failing", "0 of 1 nodes Ready; w1: node gone since "
                                "1970-01-12T13:46:40Z: no Node carries the mark of w1")
    note = machine_note(SPEC, gone, machine_step(SPEC, gone, T0), T0)
    assert note.failing and f"nodeagent.io/machine-id={gone.id}" in note.remedy


def test_a_deployed_machine_never_looked_at_is_done_as_before() -> None:
    w1 = machine("w1", state=MachineState.READY)
    assert w1.node is None
    assert nodes_stage([w1])[0] == "done"
    assert nodes_stage([replace(w1, node=NodeStatus(1.0, name="w1", ready=True))])[0] == "done"
