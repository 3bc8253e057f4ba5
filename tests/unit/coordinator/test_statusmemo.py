"""A kept status (StatusMemo) answers exactly what the status computed from scratch answers,
whatever changed between calls: machines written, added, removed or renamed, state events
recorded, the spec or kube-system changed, the clock moving on (or going back) while machines
fail, drain or wait for their Nodes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain.model import (
    DrainStage,
    DrainStatus,
    ItemProgress,
    Machine,
    MachineState,
    NodeStatus,
)
from coordinator.domain.nodes.workloads import SystemWorkloads
from coordinator.domain.records import Event
from coordinator.domain.views.status import History, held_by, post_deploy, rollout, stages
from coordinator.domain.views.statusmemo import StatusMemo
from tests.support.builders import cluster, finish_phase, items, machine

PLAIN = cluster(manager=items("prepare", 1, "m") + items("deploy", 2, "m")
                + items("postdeploy", 1, "p"),
                worker=items("prepare", 2, "w") + items("deploy", 1, "w"))
KUBE = cluster(manager=items("prepare", 1, "m") + items("deploy", 2, "m"),
               worker=items("prepare", 2, "w") + items("deploy", 1, "w"),
               kubernetes={"kubeconfig": "/etc/coordinator/kubeconfig",
                           "nodeReadyTimeoutSeconds": 60},
               drain={"timeoutSeconds": 120})
HOSTS = ["a1", "b2", "c3", "d4", "e5"]
STATES = list(MachineState)


def rarely(draw: st.DrawFn) -> bool:
    """One in four: machines that depend on the clock are few, as they are in a fleet (and a
    status with one of them summed on every call could hide what a kept one gets wrong)."""
    return draw(st.integers(0, 3)) == 0


@st.composite
def machines(draw: st.DrawFn, spec_now: tuple[object, float], ident: str) -> Machine:
    """A machine of any state, with whatever an agent, a drain or a Node look left on it;
    times around now, some ahead of it."""
    spec, now = spec_now
    # Times a few apart, so that the clock passes some of them between calls.
    times = st.sampled_from([-300.0, -100.0, -5.0, 0.0, 3.0, 20.0]).map(lambda d: now + d)
    m = replace(machine(draw(st.sampled_from(HOSTS)), draw(st.sampled_from(["manager", "worker",
                                                                              None])),
                        approved=draw(st.booleans()), hard_failure=draw(st.booleans()),
                        state=draw(st.sampled_from(STATES)), created_at=draw(times)),
                id=ident, state_since=draw(times), responding=draw(st.booleans()))
    if m.role is not None and draw(st.booleans()):
        m = finish_phase(spec, m)  # type: ignore[arg-type]
    if rarely(draw):
        failed = draw(st.booleans())
        m = replace(m, progress=ItemProgress(
            item=draw(st.sampled_from(["wprepare-0", "mdeploy-1", "pdeploy-0", "wdeploy-0"])),
            attempt=draw(st.integers(1, 4)), status="failed" if failed else "running",
            error="exit status 1" if failed else "", updated_at=draw(times),
            failing_since=draw(times) if failed else None, gave_up=failed and draw(st.booleans())))
    if rarely(draw):
        m = replace(m, drain=DrainStatus(draw(st.sampled_from(list(DrainStage))), draw(times),
                                         uncordoned_at=draw(st.none() | times),
                                         step_error=draw(st.sampled_from(["", "refused"])),
                                         step_error_since=draw(times)))
    if rarely(draw):
        m = replace(m, node=NodeStatus(draw(times), name=draw(st.sampled_from(["", m.hostname])),
                                       ready=draw(st.booleans()),
                                       ready_since=draw(st.none() | times),
                                       unready_since=draw(st.none() | times)))
    return m


def fresh(spec, created: float, kept: dict[str, Machine], events: list[Event], now: float,
          system: SystemWorkloads | None) -> tuple:
    listed = sorted(kept.values(), key=lambda m: (m.hostname, m.id))
    history = History(events)
    counts: dict[str, int] = {}
    for m in listed:
        counts[m.state.value] = counts.get(m.state.value, 0) + 1
    found = stages(spec, created, listed, history, now, system)
    return (counts, post_deploy(spec, listed), found,
            rollout(spec, listed, history, now, held_by(spec, found)))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_kept_status_answers_as_one_computed_from_scratch(data: st.DataObject) -> None:
    memo, history, events = StatusMemo(), History(), []
    spec, now, created = data.draw(st.sampled_from([PLAIN, KUBE])), 1000.0, 900.0
    system: SystemWorkloads | None = None
    kept: dict[str, Machine] = {}
    for step in range(data.draw(st.integers(1, 25))):
        change = data.draw(st.sampled_from(["write", "write", "write", "remove", "event",
                                            "event", "later", "later", "earlier", "spec",
                                            "system", "nothing"]))
        if change == "write":
            ident = data.draw(st.sampled_from(["m1", "m2", "m3", "m4", "m5", "m6"]))
            kept[ident] = data.draw(machines((spec, now), ident))
        elif change == "remove" and kept:
            kept.pop(data.draw(st.sampled_from(sorted(kept))))
        elif change == "event" and kept:
            who = kept[data.draw(st.sampled_from(sorted(kept)))]
            new = [Event(time=data.draw(st.floats(now - 200, now)), cluster="edge", kind="state",
                         message="", machine=who.id, hostname=who.hostname, id=len(events) + 1,
                         data={"from": "Pending", "to": data.draw(st.sampled_from(STATES)).value})]
            events += new
            history.extend(new)
        elif change == "later":
            now += data.draw(st.sampled_from([0.5, 5.0, 45.0, 200.0]))
        elif change == "earlier":
            now -= 10.0
        elif change == "spec":
            spec = KUBE if spec is PLAIN else PLAIN
        elif change == "system":
            system = data.draw(st.sampled_from([None, SystemWorkloads(),
                                                SystemWorkloads(short=("deployment coredns",))]))
        listed = sorted(kept.values(), key=lambda m: (m.hostname, m.id))
        summary = memo.summary(spec, created, listed, history, now, system)
        assert (summary.counts, summary.post_deploy, summary.stages, summary.rollout) == \
            fresh(spec, created, kept, events, now, system), f"after step {step}: {change}"


def test_a_failure_reported_ahead_of_the_clock_is_summed_again_as_the_clock_moves() -> None:
    """A node whose clock runs ahead reports a failure since a time still to come: the stage
    fails since now until then, so the kept stage must move with the clock."""
    preparing = replace(machine("a1", state=MachineState.PREPARE), id="m1", state_since=900.0,
                        progress=ItemProgress(item="wprepare-0", attempt=2, status="failed",
                                              error="exit status 1", updated_at=990.0,
                                              failing_since=1010.0))
    memo = StatusMemo()
    for now in (1000.0, 1004.0, 1020.0):
        summary = memo.summary(PLAIN, 900.0, [preparing], History(), now)
        assert summary.stages == stages(PLAIN, 900.0, [preparing], History(), now)
        assert {s.name: s.since for s in summary.stages}["prepared"] == min(now, 1010.0)
