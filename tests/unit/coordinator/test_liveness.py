"""When a machine counts as not responding, given how long the coordinator has listened."""

from __future__ import annotations

import math

import pytest

from coordinator.domain.reconcile.liveness import responding, silent_before

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


# Whether a machine answers, as a table: whether it answered at the last look (was), when it
# was last heard and when it is asked, relative to START (when the coordinator began
# listening). A timeout is 30 s.
LIVENESS = [
    pytest.param(False, 1, 2, True, id="a heartbeat within the timeout: answers"),
    pytest.param(True, 100, 100 + TIMEOUT, True, id="heard exactly one timeout ago: answers"),
    pytest.param(True, 100, 100.1 + TIMEOUT, False, id="silent past the timeout: does not"),
    pytest.param(True, -3_600, 3, True,
                 id="silent since before a restart: given a whole timeout to reach us"),
    pytest.param(True, -3_600, TIMEOUT - 0.1, True, id="still within that first timeout"),
    pytest.param(True, -3_600, TIMEOUT, False, id="a whole timeout listened: silent"),
    pytest.param(False, -3_600, 1, False,
                 id="marked silent before the restart: not declared back without a heartbeat"),
]


@pytest.mark.parametrize(("was", "heard", "asked", "answers"), LIVENESS)
def test_responding_table(was: bool, heard: float, asked: float, answers: bool) -> None:
    assert responding(was, START + heard, START + asked, TIMEOUT, START) is answers
