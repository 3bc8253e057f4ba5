"""Whether a machine answers: heard from within the cluster's heartbeat timeout. A coordinator
that just started (or a replica that just took the lead) heard nothing while it was away, so
for one timeout after it began listening it declares no one silent: the agents get a whole
timeout to reach it, as they would have had it been up all along."""

from __future__ import annotations

import math


def listened_long_enough(now: float, listening_since: float, timeout: float) -> bool:
    """Whether the coordinator has listened for a whole heartbeat timeout, so that a silence
    means the machine's, not its own."""
    return now - listening_since >= timeout


def responding(was: bool, last_heard: float, now: float, timeout: float,
               listening_since: float) -> bool:
    """Whether a machine answers now. Heard within the timeout: yes. Otherwise no, unless the
    coordinator has not listened long enough to tell: then it stays as it was (one marked
    silent before a restart is not declared back without a heartbeat)."""
    if now - last_heard <= timeout:
        return True
    return was and not listened_long_enough(now, listening_since, timeout)


def silent_before(now: float, timeout: float, listening_since: float) -> float:
    """The last-heard time before which every machine can be judged silent now: none while
    the coordinator has not listened long enough (-inf), else one timeout ago."""
    if not listened_long_enough(now, listening_since, timeout):
        return -math.inf
    return now - timeout
