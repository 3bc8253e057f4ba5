"""Runs what the planner's node_action asks of upgrading machines' Kubernetes nodes: a drain
task (cordon + drain) per machine, then the uncordon once its upgrade items are applied, then
the wait for the node to report Ready. A deleted machine's node is drained the same way, then
deleted once its reset items are applied (domain/nodes/removal.py). The node is always the one the
machine's items marked (Kube.find_node), whatever its name: never looked up by hostname; a
leaving machine whose Node never registered has nothing to drain or delete.

Each task writes its outcome into the machine's DrainStatus through a DrainStatusRecorder
(under the write lock, and only if the drain attempt it ran is still the current one: an
operator's retry, skip or force starts a new attempt and cancels the task). A drain's deadline
counts from the stored started_at, so a coordinator restart resumes the drain without
extending it. What each step records is domain/nodes/draining.py's to decide; here the Kubernetes
API is called and the step recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Protocol, TypeVar

from coordinator.domain.durations import utc
from coordinator.domain.model import ClusterSpec, DrainStatus, Machine
from coordinator.domain.nodes import draining
from coordinator.domain.nodes.draining import DrainResult
from coordinator.domain.nodes.kubeaccess import NO_DRAIN, NO_KUBECONFIG, KubeAccess, kube_access
from coordinator.domain.nodes.removal import may_lack_node, unregistered
from coordinator.domain.rollout.planner import node_action
from coordinator.kube import Kube, KubeError
from coordinator.metrics import record_blocked_eviction, record_drain

log = logging.getLogger("coordinator.service.drainer")
RETRY_SECONDS = 2.0  # after the API server failed to answer
NOT_READY_POLL_SECONDS = 2.0  # the longest wait between two looks at a node's Ready condition
RECOVERY_POLL_SECONDS = 1.0  # between two looks at the workloads a drain evicted
T = TypeVar("T")


class DrainStatusRecorder(Protocol):
    """What drain tasks record their steps into (the machine's DrainStatus, through
    service/drains.py), and read the machine they work on from."""

    async def set_drain(self, machine_id: str, expected: DrainStatus | None, status: DrainStatus,
                        message: str | None) -> bool: ...

    async def machine(self, machine_id: str) -> Machine | None: ...

    def kick(self) -> None: ...


class Drainer:
    def __init__(self, recorder: DrainStatusRecorder,
                 clock: Callable[[], float] = time.time) -> None:
        self.recorder = recorder
        self.clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._not_before: dict[str, float] = {}  # machine id -> when a failed uncordon retries

    def schedule(self, spec: ClusterSpec, machines: Sequence[Machine]) -> None:
        """Start a task for every machine whose node needs one and has none running."""
        now = self.clock()
        access = kube_access(spec, machines)
        for machine in machines:
            action = node_action(spec, machine)
            running = self._tasks.get(machine.id)
            if action is None or (running and not running.done()):
                continue
            if self._not_before.get(machine.id, 0) > now:
                continue
            if action == "drain":
                work = self._drain(spec, machine, access)
            elif action == "uncordon":
                work = self._uncordon(machine, access)
            elif action == "delete-node":
                work = self._delete_node(machine, access)
            elif action == "await-recovery":
                work = self._await_recovery(spec, machine, access)
            else:
                work = self._await_ready(spec, machine, access)
            self._tasks[machine.id] = asyncio.create_task(work, name=f"{action} {machine.hostname}")

    async def cancel(self, machine_id: str) -> None:
        task = self._tasks.pop(machine_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        for machine_id in list(self._tasks):
            await self.cancel(machine_id)

    async def _drain(self, spec: ClusterSpec, machine: Machine, access: KubeAccess | None) -> None:
        settings = spec.settings
        status, message = draining.begun(machine, settings.drain, self.clock())
        if not await self.recorder.set_drain(machine.id, machine.drain, status, message):
            return
        deadline = status.started_at + settings.drain.timeout_seconds

        async def progress(result: DrainResult) -> None:
            await self.recorder.set_drain(machine.id, status, draining.with_result(status, result),
                                          None)

        node: str | None = machine.hostname
        while True:
            if access is None:
                result = DrainResult(False, NO_DRAIN)
                break
            try:
                async with await Kube.connect(access.path, access.text) as kube:
                    node = await _node(kube, machine)
                    if node is None:
                        result = DrainResult(True, unregistered(machine))
                        break
                    holder = await kube.hold(node, utc(self.clock()))
                    if holder is None:
                        if not status.held:  # from now on the node is the coordinator's
                            held = replace(status, held=True)
                            await self.recorder.set_drain(machine.id, status, held, None)
                            status = held
                        result = await kube.drain(
                            node, settings.drain, deadline, force=status.force,
                            clock=self.clock, progress=progress,
                            refused=partial(record_blocked_eviction, machine.cluster))
                        break
                    result = draining.held_by_another(node, holder)
            except KubeError as exc:
                result = DrainResult(False, str(exc))
            if self.clock() >= deadline:
                break
            await progress(result)
            await asyncio.sleep(RETRY_SECONDS)
        final, message, end = draining.ended(machine.hostname, status, result, node is not None)
        if end != "skipped":
            record_drain(machine.cluster, self.clock() - status.started_at, end)
        await self.recorder.set_drain(machine.id, status, final, message)

    async def _call(self, machine: Machine, access: KubeAccess | None, what: str,
                    request: Callable[[Kube], Awaitable[T]]) -> T | None:
        """One request of a node step (an uncordon, a Node deletion) through a new connection,
        and what it answered; when it fails, the drain's message says so and the step is
        retried RETRY_SECONDS later (None)."""
        status = machine.drain
        assert status is not None  # node_action asks for these steps only after a drain
        try:
            if access is None:
                raise KubeError(NO_KUBECONFIG)
            async with await Kube.connect(access.path, access.text) as kube:
                done = await request(kube)
        except KubeError as exc:
            self._not_before[machine.id] = self.clock() + RETRY_SECONDS
            await self.recorder.set_drain(machine.id, status, draining.step_failed(
                status, what, str(exc), self.clock()), None)
            self.recorder.kick()
            return None
        self._not_before.pop(machine.id, None)
        return done

    async def _uncordon(self, machine: Machine, access: KubeAccess | None) -> None:
        status = machine.drain
        assert status is not None

        async def give_back(kube: Kube) -> tuple[str, str]:
            node = await kube.machine_node(machine.cluster, machine.id, machine.hostname)
            return node, (await kube.give_back(node)).note

        done = await self._call(machine, access, "uncordon", give_back)
        if done is None:
            return
        await self.recorder.set_drain(machine.id, status, *draining.uncordoned(
            machine.hostname, status, *done, self.clock()))

    async def _delete_node(self, machine: Machine, access: KubeAccess | None) -> None:
        """Delete a leaving machine's Node, the one carrying its mark, once its reset items
        are applied; then its record may go."""
        status = machine.drain
        assert status is not None

        async def delete(kube: Kube) -> str:
            node = await kube.find_node(machine.cluster, machine.id)
            if node is None:
                return unregistered(machine)
            await kube.delete_node(node)
            return f"node {node} deleted"

        done = await self._call(machine, access, "Node deletion", delete)
        if done is None:
            return
        await self.recorder.set_drain(machine.id, status,
                                      *draining.node_deleted(machine.hostname, status, done))

    async def _await_ready(self, spec: ClusterSpec, machine: Machine,
                           access: KubeAccess | None) -> None:
        """Poll the node's Ready condition until it is True. Past drain.nodeReadyTimeoutSeconds
        (from the uncordon, across restarts) the stage says NodeNotReady, naming the node and
        what its condition says, and the polling goes on: the machine leaves Upgrade once the
        node is Ready, whenever that is."""
        status = machine.drain
        assert status is not None and status.uncordoned_at is not None
        timeout = spec.settings.drain.node_ready_timeout_seconds
        interval = 0.1
        node = machine.hostname  # named in messages until the node is found
        while True:
            try:
                if access is None:
                    raise KubeError(NO_KUBECONFIG)
                async with await Kube.connect(access.path, access.text) as kube:
                    node = await kube.machine_node(machine.cluster, machine.id, machine.hostname)
                    ready, detail = await kube.node_ready(node)
            except KubeError as exc:
                ready, detail = False, str(exc)
            if ready:
                await self.recorder.set_drain(machine.id, status, *draining.node_ready(
                    machine.hostname, status, node, self.clock()))
                return
            late = draining.late(status, node, timeout, detail, self.clock())
            if late is not None:
                if not await self.recorder.set_drain(machine.id, status, late,
                                                     f"{machine.hostname}: {late.message}"):
                    return
                status = late
            await asyncio.sleep(interval)
            interval = min(NOT_READY_POLL_SECONDS, interval * 2)
            if not draining.awaiting_ready(await self.recorder.machine(machine.id), status):
                return  # deleted, or moved on without this task

    async def _await_recovery(self, spec: ClusterSpec, machine: Machine,
                              access: KubeAccess | None) -> None:
        """Once the node is Ready again, look at the workloads its drain evicted until they
        are available again (domain/nodes/recovery.py), saying what is not back; past
        drain.recoveryTimeoutSeconds (from the node Ready, across restarts) the upgrade goes
        on, and its event names what was not back. A look that fails counts as not back."""
        status = machine.drain
        assert status is not None and status.ready_at is not None
        timeout = spec.settings.drain.recovery_timeout_seconds
        while True:
            try:
                if access is None:
                    raise KubeError(NO_KUBECONFIG)
                async with await Kube.connect(access.path, access.text) as kube:
                    short = await kube.not_back(status.workloads)
            except KubeError as exc:
                short = [f"cannot look: {exc}"]
            if not short or self.clock() >= status.ready_at + timeout:
                await self.recorder.set_drain(machine.id, status, *draining.recovered(
                    machine.hostname, status, short, timeout))
                return
            waiting = draining.recovering(status, short)
            if waiting != status:  # written when what is not back changes, not every look
                if not await self.recorder.set_drain(machine.id, status, waiting, None):
                    return  # deleted, or moved on without this task
                status = waiting
            await asyncio.sleep(RECOVERY_POLL_SECONDS)


async def _node(kube: Kube, machine: Machine) -> str | None:
    """The Node to drain, the one carrying the machine's mark. A leaving machine's may never
    have registered (None: nothing to drain); an upgrading machine's must be there (KubeError,
    retried until the drain's deadline)."""
    if may_lack_node(machine):
        return await kube.find_node(machine.cluster, machine.id)
    return await kube.machine_node(machine.cluster, machine.id, machine.hostname)

