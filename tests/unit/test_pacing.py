"""When the agent's polls go out where they count as its heartbeat (nodeagent/pacing.py):
never later than the interval, and spread so that polls answered together do not come back
together."""

from __future__ import annotations

import random

from nodeagent.pacing import PollPace


def test_polls_wait_a_jittered_share_of_the_interval_never_past_it() -> None:
    pace = PollPace(random.Random(7))
    pace.wait(10)  # the first is scattered over the whole interval
    waits = [pace.wait(10) for _ in range(1000)]
    assert 7.5 <= min(waits) < 7.6 and 9.9 < max(waits) <= 10
    assert len({round(w, 2) for w in waits}) > 200  # spread, not a handful of values


def test_the_first_poll_and_one_after_a_stall_or_an_outage_go_anywhere_in_the_interval() -> None:
    """A fleet registered or reconnected together, or answered together after a stall,
    scatters over one interval instead of drifting apart a quarter interval at a time."""
    rand = random.Random(3)
    firsts = [PollPace(rand).wait(10) for _ in range(1000)]
    assert min(firsts) < 0.5 and max(firsts) > 9.5
    assert sum(w < 5 for w in firsts) > 400  # uniform: about half in the first half

    pace = PollPace(rand)
    pace.wait(10)
    pace.answered(10.5, 10)  # on time (within a second): the next stays in 75-100 %
    assert [pace.wait(10) >= 7.5 for _ in range(100)] == [True] * 100
    late = []
    for _ in range(500):
        pace.answered(12, 10)  # two seconds late: the coordinator stalled
        late.append(pace.wait(10))
        assert pace.wait(10) >= 7.5  # only the one after the late answer is scattered
    assert min(late) < 1 and sum(w < 7.5 for w in late) > 300
    after_outage = []
    for _ in range(500):
        pace.unanswered()  # an outage: the poll after it is scattered too
        after_outage.append(pace.wait(10))
    assert min(after_outage) < 1 and sum(w < 7.5 for w in after_outage) > 300
