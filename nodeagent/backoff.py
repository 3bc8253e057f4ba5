"""Capped exponential backoff with "equal jitter" (half the step fixed, half random): retries
from many nodes never hammer in lockstep, yet none waits less than half the intended step,
which full jitter (anywhere in [0, step]) would allow. Used for item retries and, through
Reconnect, to reach the coordinator again."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

# 2**62 times any sane base already exceeds every cap; bounding the exponent keeps the float
# multiplication from overflowing after very many attempts.
_MAX_DOUBLINGS = 62


def delay(attempt: int, base: float, cap: float, rand: random.Random | float) -> float:
    """Seconds to wait after the attempt-th failure (attempt >= 1), in [step/2, step] where
    step = min(cap, base * 2**(attempt-1)). rand is a generator, or a fixed draw in [0, 1]
    (0 gives the shortest wait, 1 the longest) for callers that want determinism."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    if base <= 0 or cap <= 0:
        raise ValueError(f"base and cap must be positive, got base={base} cap={cap}")
    draw = rand.random() if isinstance(rand, random.Random) else rand
    if not 0.0 <= draw <= 1.0:
        raise ValueError(f"a fixed draw must be in [0, 1], got {draw}")
    step = min(cap, base * 2 ** min(attempt - 1, _MAX_DOUBLINGS))
    return step / 2 + draw * step / 2


# How an agent waits to reach its coordinator again. See Reconnect.
RECONNECT_FIRST = 0.5  # the first wait's step: 0.25-0.5 s
RECONNECT_SOON = 2.0  # the longest step while the outage is young: 1-2 s
RECONNECT_CAP = 30.0  # the longest step once it is not: 15-30 s
YOUNG_OUTAGE_SECONDS = 60.0


class Reconnect:
    """When to call the coordinator again after a call did not reach it, for one agent (all
    its calls share it: the long-poll, registration, reports).

    What counts is how long ago the coordinator last answered any call, a heartbeat's too,
    not how often this one call failed: a long-poll cut by a coordinator restart follows a
    poll or heartbeat answered moments before, so its failures start again from the first,
    short wait. For the first YOUNG_OUTAGE_SECONDS of an outage (a restart, a failover, a
    reboot) the step stops growing at RECONNECT_SOON, so every agent is back on its
    long-poll within about 2 s of the coordinator answering again; only a longer outage
    backs off towards RECONNECT_CAP, which spares a coordinator that is down for good.

    The trade-off: with equal jitter the agents' next attempts are spread evenly over the
    last step, so after a young outage 10,000 agents reach the coordinator over ~1-2 s
    (thousands of TLS handshakes a second) rather than over up to 30 s, and until it
    answers each agent costs it a refused connection every 1-2 s (docs/benchmarks.md has
    the figures). Faster probing (a retry at once after a cut) would bring every agent of a
    fleet cut at the same instant to the restarting coordinator in that same instant, so
    none is made."""

    def __init__(self, rand: random.Random | float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._rand = rand
        self._clock = clock
        self._answered_at = clock()  # the agent's start: the first outage is young as well
        self.failures = 0  # calls that failed to reach the coordinator since it last answered

    def answered(self) -> None:
        """The coordinator answered a call (an HTTP answer, not a 5xx nor a 429): the
        outage, if any, is over."""
        self._answered_at = self._clock()
        self.failures = 0

    def silent_for(self) -> float:
        """Seconds since the coordinator last answered (or since the agent started)."""
        return self._clock() - self._answered_at

    def failed(self, busy: bool = False) -> float:
        """A call did not reach the coordinator (busy: it said 429, too many at once, which
        no outage explains): the seconds to wait before the next."""
        self.failures += 1
        young = not busy and self._clock() - self._answered_at < YOUNG_OUTAGE_SECONDS
        return delay(self.failures, RECONNECT_FIRST,
                     RECONNECT_SOON if young else RECONNECT_CAP, self._rand)
