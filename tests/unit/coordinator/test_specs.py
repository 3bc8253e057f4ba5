"""What `cluster apply` stores over the stored spec (domain/specs/specs.py), as tables: a file that
does not say settings.upgrade.paused keeps the stored pause (an apply that silently resumed
would start the upgrade the operator held back), and the networking settings are fixed once
the first manager was admitted into Deploy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.specs.specs import check_fixed, load_spec, pause_kept
from nodeagent.wire.validation import InvalidDocument
from tests.support.builders import machine

S = MachineState


def spec(release: str, settings: str = "{}") -> ClusterSpec:
    return load_spec(f"""\
name: lab
release: "{release}"
settings: {settings}
machineTypes:
  manager:
    - {{name: init, phase: deploy, action: {{type: exec, argv: [kubeadm, init]}}}}
""")


PAUSED, RESUMED = "{upgrade: {paused: true}}", "{upgrade: {paused: false}}"
# The stored spec (None: a first apply), the file applied, and whether upgrades are paused
# once it is stored.
PAUSES = [
    pytest.param(spec("1", PAUSED), spec("2"), True,
                 id="upgrade pause, then a new release applied: still paused"),
    pytest.param(spec("1", PAUSED), spec("2", "{upgrade: {workerBatchSize: 2}}"), True,
                 id="a file with other upgrade settings keeps the pause too"),
    pytest.param(spec("1", PAUSED), spec("2", RESUMED), False,
                 id="a file that says paused: false resumes"),
    pytest.param(spec("1"), spec("2", PAUSED), True, id="a file that says paused: true pauses"),
    pytest.param(spec("1"), spec("2"), False, id="never paused: not paused"),
    pytest.param(None, spec("1"), False, id="a first apply: as the file says"),
]


@pytest.mark.parametrize(("before", "applied", "paused"), PAUSES)
def test_pause_kept_table(before: ClusterSpec | None, applied: ClusterSpec, paused: bool) -> None:
    stored = pause_kept(before, applied)
    assert stored.settings.upgrade.paused is paused
    assert stored.release == applied.release


NETWORKING = '{kubernetes: {controlPlaneEndpoint: "k8s.lab:6443", podSubnet: 10.50.0.0/16}}'
MOVED = '{kubernetes: {controlPlaneEndpoint: "k8s.lab:6443", podSubnet: 10.70.0.0/16}}'
UPGRADED = ('{kubernetes: {controlPlaneEndpoint: "k8s.lab:6443", podSubnet: 10.50.0.0/16, '
            'version: 1.34.0}}')
FIRST = replace(machine("m1", "manager", state=S.READY), deploy_order=1)
# The machines, the settings applied over NETWORKING, and the refusal ("" : applied).
FIXED = [
    pytest.param([], MOVED, "", id="no machine yet: the networking may change"),
    pytest.param([machine("m1", "manager", state=S.PREPARE)], MOVED, "",
                 id="a manager still preparing: it may change"),
    pytest.param([FIRST], MOVED, "podSubnet cannot change from 10.50.0.0/16 to 10.70.0.0/16",
                 id="the first manager deployed: refused"),
    pytest.param([replace(FIRST, state=S.DELETING)], MOVED, "(m1 is Deleting)",
                 id="while it is being deleted: still refused"),
    pytest.param([FIRST], UPGRADED, "", id="the other Kubernetes settings may change"),
    pytest.param([FIRST], NETWORKING, "", id="an apply that keeps the networking"),
]


@pytest.mark.parametrize(("machines", "settings", "refused"), FIXED)
def test_check_fixed_table(machines: list[Machine], settings: str, refused: str) -> None:
    if not refused:
        check_fixed(spec("1", NETWORKING), spec("2", settings), machines)
        return
    with pytest.raises(Conflict) as caught:
        check_fixed(spec("1", NETWORKING), spec("2", settings), machines)
    assert refused in str(caught.value) and "create a new cluster" in str(caught.value)


ITEMS = """\
name: lab
release: "1.0"
machineTypes:
  manager:
    - {name: init, phase: deploy, action: {type: exec, argv: [kubeadm, init]}}
  worker:
    - {name: join, phase: deploy, action: {type: exec, argv: [echo, "${cluster.nam}"]}}
    - name: join
      phase: deploy
      kubeconfigFrom: /etc/kubernetes/kubelet.conf
      action: {type: exec, argv: [kubeadm, join]}
    - {name: join, phase: upgrade, action: {type: exec, argv: [kubeadm, upgrade, node]}}
"""


def test_each_item_problem_is_reported_at_its_own_line_beside_every_other() -> None:
    """A name used twice in a phase was reported at `machineTypes:` alone and hid the rest:
    the operator fixed one problem per apply, looking for the item. Every problem is there,
    in the order of its line."""
    with pytest.raises(InvalidDocument) as refused:
        load_spec(ITEMS)
    placeholder, duplicate, kubeconfig = (problem.text() for problem in refused.value.problems)
    assert duplicate == ("line 8: machineTypes.worker[1].name: item 'join' appears twice in "
                         "phase deploy (first as machineTypes.worker[0]): rename one")
    assert kubeconfig == ("line 10: machineTypes.worker[1].kubeconfigFrom: only manager items "
                          "report a kubeconfig (the coordinator uses the first manager's)")
    assert placeholder.startswith("line 7: machineTypes.worker[0].action.argv[1]: unknown "
                                  "placeholder ${cluster.nam}; did you mean ${cluster.name}?")


def test_a_misspelt_key_is_told_the_field_meant_even_inside_an_action() -> None:
    with pytest.raises(InvalidDocument) as refused:
        load_spec("""\
name: lab
release: "1.0"
settings: {drain: {enabeld: false}}
machineTypes:
  workers: []
  manager:
    - {name: init, phse: deploy, action: {type: exec, argvv: [kubeadm, init]}}
""")
    assert [problem.text() for problem in refused.value.problems] == [
        "line 3: settings.drain.enabeld: unknown field; did you mean enabled?",
        "line 5: machineTypes.workers: unknown field; did you mean worker?",
        "line 7: machineTypes.manager[0].phase: required",
        "line 7: machineTypes.manager[0].action.argv: required",
        "line 7: machineTypes.manager[0].action.argvv: unknown field; did you mean argv?",
        "line 7: machineTypes.manager[0].phse: unknown field; did you mean phase?"]
