"""History answers from an index of each machine's first entry per state: it must answer
exactly as scanning the machine's state events oldest first would, whatever the events
(repeated states, times out of order, other machines', unknown states, non-state events)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain.model import MachineState
from coordinator.domain.records import Event
from coordinator.domain.views.status import History
from tests.support.builders import machine

STATES = [s.value for s in MachineState] + ["Elsewhere"]
events = st.lists(st.builds(
    lambda time, who, kind, to: Event(time=time, cluster="c", kind=kind, message="",
                                      machine=who, hostname=who, data={"to": to} if to else {}),
    st.floats(0, 100), st.sampled_from(["m1", "m2", ""]), st.sampled_from(["state", "item"]),
    st.sampled_from([*STATES, ""])), max_size=30)


def scanned(stream: list[Event], machine_id: str, state: MachineState, since: float,
            wanted: set[str]) -> float | None:
    """The answer by a plain scan of the events, as History answered before it kept an index."""
    found = next((e.time for e in stream if e.kind == "state" and e.machine == machine_id
                  and e.data.get("to") in wanted), None)
    return since if found is None and state.value in wanted else found


@settings(max_examples=300, deadline=None)
@given(events, st.sets(st.sampled_from(list(MachineState))), st.sampled_from(list(MachineState)))
def test_first_entry_is_the_first_matching_state_event(stream: list[Event],
                                                       states: set[MachineState],
                                                       state: MachineState) -> None:
    m = replace(machine("m1"), id="m1", state=state, state_since=42.0)
    wanted = {s.value for s in states}
    assert History(stream).first_entry(m, states) == scanned(stream, "m1", state, 42.0, wanted)
