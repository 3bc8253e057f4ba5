"""When a machine counts as not responding, given how long the coordinator has listened."""

from __future__ import annotations

import math

from coordinator.domain.liveness import responding, silent_before

TIMEOUT = 30.0
START = 1_000.0  # when the coordinator (or this leader) began listening


def test_a_machine_last_heard_long_before_a_start_is_not_declared_silent_for_one_timeout() -> None:
    long_ago = START - 3_600
    assert responding(True, long_ago, START + 3, TIMEOUT, START)
    assert responding(True, long_ago, START + TIMEOUT - 0.1, TIMEOUT, START)
    assert not responding(True, long_ago, START + TIMEOUT, TIMEOUT, START)


def test_a_heartbeat_within_the_timeout_means_responding_at_any_time() -> None:
    assert responding(False, START + 1, START + 2, TIMEOUT, START)
    assert responding(False, START + 100, START + 100 + TIMEOUT, TIMEOUT, START)
    assert not responding(True, START + 100, START + 100.1 + TIMEOUT, TIMEOUT, START)


def test_one_marked_silent_before_the_start_stays_so_until_it_is_heard() -> None:
    assert not responding(False, START - 3_600, START + 1, TIMEOUT, START)


def test_no_one_is_judged_silent_before_the_coordinator_listened_a_whole_timeout() -> None:
    assert silent_before(START + 5, TIMEOUT, START) == -math.inf
    assert silent_before(START + TIMEOUT + 5, TIMEOUT, START) == START + 5
