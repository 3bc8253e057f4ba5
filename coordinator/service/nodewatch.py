"""Watches the Kubernetes Nodes of machines the planner waits on: a task per machine whose
deploy items are applied and whose Node is not yet found Ready (domain/nodes.awaits_node), or
whose Node's labels and taints are out of step with the spec and the machine
(nodes.metadata_due). Each look finds the machine's Node by its mark, brings its labels and
taints in step, reads its Ready condition and records what it found on the machine through
a NodeLedger, which wakes the reconciler: the planner moves the machine to Ready once its
Node is. Started from the reconciler's pass, like the drainer; it only reads and patches
Nodes, so a task interrupted anywhere is simply started again by a later pass.

Once a machine is deployed its Node is still looked at, once every nodes.NODE_HEALTH_SECONDS
(health_due, from when this coordinator last looked): a Node gone NotReady or deleted is
recorded (only a change is written) and the status says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from functools import partial
from typing import Any, Protocol

from coordinator.domain.kubeaccess import NO_KUBECONFIG, KubeAccess, kube_access
from coordinator.domain.model import ClusterSpec, Machine, NodeStatus
from coordinator.domain.nodes import (
    desired_metadata,
    health_due,
    kubernetes_access,
    metadata_patch,
    node_due,
    node_news,
    observed,
    ready_condition,
    stale,
    unseen,
    watched,
)
from coordinator.kube import Kube, KubeError

POLL_SECONDS = 2.0  # the longest wait between two looks at a machine's Node


class NodeLedger(Protocol):
    """Where node tasks record what they found, and read the machine they watch."""

    async def set_node(self, machine_id: str, status: NodeStatus, message: str | None) -> bool: ...

    async def current(self, machine_id: str) -> tuple[ClusterSpec, Machine] | None: ...


class NodeWatch:
    def __init__(self, ledger: NodeLedger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Each cluster's kubeconfig as the last pass found it: the first manager's report
        # brings one to tasks already waiting.
        self._access: dict[str, KubeAccess | None] = {}
        # When this coordinator last looked at each machine's Node, by cluster (health_due).
        self._looked: dict[str, dict[str, float]] = {}

    def schedule(self, spec: ClusterSpec, machines: Sequence[Machine],
                 idle: Collection[str] = ()) -> None:
        """Start a task for every machine whose Node is owed a look and has none running.
        idle: the ids of the cluster's inert Ready machines, which the pass does not load: each
        is loaded by its own task when its periodic look is due."""
        self._access[spec.name] = kube_access(spec, machines)
        self._tasks = {i: task for i, task in self._tasks.items() if not task.done()}
        before, now = self._looked.get(spec.name, {}), self.clock()
        known = [*(m.id for m in machines), *idle]
        looked = self._looked[spec.name] = {i: before[i] for i in known if i in before}
        for machine in machines:
            if node_due(spec, machine) or health_due(spec, machine, looked.get(machine.id), now):
                self._start(looked, machine.id, now, partial(self._watch, spec, machine))
        for machine_id in idle:
            if kubernetes_access(spec) and stale(looked.get(machine_id), now):
                self._start(looked, machine_id, now, partial(self._load_and_watch, machine_id))

    def _start(self, looked: dict[str, float], machine_id: str, now: float,
               work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        running = self._tasks.get(machine_id)
        if running is None or running.done():
            looked[machine_id] = now
            self._tasks[machine_id] = asyncio.create_task(work(), name=f"node of {machine_id}")

    async def _load_and_watch(self, machine_id: str) -> None:
        current = await self.ledger.current(machine_id)
        if current is not None and watched(*current):
            await self._watch(*current)

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _watch(self, spec: ClusterSpec, machine: Machine) -> None:
        """Look until the machine's Node is Ready and carries what it should, or the machine
        no longer waits on it (moved on, deleted). A look that fails is recorded (the status
        says why) and tried again."""
        interval = 0.1
        while True:
            try:
                found = await self._look(spec, machine)
            except KubeError as exc:
                found = unseen(machine.node, self.clock(), str(exc))
            if found != machine.node and not await self.ledger.set_node(
                    machine.id, found, node_news(machine.hostname, machine.node, found)):
                return
            await asyncio.sleep(interval)
            interval = min(POLL_SECONDS, interval * 2)
            current = await self.ledger.current(machine.id)
            if current is None or not node_due(*current):
                return
            spec, machine = current

    async def _look(self, spec: ClusterSpec, machine: Machine) -> NodeStatus:
        """Find the Node, patch its labels and taints if they are out of step, read its Ready
        condition."""
        now = self.clock()
        access = self._access.get(spec.name)
        if access is None:
            raise KubeError(NO_KUBECONFIG)
        async with await Kube.connect(access.path, access.text) as kube:
            name = await kube.find_node(spec.name, machine.id)
            if name is None:
                return observed(machine.node, now, None)
            node = await kube.node(name)
            desired = desired_metadata(spec, machine)
            patch = metadata_patch(node, desired)
            if patch is not None:
                await kube.patch_node(name, patch)
            return observed(machine.node, now, name, ready_condition(node), desired.digest())
