"""The coordinator's own log, from what it records: one logfmt line (nodeagent/wire/logfmt.py) per
registration, approval, credential change, state change of a machine, cluster change, drain
step, responding change, removal, admin change and window of refusals, with stable keys:
event=KIND cluster=... machine=HOSTNAME machine_id=... and a few per kind. Events never carry
secrets, and the log's handler redacts what looks like one anyway. Item reports are not logged
(`coordinator machines logs` has them): a rollout would write several lines per item."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from coordinator.domain.records import Event
from nodeagent.wire.logfmt import fields

log = logging.getLogger("coordinator.events")

# The data of an event each kind's line carries, beyond its kind, cluster and machine.
LOGGED: dict[str, tuple[str, ...]] = {
    "registered": ("precheck_failures",),
    "approved": (),
    "reissued": ("expires_at",),
    "rejoined": (),
    "credential": (),
    "role": ("role",),
    "retry": (),
    "state": ("from", "to", "reason"),
    "drain": ("stage", "action", "evicted", "blocking_pods"),
    "responding": (),
    "not-responding": (),
    "removed": (),
    "cluster-applied": ("release", "generation"),
    "cluster-removed": (),
    "upgrade": (),
    "audit": ("actor", "method", "path", "status", "source", "what", "refused", "reason"),
}


def log_events(events: Iterable[Event]) -> None:
    """One INFO line for each event of a logged kind, just written."""
    if not log.isEnabledFor(logging.INFO):
        return
    for recorded in events:
        keys = LOGGED.get(recorded.kind)
        if keys is None or already_logged(recorded):
            continue
        data: dict[str, Any] = {key: _short(recorded.data.get(key)) for key in keys}
        log.info(recorded.message, extra=fields(
            event=recorded.kind, cluster=recorded.cluster or None, machine=recorded.hostname,
            machine_id=recorded.machine, **data))


def already_logged(recorded: Event) -> bool:
    """A window's single refusal: its line was written when it came (RefusalAudit)."""
    return recorded.kind == "audit" and recorded.data.get("refused") == 1


def _short(value: Any) -> Any:
    """A list (precheck failures, blocking pods) as comma-separated text; an empty one left
    out."""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or None
    return value
