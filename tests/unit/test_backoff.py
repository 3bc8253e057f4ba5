"""Bounds of the capped, equal-jitter exponential backoff."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.backoff import Reconnect, delay

attempts = st.integers(min_value=1, max_value=100_000)
seconds = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)
draws = st.floats(min_value=0.0, max_value=1.0)


@given(attempts, seconds, seconds, draws)
def test_delay_is_between_half_the_step_and_the_step(
    attempt: int, base: float, cap: float, draw: float
) -> None:
    step = min(cap, base * 2.0 ** min(attempt - 1, 1000))
    wait = delay(attempt, base, cap, draw)
    assert step / 2 <= wait <= step <= cap


@given(attempts, seconds, seconds, st.integers())
def test_a_generator_gives_the_same_bounds(attempt: int, base: float, cap: float,
                                           seed: int) -> None:
    wait = delay(attempt, base, cap, random.Random(seed))
    assert min(base, cap) / 2 <= wait <= cap


@given(attempts, seconds, seconds, draws)
def test_for_a_fixed_draw_the_delay_never_shrinks(
    attempt: int, base: float, cap: float, draw: float
) -> None:
    assert delay(attempt + 1, base, cap, draw) >= delay(attempt, base, cap, draw)


def test_the_step_doubles_until_the_cap() -> None:
    assert [delay(n, 1.0, 10.0, 1.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert [delay(n, 1.0, 10.0, 0.0) for n in range(1, 7)] == [0.5, 1, 2, 4, 5, 5]


def test_a_huge_attempt_number_does_not_overflow() -> None:
    assert delay(10**9, 1.0, 60.0, 1.0) == 60.0


def test_jitter_spreads_retries() -> None:
    rand = random.Random(1)
    assert len({delay(5, 1.0, 60.0, rand) for _ in range(20)}) == 20


@pytest.mark.parametrize(("attempt", "base", "cap", "draw"),
                         [(0, 1.0, 1.0, 0.5), (1, 0.0, 1.0, 0.5), (1, 1.0, -1.0, 0.5),
                          (1, 1.0, 1.0, 1.5)])
def test_nonsense_arguments_are_refused(attempt: int, base: float, cap: float,
                                        draw: float) -> None:
    with pytest.raises(ValueError):
        delay(attempt, base, cap, draw)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def longest_waits(reconnect: Reconnect, clock: Clock, failures: int) -> list[float]:
    """The waits (at the longest draw) after so many failures, each waited out."""
    waits = []
    for _ in range(failures):
        waits.append(reconnect.failed())
        clock.now += waits[-1]
    return waits


def test_while_the_coordinator_answered_less_than_a_minute_ago_no_wait_exceeds_two_seconds() -> None:
    clock = Clock()
    reconnect = Reconnect(1.0, clock)
    assert longest_waits(reconnect, clock, 6) == [0.5, 1, 2, 2, 2, 2]
    assert reconnect.failures == 6


def test_a_longer_outage_backs_off_to_thirty_seconds() -> None:
    clock = Clock()
    reconnect = Reconnect(1.0, clock)
    waits = longest_waits(reconnect, clock, 40)
    assert max(waits) == 30 and waits[-1] == 30 and sum(waits[:-2]) >= 60


def test_any_answer_starts_the_next_outage_from_the_first_short_wait() -> None:
    """A long-poll cut by a restart follows a heartbeat or poll answered moments before."""
    clock = Clock()
    reconnect = Reconnect(1.0, clock)
    longest_waits(reconnect, clock, 40)
    reconnect.answered()
    assert (reconnect.failures, reconnect.failed()) == (0, 0.5)


def test_a_coordinator_saying_429_is_backed_off_from_at_once() -> None:
    clock = Clock()
    reconnect = Reconnect(1.0, clock)
    assert [reconnect.failed(busy=True) for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
