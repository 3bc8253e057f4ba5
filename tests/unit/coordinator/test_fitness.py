"""Whether a machine's precheck report lets it run as a role (domain/fitness.py, what approval
and auto-approval ask), as a table: the role its node checked, what it measured and failed,
and the problems that stop it as the role judged."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.domain.fitness import fitness
from nodeagent.wire.contract import Role
from nodeagent.wire.minimums import MiB
from tests.support.builders import OLD_KERNEL, precheck_report

SMALL = {"cpus": 1, "memory": 1024 * MiB}  # a worker's minimums, a manager's not
CPU = "cpu: 1 CPU(s); a manager needs at least 2"
MEMORY = "memory: 1024 MiB of memory; a manager needs at least 1700 MiB"
FITS = [
    pytest.param("worker", SMALL, "worker", [], id="a small node fits a worker"),
    pytest.param("worker", SMALL, "manager", [CPU, MEMORY],
                 id="but not a manager, judged from what it measured"),
    pytest.param("manager", SMALL, None, [CPU, MEMORY],
                 id="no role asked: judged as the role its node checked"),
    pytest.param("manager", SMALL, "worker", [],
                 id="checked as a manager, short of it: still fits a worker"),
    pytest.param("worker", {}, "manager", [], id="a big node fits a manager"),
    pytest.param("worker", {"failing": OLD_KERNEL}, "worker", ["kernel: kernel too old"],
                 id="a hard check failed stops every role"),
]


@pytest.mark.parametrize(("checked_as", "measured", "role", "problems"), FITS)
def test_fitness_table(checked_as: Role, measured: dict[str, Any], role: Role | None,
                       problems: list[str]) -> None:
    assert fitness(precheck_report("n1", checked_as, **measured), role).problems == problems

