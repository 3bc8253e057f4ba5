"""When a long-poll waits and when it is answered 304 (domain/assignments/etags.py): a generation of one
store state never matches another's, an agent ahead is answered at once, and agents from
before epochs (a bare generation as their tag) keep the rule they had."""

from __future__ import annotations

import pytest

from coordinator.domain.assignments.etags import Version, may_wait, new_epoch, not_modified

CURRENT = Version("e2", 7)


def test_the_tag_names_the_epoch_and_the_generation() -> None:
    assert CURRENT.tag == 'W/"e2-7"' and CURRENT.value == "e2-7"
    assert len({new_epoch() for _ in range(100)}) == 100


def test_only_an_agent_holding_the_current_generation_of_this_epoch_waits() -> None:
    assert may_wait(CURRENT, 7, ["e2-7"])
    assert not may_wait(CURRENT, 6, ["e2-6"])  # behind: something new
    assert not may_wait(CURRENT, 8, ["e2-8"])  # ahead: the store went back


def test_a_generation_reused_by_another_state_of_the_store_is_answered_at_once() -> None:
    """A restore of an older backup put generation 7 back with other content: the agent's 7
    was of epoch e1."""
    assert not may_wait(CURRENT, 7, ["e1-7"])
    assert not not_modified(CURRENT, ["e1-7"])


def test_a_poll_that_waited_for_nothing_is_not_modified_only_for_the_current_tag() -> None:
    assert not_modified(CURRENT, ["e2-7"])
    assert not not_modified(CURRENT, [])  # no tag: the assignment again, in full
    assert not not_modified(CURRENT, ["e2-6", "*"])


def test_an_agent_from_before_epochs_keeps_its_rule_but_is_answered_at_once_when_ahead() -> None:
    """Its bare generation names no epoch: it waits at the current one and gets 304 (it drops
    an answer of the generation it holds anyway); ahead of the machine it is answered at
    once, where it used to wait a whole poll."""
    assert may_wait(CURRENT, 7, ["7"]) and not_modified(CURRENT, ["7"])
    assert may_wait(CURRENT, 7, [])  # no tag at all: waits, then gets the assignment
    assert not may_wait(CURRENT, 9, ["9"])


# A long-poll as a table: the generation the agent says it holds (after), the tags it sends
# (If-None-Match), and whether it waits (may_wait) or, having waited for nothing, gets 304
# (not_modified). The machine is at generation 7 of epoch e2.
POLLS = [
    pytest.param(7, ["e2-7"], True, True, id="holds the current tag: waits, then 304"),
    pytest.param(6, ["e2-6"], False, False, id="one behind: answered at once with the news"),
    pytest.param(8, ["e2-8"], False, False, id="ahead, the store went back: answered at once"),
    pytest.param(7, ["e1-7"], False, False,
                 id="generation 7 of a restored store's older epoch: answered at once"),
    pytest.param(7, ["e1-7", "e2-7"], True, True, id="one of its tags is current: waits"),
    pytest.param(7, ["7"], True, True, id="an agent from before epochs at the current one"),
    pytest.param(9, ["9"], False, False, id="an agent from before epochs ahead: at once"),
    pytest.param(7, [], True, False, id="no tag: waits, then the whole assignment"),
    pytest.param(7, ["*"], True, False, id="a wildcard is no tag of ours: no 304"),
]


@pytest.mark.parametrize(("after", "held", "waits", "unmodified"), POLLS)
def test_long_poll_table(after: int, held: list[str], waits: bool, unmodified: bool) -> None:
    assert may_wait(CURRENT, after, held) is waits
    assert not_modified(CURRENT, held) is unmodified
