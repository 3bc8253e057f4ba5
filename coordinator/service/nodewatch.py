"""Watches the Kubernetes Nodes of machines the planner waits on: a task per machine whose
deploy items are applied and whose Node is not yet found Ready (domain/nodes.awaits_node), or
whose Node's labels and taints are out of step with the spec and the machine
(nodes.metadata_due). Each look finds the machine's Node by its mark, brings its labels and
taints in step, reads its Ready condition and records what it found on the machine through
a NodeStatusRecorder, which wakes the reconciler: the planner moves the machine to Ready once its
Node is. Started from the reconciler's pass, like the drainer; it only reads and patches
Nodes, so a task interrupted anywhere is simply started again by a later pass.

Once a machine is deployed its Node is still looked at, with every deployed Node of its
cluster at once: one list of the marked Nodes (Kube.marked_nodes, in pages) per cluster every
interval (nodes.NODE_HEALTH_SECONDS), the first at a share of it drawn from the cluster's
name (nodes.first_sweep_offset), so that clusters do not all list at once after a start.
nodes.swept compares it with the machines the pass loaded and the ids of the idle Ready ones,
whose Nodes are known to be recorded Ready: only an idle machine found down is loaded, and
only a change is written (a Node gone NotReady or deleted, or Ready again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from coordinator.domain.model import ClusterSpec, Machine, NodeStatus, kubernetes_access
from coordinator.domain.nodes.kubeaccess import NO_KUBECONFIG, KubeAccess, kube_access
from coordinator.domain.nodes.nodes import (
    NODE_HEALTH_SECONDS,
    NodeFound,
    first_sweep_offset,
    missing,
    node_due,
    swept,
    swept_by_list,
    unseen,
)
from coordinator.domain.nodes.nodewatching import looked
from coordinator.kube import Kube, KubeError

POLL_SECONDS = 2.0  # the longest wait between two looks at a machine's Node

log = logging.getLogger(__name__)


class NodeStatusRecorder(Protocol):
    """What node tasks record what they found into (the machines' NodeStatus, through
    service/noderecords.py: the ids written), and read the machines they watch from."""

    async def record(self, changes: Sequence[NodeFound]) -> set[str]: ...

    async def current(self, machine_id: str) -> tuple[ClusterSpec, Machine] | None: ...

    async def machines(self, machine_ids: Sequence[str]) -> list[Machine]: ...


class NodeWatch:
    def __init__(self, recorder: NodeStatusRecorder,
                 clock: Callable[[], float] = time.time) -> None:
        self.recorder = recorder
        self.clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Each cluster's kubeconfig as the last pass found it: the first manager's report
        # brings one to tasks already waiting.
        self._access: dict[str, KubeAccess | None] = {}
        self._sweeps: dict[str, asyncio.Task[None]] = {}  # by cluster: its list under way
        self._next_sweep: dict[str, float] = {}  # by cluster: when its Nodes are listed next

    def schedule(self, spec: ClusterSpec, machines: Sequence[Machine],
                 idle: Collection[str] = ()) -> None:
        """Start a task for every machine whose Node is owed a look and has none running, and
        the cluster's list of its marked Nodes when it is due. idle: the ids of the cluster's
        inert Ready machines, which the pass does not load (their Nodes recorded Ready)."""
        self._access[spec.name] = kube_access(spec, machines)
        self._tasks = {i: task for i, task in self._tasks.items() if not task.done()}
        for machine in machines:
            running = self._tasks.get(machine.id)
            if node_due(spec, machine) and (running is None or running.done()):
                self._tasks[machine.id] = asyncio.create_task(
                    self._watch(spec, machine), name=f"node of {machine.hostname}")
        if kubernetes_access(spec):
            self._schedule_sweep(spec, machines, idle)

    def _schedule_sweep(self, spec: ClusterSpec, machines: Sequence[Machine],
                        idle: Collection[str]) -> None:
        now, running = self.clock(), self._sweeps.get(spec.name)
        due = self._next_sweep.setdefault(
            spec.name, now + first_sweep_offset(spec.name, NODE_HEALTH_SECONDS))
        if now < due or (running is not None and not running.done()):
            return
        self._next_sweep[spec.name] = now + NODE_HEALTH_SECONDS
        looked = [m for m in machines if swept_by_list(spec, m)]
        self._sweeps[spec.name] = asyncio.create_task(
            self._sweep(spec, looked, tuple(idle)), name=f"nodes of {spec.name}")

    async def _sweep(self, spec: ClusterSpec, machines: list[Machine],
                     idle: tuple[str, ...]) -> None:
        """One list of the cluster's marked Nodes, compared with its machines: the changes
        recorded, the idle machines found down loaded first. A list that fails is recorded
        on the loaded machines (the status says why); the idle ones keep their last state."""
        access, now = self._access.get(spec.name), self.clock()
        try:
            if access is None:
                raise KubeError(NO_KUBECONFIG)
            async with await Kube.connect(access.path, access.text) as kube:
                found = await kube.marked_nodes(spec.name)
                if missing(found, machines, idle):  # the labelled Node wins, as in node_of
                    found = {**await kube.marked_nodes(spec.name, every=True), **found}
        except KubeError as exc:
            log.warning("cannot look at the nodes of cluster %s: %s", spec.name, exc)
            await self.recorder.record([NodeFound(m, unseen(m.node, now, str(exc)))
                                        for m in machines])
            return
        sweep = swept(spec, machines, idle, found, now)
        loaded = await self.recorder.machines(sweep.to_load) if sweep.to_load else []
        await self.recorder.record([*sweep.changes, *swept(spec, loaded, (), found, now).changes])

    async def close(self) -> None:
        tasks = [*self._tasks.values(), *self._sweeps.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._sweeps.clear()
        self._next_sweep.clear()  # a later term spreads its first lists again

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
            if found != machine.node and machine.id not in await self.recorder.record(
                    [NodeFound(machine, found)]):
                return
            await asyncio.sleep(interval)
            interval = min(POLL_SECONDS, interval * 2)
            current = await self.recorder.current(machine.id)
            if current is None or not node_due(*current):
                return
            spec, machine = current

    async def _look(self, spec: ClusterSpec, machine: Machine) -> NodeStatus:
        """Find the Node and read it; patch its labels and taints if the verdict
        (nodewatching.looked) says they are out of step; what was found."""
        now = self.clock()
        access = self._access.get(spec.name)
        if access is None:
            raise KubeError(NO_KUBECONFIG)
        async with await Kube.connect(access.path, access.text) as kube:
            name = await kube.find_node(spec.name, machine.id)
            node = None if name is None else await kube.node(name)
            look = looked(spec, machine, name, node, now)
            if name is not None and look.patch is not None:
                await kube.patch_node(name, look.patch)
            return look.status
