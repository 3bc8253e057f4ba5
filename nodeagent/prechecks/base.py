"""What a check is, and what it is given: the host seam, the config and the role."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nodeagent.host import Host
from nodeagent.wire.config import AgentConfig
from nodeagent.wire.contract import Role
from nodeagent.wire.protocol import Severity, Stage, Status


@dataclass(frozen=True)
class Outcome:
    """A check's verdict before the runner adds name, severity and duration."""

    status: Status
    message: str
    remedy: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def passed(message: str, **data: Any) -> Outcome:
    return Outcome(Status.PASS, message, "", data)


def warned(message: str, remedy: str = "", **data: Any) -> Outcome:
    return Outcome(Status.WARN, message, remedy, data)


def failed(message: str, remedy: str, **data: Any) -> Outcome:
    return Outcome(Status.FAIL, message, remedy, data)


def skipped(message: str, **data: Any) -> Outcome:
    return Outcome(Status.SKIP, message, "", data)


class CheckContext:
    """Everything a check may touch. Probes shared by several checks run once per context."""

    def __init__(self, host: Host, config: AgentConfig, role: Role) -> None:
        self.host = host
        self.config = config
        self.role = role
        self.ignored: frozenset[str] = frozenset()  # the checks --ignore names (run_checks)
        self._shared: dict[str, asyncio.Task[Any]] = {}

    async def shared(self, key: str, probe: Callable[[], Awaitable[Any]]) -> Any:
        """Run probe once for all checks that ask for key; later callers await the same task."""
        task = self._shared.get(key)
        if task is None:
            task = asyncio.ensure_future(probe())
            self._shared[key] = task
        return await asyncio.shield(task)

    async def processes(self) -> list[Any]:
        return await self.shared("processes", lambda: asyncio.to_thread(self.host.processes))

    async def listeners(self) -> list[Any]:
        return await self.shared("listeners", lambda: asyncio.to_thread(self.host.listeners))


@dataclass(frozen=True)
class Check:
    name: str
    severity: Severity
    description: str
    run: Callable[[CheckContext], Awaitable[Outcome]]
    # Network checks derive their bound from their own configured timeout.
    timeout: Callable[[AgentConfig], float] = lambda config: config.thresholds.check_timeout
    stage: Stage = Stage.HOST
