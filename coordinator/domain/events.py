"""How the coordinator's history is written: one constructor for every event, and the texts
of the events several places record, so that one kind of happening always reads the same."""

from __future__ import annotations

from typing import Any

from coordinator.domain.model import Machine
from coordinator.domain.records import Event


def event(now: float, cluster: str, kind: str, message: str, machine: Machine | None = None,
          data: dict[str, Any] | None = None, machine_id: str | None = None,
          hostname: str | None = None) -> Event:
    """An event about the cluster, or about a machine (given whole, or by id and hostname
    when it is gone)."""
    return Event(time=now, cluster=cluster, kind=kind, message=message,
                 machine=machine.id if machine else machine_id,
                 hostname=machine.hostname if machine else hostname, data=data or {})
