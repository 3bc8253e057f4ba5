"""Which outputs the cluster keeps (domain/specs/outputs.py adopted, what the reconciler's pass
commits) and which values its items are handed (cluster_outputs), as tables: the first value
a manager produced is kept, a kept value is never replaced, a worker never produces one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.model import Machine, MachineState
from coordinator.domain.records import ClusterOutput
from coordinator.domain.specs.outputs import adopted, cluster_outputs
from tests.support.builders import machine

ENDPOINT, HASH = "control-plane.endpoint", "control-plane.caCertHash"


def producer(hostname: str, order: int, outputs: dict[str, str],
             role: str = "manager") -> Machine:
    """A Ready machine admitted order-th into Deploy, with these outputs."""
    return replace(machine(hostname, role, state=MachineState.READY),  # type: ignore[arg-type]
                   deploy_order=order, outputs=outputs)


M1 = producer("m1", 1, {ENDPOINT: "10.0.0.1:6443"})
M2 = producer("m2", 2, {ENDPOINT: "10.0.0.9:6443", HASH: "sha256:aa"})
W1 = producer("w1", 0, {ENDPOINT: "10.0.0.7:6443", HASH: "sha256:ww"}, "worker")
KEPT_M1 = {ENDPOINT: ClusterOutput("10.0.0.1:6443", M1.id, "m1", 1.0)}

# The outputs the cluster keeps, the machines as they stand, and what it adopts now (name ->
# producing hostname and value): {} is what nearly every pass adopts.
ADOPTIONS = [
    pytest.param({}, [M1], {ENDPOINT: ("m1", "10.0.0.1:6443")},
                 id="a first output is adopted from its manager"),
    pytest.param({}, [M2, M1], {ENDPOINT: ("m1", "10.0.0.1:6443"), HASH: ("m2", "sha256:aa")},
                 id="two managers: each name from the first admitted that produced it"),
    pytest.param(KEPT_M1, [M2], {HASH: ("m2", "sha256:aa")},
                 id="its manager gone: the kept value stays, only a new name is adopted"),
    pytest.param(KEPT_M1, [M1], {}, id="nothing new: nothing adopted"),
    pytest.param({}, [W1], {}, id="a worker's output is never the cluster's"),
    pytest.param({}, [], {}, id="no manager: nothing"),
]


@pytest.mark.parametrize(("kept", "machines", "adopts"), ADOPTIONS)
def test_adopted_table(kept: dict[str, ClusterOutput], machines: list[Machine],
                       adopts: dict[str, tuple[str, str]]) -> None:
    found = adopted(kept, machines, now=5.0)
    assert {name: (o.hostname, o.value) for name, o in found.items()} == adopts
    assert all(o.produced_at == 5.0 for o in found.values())


# The value an item's ${outputs.control-plane.endpoint} is given.
HANDED = [
    pytest.param({}, [M2, M1], "10.0.0.1:6443", id="the first admitted manager's"),
    pytest.param(KEPT_M1, [M2], "10.0.0.1:6443",
                 id="the kept value, though another manager produced another"),
    pytest.param({}, [M2], "10.0.0.9:6443", id="nothing kept: the manager there"),
    pytest.param({}, [W1], None, id="no manager produced it: none"),
]


@pytest.mark.parametrize(("kept", "machines", "value"), HANDED)
def test_cluster_outputs_table(kept: dict[str, ClusterOutput], machines: list[Machine],
                               value: str | None) -> None:
    assert cluster_outputs(machines, kept).get("outputs." + ENDPOINT) == value
