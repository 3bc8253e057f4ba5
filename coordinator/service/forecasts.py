"""The drain forecast of an upgrade plan: for each machine the plan would drain, what its
node's drain would meet if it started now (domain/nodes/forecast.py), read from the live
cluster in one connection, within FORECAST_SECONDS, so that a plan asked of a cluster whose
API server does not answer still comes back, saying so."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from coordinator.domain.model import ClusterSpec, Machine, needs_drain
from coordinator.domain.nodes.forecast import NodeForecast
from coordinator.domain.nodes.kubeaccess import kube_access
from coordinator.kube import Kube, KubeError

FORECAST_SECONDS = 10.0
MOST_FORECAST = 100  # nodes read for one plan; a larger upgrade's first ones, saying so


async def drain_forecasts(spec: ClusterSpec, machines: Sequence[Machine],
                          drained: Sequence[Machine]) -> tuple[dict[str, NodeForecast], list[str]]:
    """The forecast of each machine of `drained` (in plan order) whose upgrade drains its node
    (by hostname), and notes: what could not be read, and what was left out. Nothing without
    Kubernetes access (the plan's warnings say so)."""
    due = [m for m in drained if needs_drain(spec, m)]
    access = kube_access(spec, machines)
    if not due or access is None:
        return {}, []
    notes = [f"drain forecast for the first {MOST_FORECAST} of {len(due)} drained machines"] \
        if len(due) > MOST_FORECAST else []
    due = due[:MOST_FORECAST]
    try:
        async with asyncio.timeout(FORECAST_SECONDS):
            async with await Kube.connect(access.path, access.text) as kube:
                budgets = await kube.budgets()
                found = await asyncio.gather(*(_forecast(kube, spec, m, budgets) for m in due))
    except KubeError as exc:
        return {}, [f"no drain forecast: {exc}"]
    except TimeoutError:
        return {}, [f"no drain forecast: the API server did not answer in "
                    f"{FORECAST_SECONDS:g}s"]
    forecasts = {m.hostname: f for m, f in zip(due, found, strict=True) if f is not None}
    unregistered = [m.hostname for m, f in zip(due, found, strict=True) if f is None]
    if unregistered:
        notes.append("no drain forecast for " + ", ".join(unregistered)
                     + ": no Node carries the machine's mark")
    return forecasts, notes


async def _forecast(kube: Kube, spec: ClusterSpec, machine: Machine,
                    budgets: list[dict[str, Any]]) -> NodeForecast | None:
    node = machine.node.name if machine.node is not None and machine.node.name else \
        await kube.find_node(machine.cluster, machine.id)
    if node is None:
        return None
    return await kube.drain_forecast(node, spec.settings.drain, budgets)
