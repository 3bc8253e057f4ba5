"""Item reports on their way from the node to the coordinator, in order, held while the
coordinator is unreachable; each also a line in the node's journal."""

from __future__ import annotations

import asyncio
import logging

from nodeagent.client import CoordinatorClient, Document, Rejected, Unreachable
from nodeagent.identity import Identity
from nodeagent.wire.logfmt import fields

log = logging.getLogger("nodeagent")


class Reporter:
    """Delivers item reports in order; holds them while the coordinator is unreachable."""

    def __init__(self, client: CoordinatorClient, identity: Identity) -> None:
        self._client = client
        self._identity = identity
        self._queue: asyncio.Queue[Document] = asyncio.Queue()

    def submit(self, report: Document) -> None:
        """Queue an ItemReport for the coordinator, and log it: every item's start, success
        and failure is also a line in the node's journal."""
        finished = report.get("finished_at")
        duration = finished - report["started_at"] if finished else None
        log.log(logging.WARNING if report["status"] == "failed" else logging.INFO,
                "item %s", report["status"], extra=fields(
                    item=report["item"], phase=report["phase"], status=report["status"],
                    attempt=report["attempt"], exit_code=report.get("exit_code"),
                    duration=duration, error=report.get("error") or None))
        self._queue.put_nowait(report)

    async def run(self) -> None:
        while True:
            report = await self._queue.get()
            while True:
                try:
                    await self._client.report(self._identity.machine_id,
                                              self._identity.credential, report)
                    break
                except Unreachable as exc:
                    wait = self._client.reconnect.failed()
                    log.warning("report of %s held back (%s); retrying in %.1fs", report["item"],
                                exc, wait, extra=fields(item=report["item"],
                                                        failures=self._client.reconnect.failures))
                    await asyncio.sleep(wait)
                except Rejected as exc:
                    log.error("coordinator refused the report of %s: %s", report["item"], exc)
                    break
