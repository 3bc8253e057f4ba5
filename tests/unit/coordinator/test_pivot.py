"""The pivot's state machine: run again after an interruption anywhere it resumes from the
step recorded, and an abort from any step before done leaves the old coordinator whole."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.transfer.pivot import (
    ORDER,
    Pivot,
    Step,
    abort,
    advance,
    begin,
    receivable,
    refresh_due,
    refused_change,
    run,
    unverified,
)
from nodeagent.wire.validation import InvalidDocument

TARGET = "https://new.example:8080"
CA = "the target's CA (PEM)"
SCHEMA = 2


class Crash(Exception):
    """A coordinator killed: the call did not return (it may or may not have taken effect)."""


@dataclass
class World:
    """Two coordinators in memory: the old one's recorded pivot and move target, the
    target's imports, and where the agents are. `crash_at` kills the n-th call, before or
    after its effect (`after`)."""

    recorded: Pivot | None = None
    move_target: str | None = None
    imports: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # the target's tables of another state
    agents_on_target: bool = False
    calls: int = 0
    crash_at: int | None = None
    after: bool = False
    clock: itertools.count = field(default_factory=lambda: itertools.count(100))

    def _call(self, effect):  # type: ignore[no-untyped-def]
        self.calls += 1
        crash = self.calls == self.crash_at
        if crash and not self.after:
            raise Crash
        result = effect()
        if crash:
            raise Crash
        return result

    def check(self, pivot_id: str | None) -> None:
        held = (self.imports[0], "https://old") if self.imports else None
        self._call(lambda: receivable(held, self.foreign, pivot_id, SCHEMA, SCHEMA))

    def begin(self, to_url: str, ca_pem: str | None) -> Pivot:
        def effect() -> Pivot:
            self.recorded = begin(self.recorded, to_url, ca_pem, next(self.clock))
            return self.recorded
        return self._call(effect)

    def current(self) -> Pivot | None:
        return self._call(lambda: self.recorded)

    def record(self, pivot: Pivot, step: Step) -> Pivot:
        def effect() -> Pivot:
            assert self.recorded is not None and self.recorded.id == pivot.id
            self.recorded = advance(self.recorded, step, next(self.clock))
            return self.recorded
        return self._call(effect)

    def copy(self, pivot: Pivot) -> None:
        def effect() -> None:
            assert refused_change(self.recorded), "copied while the old one takes changes"
            receivable(None, self.foreign, pivot.id, None, SCHEMA)
            if not self.imports:
                self.imports.append(pivot.id)
            elif self.imports != [pivot.id]:
                raise Conflict("the target holds another coordinator's state")
        self._call(effect)

    def announce(self, pivot: Pivot) -> None:
        def effect() -> None:
            assert self.imports == [pivot.id], "announced before the target holds the state"
            self.move_target = pivot.to_url
            self.agents_on_target = True
        self._call(effect)

    def settle(self, pivot: Pivot) -> None:
        self._call(lambda: None)

    def withdraw(self, pivot: Pivot) -> None:
        def effect() -> None:
            self.move_target = None
            self.agents_on_target = False
        self._call(effect)

    def rollback(self, pivot: Pivot) -> None:
        def effect() -> None:
            self.recorded = None
        self._call(effect)


def _calls_of_a_whole_pivot() -> int:
    world = World()
    run(world, TARGET, CA)
    return world.calls


def _until_done(world: World) -> int:
    """Run again until the pivot completes, as an operator would; how many runs it took."""
    for attempt in range(1, 10):
        try:
            run(world, TARGET, CA)
            return attempt
        except Crash:
            world.crash_at = None
    raise AssertionError("never completed")


def test_a_pivot_goes_through_every_step_in_order() -> None:
    seen: list[Step] = []
    world = World()
    done = run(world, TARGET, CA, lambda pivot, step: seen.append(step))
    assert seen == list(ORDER[1:])
    assert done.step is Step.DONE and world.imports == [done.id]
    assert world.move_target == TARGET and world.agents_on_target
    assert "moved to " + TARGET in (refused_change(done) or "")


@pytest.mark.parametrize("after", [False, True], ids=["before-effect", "after-effect"])
def test_an_interruption_at_any_call_is_resumed_by_running_again(after: bool) -> None:
    for crash_at in range(1, _calls_of_a_whole_pivot() + 1):
        world = World(crash_at=crash_at, after=after)
        assert _until_done(world) == 2
        assert world.recorded is not None and world.recorded.step is Step.DONE
        assert len(world.imports) == 1 and world.imports == [world.recorded.id]
        assert world.move_target == TARGET


@pytest.mark.parametrize("step", ORDER[:-1])
def test_a_pivot_resumes_from_each_recorded_step(step: Step) -> None:
    world = World()
    pivot = begin(None, TARGET, CA, 1.0)
    for reached in ORDER[1:ORDER.index(step) + 1]:
        pivot = advance(pivot, reached, 2.0)
        if reached is Step.COPIED:
            world.imports.append(pivot.id)
        if reached is Step.ANNOUNCED:
            world.move_target = TARGET
    world.recorded = pivot
    done = run(world, TARGET, CA)
    assert done.id == pivot.id and done.step is Step.DONE and world.imports == [pivot.id]


@pytest.mark.parametrize("crash_at", range(1, 9))
@pytest.mark.parametrize("after", [False, True], ids=["before-effect", "after-effect"])
def test_an_abort_from_any_step_before_done_leaves_the_old_coordinator_whole(
        crash_at: int, after: bool) -> None:
    world = World(crash_at=crash_at, after=after)
    with pytest.raises(Crash):
        run(world, TARGET, CA)
    world.crash_at = None
    if world.recorded is None or world.recorded.done:
        return  # crashed before anything was recorded, or after the end
    for attempt in range(3):  # an abort interrupted is run again too
        world.crash_at, world.calls = (2 if attempt == 0 else None), 0
        try:
            abort(world)
            break
        except Crash:
            continue
        except Conflict as exc:  # the interrupted abort had finished its work
            assert attempt > 0 and "nothing to abort" in str(exc)
            break
    assert world.recorded is None and world.move_target is None
    assert not world.agents_on_target
    assert refused_change(world.recorded) is None


def test_a_target_holding_another_state_is_refused_before_anything_is_begun() -> None:
    world = World(foreign=["clusters", "machines"])
    with pytest.raises(Conflict, match=r"already holds a coordinator's state \(rows in "
                                       r"clusters, machines\): a pivot goes to a coordinator "
                                       r"that holds no state: set up a new one \(`coordinator "
                                       r"init --data-dir NEW_DIR"):
        run(world, TARGET, CA)
    assert world.recorded is None and world.imports == []  # nothing begun, nothing frozen


def test_a_target_takes_no_state_but_its_own_pivot_and_nothing_newer_than_it_reads() -> None:
    assert receivable(None, [], None, 2, 2) is False  # empty: it takes the state
    assert receivable(("pv-1", "https://old"), ["machines"], "pv-1", 2, 2) is True  # held
    with pytest.raises(Conflict, match=r"holds the state of pivot pv-1 \(from https://old\): "
                                       "a pivot goes to a coordinator that holds no state"):
        receivable(("pv-1", "https://old"), ["machines"], "pv-2", 2, 2)
    with pytest.raises(Conflict, match=r"schema version 3, newer than the target reads "
                                       r"\(2\): upgrade the target"):
        receivable(None, [], None, 3, 2)


def test_abort_is_refused_once_done_and_when_nothing_is_under_way() -> None:
    world = World()
    with pytest.raises(Conflict, match="nothing to abort"):
        abort(world)
    run(world, TARGET, CA)
    with pytest.raises(Conflict, match="is done"):
        abort(world)


def test_another_target_is_refused_while_a_pivot_is_under_way_or_done() -> None:
    pivot = begin(None, TARGET, CA, 1.0)
    assert begin(pivot, TARGET + "/", CA, 2.0) == pivot
    with pytest.raises(Conflict, match="--abort"):
        begin(pivot, "https://other.example:8080", CA, 2.0)
    done = pivot
    for step in ORDER[1:]:
        done = advance(done, step, 3.0)
    with pytest.raises(Conflict, match="has moved there"):
        begin(done, "https://other.example:8080", CA, 4.0)


def test_steps_are_taken_in_order_and_a_repeated_one_changes_nothing() -> None:
    pivot = begin(None, TARGET, CA, 1.0)
    with pytest.raises(Conflict, match="next step is frozen, not copied"):
        advance(pivot, Step.COPIED, 2.0)
    frozen = advance(pivot, Step.FROZEN, 2.0)
    assert advance(frozen, Step.FROZEN, 3.0) is frozen


def test_changes_are_refused_from_frozen_naming_the_pivot_then_the_new_url() -> None:
    pivot = begin(None, TARGET, CA, 1.0)
    assert refused_change(pivot) is None
    frozen = advance(pivot, Step.FROZEN, 2.0)
    assert pivot.id in (refused_change(frozen) or "")
    assert "--abort" in (refused_change(frozen) or "")


def test_the_copy_is_refreshed_about_every_interval_once_done() -> None:
    pivot = begin(None, TARGET, CA, 1.0)
    assert not refresh_due(pivot, 100.0, 60.0)
    for step in ORDER[1:]:
        pivot = advance(pivot, step, 2.0)
    assert refresh_due(pivot, 3.0, 60.0)
    pivot = Pivot.from_json({**pivot.to_json(), "refreshed_at": 10.0})
    assert not refresh_due(pivot, 69.0, 60.0) and refresh_due(pivot, 70.0, 60.0)


@pytest.mark.parametrize(("to_url", "ca", "fields"), [
    ("http://new.example:8080", CA, ["to"]),
    (TARGET, None, ["caPem"]),
    ("http://new.example:8080", None, ["to", "caPem"]),
], ids=["plain-http", "no-ca", "neither"])
def test_a_target_that_is_not_https_with_its_ca_is_refused_naming_the_field(
        to_url: str, ca: str | None, fields: list[str]) -> None:
    with pytest.raises(InvalidDocument) as refused:
        begin(None, to_url, ca, 1.0)
    assert [problem.path for problem in refused.value.problems] == fields
    assert "must be https:// with its CA" in str(refused.value)


def test_a_pivot_recorded_without_a_ca_is_not_refreshed_until_run_again_with_one() -> None:
    """A pivot an older version began with no CA: nothing may be sent to its target (whoever
    answers there would get the token) until `coordinator pivot --to-ca` gives the CA."""
    pivot = begin(None, TARGET, CA, 1.0)
    for step in ORDER[1:]:
        pivot = advance(pivot, step, 2.0)
    unpinned = Pivot.from_json({**pivot.to_json(), "ca_pem": None})
    assert f"give its CA with `coordinator pivot --to {TARGET} --to-ca FILE`" in (
        unverified(unpinned) or "")
    pinned = begin(unpinned, TARGET, CA, 3.0)
    assert pinned == Pivot.from_json({**unpinned.to_json(), "ca_pem": CA})
    assert unverified(pinned) is None
    with pytest.raises(Conflict, match="another CA certificate"):
        begin(pinned, TARGET, "another CA", 4.0)
    plain = Pivot.from_json({**pivot.to_json(), "to_url": "http://new.example:8080"})
    assert "plain HTTP" in (unverified(plain) or "")
