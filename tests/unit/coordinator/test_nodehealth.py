"""The Node of a deployed machine, watched after it went Ready: looked at once every
NODE_HEALTH_SECONDS, and a Node gone NotReady or deleted makes the `nodes` stage fail and
the machine's note say so (naming the node, its Ready condition and since when), while the
machine keeps its state."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.model import DrainStage, DrainStatus, Machine, MachineState, NodeStatus
from coordinator.domain.nodes.nodes import (
    Marked,
    desired_metadata,
    first_sweep_offset,
    found_down,
    marked_nodes,
    missing,
    observed,
    swept,
    swept_by_list,
    unseen,
)
from coordinator.domain.rollout.planner import plan
from coordinator.domain.rollout.remedies import machine_note
from coordinator.domain.views.status import History, machine_step, stages
from tests.support.builders import cluster, machine

KUBE = {"kubernetes": {"kubeconfig": "/etc/coordinator/kubeconfig"}}
SPEC = cluster(**KUBE)
T0 = 1_000_000.0  # 1970-01-12T13:46:40Z
READY = ("True", "KubeletReady", "")
KUBELET_DOWN = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")


def ready_worker(state: MachineState = MachineState.READY, hostname: str = "w1") -> Machine:
    """A deployed worker whose Node was found Ready, with its labels and taints."""
    w1 = machine(hostname, state=state)
    return replace(w1, node=observed(None, T0 - 100, f"{hostname}.lab", READY,
                                     desired_metadata(SPEC, w1).digest()))


def test_a_deployed_machines_node_is_swept_unless_a_drain_or_its_own_look_has_it() -> None:
    w1 = ready_worker()
    assert swept_by_list(SPEC, w1)
    assert swept_by_list(SPEC, ready_worker(MachineState.UPGRADE))
    assert not swept_by_list(cluster(), w1)  # no Kubernetes access
    assert not swept_by_list(SPEC, machine("w2", state=MachineState.PREPARE))
    draining = replace(w1, state=MachineState.UPGRADE,
                       drain=DrainStatus(DrainStage.DRAINING, started_at=T0))
    assert not swept_by_list(SPEC, draining)  # the drainer waits for its Node
    assert w1.node is not None
    relabel = replace(w1, labels={"tier": "edge"}, node=replace(w1.node, name="w1.lab"))
    assert not swept_by_list(SPEC, relabel)  # its own look brings its labels in step


def test_the_first_list_of_each_cluster_falls_within_the_interval_spread_by_its_name() -> None:
    offsets = [first_sweep_offset(f"cluster-{i}", 30.0) for i in range(200)]
    assert all(0 <= o < 30.0 for o in offsets)
    assert offsets[0] == first_sweep_offset("cluster-0", 30.0)  # the same after a restart
    assert len({int(o // 3) for o in offsets}) == 10  # every tenth of the interval has some


def test_a_look_that_finds_the_same_is_no_change_to_record() -> None:
    w1 = ready_worker()
    assert w1.node is not None
    digest = w1.node.metadata
    assert observed(w1.node, T0, "w1.lab", READY, digest) == w1.node
    down = observed(w1.node, T0, "w1.lab", KUBELET_DOWN, digest)
    assert (down.ready, down.unready_since) == (False, T0)
    assert observed(down, T0 + 30, "w1.lab", KUBELET_DOWN, digest) == down  # still down: since T0
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


def test_a_node_no_look_could_see_is_not_down_but_one_no_longer_found_stays_down() -> None:
    """The API server unreachable before any look found the Node: nothing is known of it,
    so it holds up no upgrade; once found gone, a failed look keeps what was found."""
    w1 = machine("w1", state=MachineState.READY)
    unreachable = replace(w1, node=unseen(None, T0, "connection refused"))
    assert not found_down(SPEC, unreachable) and nodes_stage([unreachable])[0] != "failing"
    gone = replace(w1, node=observed(None, T0, None))
    assert found_down(SPEC, gone)
    assert found_down(SPEC, replace(gone, node=unseen(gone.node, T0 + 30, "connection refused")))

def test_a_list_of_the_marked_nodes_gives_each_machines_node_by_its_label_or_provider_id() -> None:
    def node(name: str, labels: dict[str, str], provider: str = "", ready: str = "True") -> dict:
        return {"metadata": {"name": name, "labels": labels}, "spec": {"providerID": provider},
                "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R"}]}}

    found = marked_nodes([node("a", {"nodeagent.io/machine-id": "m-1"}),
                          node("b", {}, "nodeagent://lab/m-2", ready="False"),
                          node("c", {}, "nodeagent://other/m-3"),
                          node("d", {}, "nodeagent://lab/m-1"),
                          node("e", {"kubernetes.io/hostname": "e"})], "lab")
    assert found == {"m-1": Marked("a", ("True", "R", "")), "m-2": Marked("b", ("False", "R", ""))}
    assert missing(found, [], ["m-1", "m-2"]) is False
    assert missing(found, [machine("w3")], ["m-1"]) is True


def test_a_list_that_finds_a_node_down_records_it_on_a_loaded_machine_and_loads_an_idle_one(
        ) -> None:
    w1, w2, w3 = (ready_worker(hostname=h) for h in ("w1", "w2", "w3"))
    found = {w1.id: Marked("w1.lab", KUBELET_DOWN), w2.id: Marked("w2.lab", KUBELET_DOWN),
             w3.id: Marked("w3.lab", READY)}
    sweep = swept(SPEC, [w1], [w2.id, w3.id, "gone-id"], found, T0)
    assert [(c.machine.id, c.status.ready, c.status.unready_since) for c in sweep.changes] == [
        (w1.id, False, T0)]
    assert sweep.to_load == (w2.id, "gone-id")  # w3 is Ready as recorded: not loaded
    stand_in = swept(SPEC, [w1, w2], [w2.id], found, T0)  # loaded, and among the idle ids
    assert ([c.machine.id for c in stand_in.changes], stand_in.to_load) == ([w1.id, w2.id], ())
    assert swept(SPEC, [w1, w3], [], {**found, w1.id: Marked("w1.lab", READY)}, T0).changes == ()
    renamed = swept(SPEC, [w3], [], {w3.id: Marked("w3.new", READY)}, T0).changes
    assert [(c.status.name, c.status.metadata) for c in renamed] == [("w3.new", "")]


CONDITIONS = st.sampled_from([READY, KUBELET_DOWN, ("False", "KubeletNotReady", "no CNI"), None])


@given(st.lists(st.tuples(CONDITIONS, CONDITIONS), min_size=1, max_size=12))
def test_a_list_compared_with_idle_ids_records_what_it_would_with_every_machine_loaded(
        fleet: list[tuple[tuple[str, str, str] | None, tuple[str, str, str] | None]]) -> None:
    """Idle Ready machines (their Node recorded Ready) are given by id alone: a list records
    on them what it would record were they loaded, and loads only those it finds down."""
    machines, found = [], {}
    for index, (recorded, now) in enumerate(fleet):
        m = ready_worker(hostname=f"w{index}")
        assert m.node is not None
        if recorded is None:
            m = replace(m, node=observed(m.node, T0 - 50, None))
        elif recorded != READY:
            m = replace(m, node=observed(m.node, T0 - 50, m.node.name, recorded, m.node.metadata))
        machines.append(m)
        if now is not None:
            found[m.id] = Marked(f"w{index}.lab", now)
    whole = swept(SPEC, machines, [], found, T0)
    idle = [m for m in machines if m.node is not None and m.node.ready]
    by_id = {m.id: m for m in machines}
    sweep = swept(SPEC, [m for m in machines if m not in idle], [m.id for m in idle], found, T0)
    loaded = swept(SPEC, [by_id[i] for i in sweep.to_load], [], found, T0)
    assert {c.machine.id: c.status for c in [*sweep.changes, *loaded.changes]} == {
        c.machine.id: c.status for c in whole.changes}
    assert len(sweep.to_load) == sum(1 for m in idle if found.get(m.id, Marked("", ("",) * 3))
                                     .condition[0] != "True")
