"""Capped exponential backoff with "equal jitter" (half the step fixed, half random): retries
from many nodes never hammer in lockstep, yet none waits less than half the intended step,
which full jitter (anywhere in [0, step]) would allow. Used for item retries and reconnects."""

from __future__ import annotations

import random

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
