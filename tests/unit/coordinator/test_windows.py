"""Maintenance windows and the failure budget (domain/rollout/windows.py, planner.upgrade_held):
no upgrade step starts outside a window or once too many upgrades failed, a step under way
finishes, and the status says what holds the rest and until when."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from coordinator.domain.model import (
    ClusterSpec,
    DrainStage,
    ItemProgress,
    Machine,
    MachineState,
    UpgradeWindow,
)
from coordinator.domain.rollout.planner import plan, upgrade_held
from coordinator.domain.rollout.steps import History
from coordinator.domain.rollout.windows import next_opening, open_now
from coordinator.domain.views.status import held_by, stages
from tests.support.builders import (
    KUBE_ACCESS,
    at_release,
    cluster,
    drained,
    finish_phase,
    machine,
    upgraded_cluster,
)

BERLIN = ZoneInfo("Europe/Berlin")
WEEKEND_NIGHTS = UpgradeWindow.model_validate(
    {"days": ["sat", "sun"], "start": "22:00", "duration": "4h", "timeZone": "Europe/Berlin"})


def berlin(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN).timestamp()


@pytest.mark.parametrize(("moment", "is_open"), [
    ("2026-11-28 21:59", False),  # Saturday, before it opens
    ("2026-11-28 22:00", True),
    ("2026-11-29 01:59", True),  # past midnight, Saturday's still
    ("2026-11-29 02:00", False),
    ("2026-11-29 23:30", True),  # Sunday's
    ("2026-11-30 01:00", True),  # Monday morning: Sunday's
    ("2026-11-30 22:30", False),  # Monday evening: no window
    ("2026-11-27 23:00", False),  # Friday
])
def test_a_window_is_open_on_its_days_from_its_start_for_its_duration(moment: str,
                                                                      is_open: bool) -> None:
    assert open_now([WEEKEND_NIGHTS], berlin(moment)) is is_open


def test_the_next_window_opens_at_its_local_start_across_daylight_saving_time() -> None:
    assert next_opening([WEEKEND_NIGHTS], berlin("2026-11-27 12:00")) == berlin("2026-11-28 22:00")
    # Clocks in Berlin go forward on 2026-03-29: the window still opens at 22:00 local.
    assert next_opening([WEEKEND_NIGHTS], berlin("2026-03-28 23:00")) == berlin("2026-03-29 22:00")
    utc_daily = UpgradeWindow.model_validate({"start": "03:00", "duration": "30m"})
    assert next_opening([WEEKEND_NIGHTS, utc_daily], berlin("2026-11-27 12:00")) == \
        datetime(2026, 11, 28, 3, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    assert open_now([], 0.0) and next_opening([], 0.0) is None


@pytest.mark.parametrize(("window", "field", "said"), [
    ({"start": "24:00", "duration": "1h"}, "start", "must be a time of day as HH:MM"),
    ({"start": "22:00", "duration": "0m"}, "duration", "more than nothing and at most 168h"),
    ({"start": "22:00", "duration": "200h"}, "duration", "at most 168h"),
    ({"start": "22:00", "duration": "4 hours"}, "duration", "such as 4h, 90m or 1h30m"),
    ({"start": "22:00", "duration": "1h", "timeZone": "Mars/Olympus"}, "timeZone",
     "not a time zone this host knows"),
    ({"start": "22:00", "duration": "1h", "days": []}, "days", "at least 1"),
])
def test_a_bad_window_is_refused_naming_its_field(window: dict[str, object], field: str,
                                                  said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        cluster(upgrade={"windows": [window]})
    [error] = refused.value.errors()
    assert error["loc"][-1] == field and said in error["msg"]


def spec_with(**upgrade: object) -> ClusterSpec:
    return upgraded_cluster(cluster(**KUBE_ACCESS), **upgrade)


def ready(hostname: str, role: str = "worker") -> Machine:
    return replace(machine(hostname, role, state=MachineState.READY, release="1.0.0"),
                   managers=("m1",))


def test_no_upgrade_starts_outside_a_window_and_one_under_way_finishes() -> None:
    spec = spec_with(windows=[WEEKEND_NIGHTS])
    fleet = [ready("m1", "manager")]
    assert plan(spec, fleet, berlin("2026-11-27 23:00")) == []
    assert [d.to_state for d in plan(spec, fleet, berlin("2026-11-28 23:00"))] == [
        MachineState.UPGRADE]
    upgrading = drained(finish_phase(spec, replace(fleet[0], state=MachineState.UPGRADE)),
                        DrainStage.NODE_READY)
    finishing = plan(spec, [upgrading, ready("w1")], berlin("2026-11-30 03:00"))
    assert [(d.hostname, d.to_state) for d in finishing] == [("m1", MachineState.READY)]
    assert plan(spec, fleet) != []  # no clock (the dry run): windows not consulted


def test_the_failure_budget_stops_admissions_naming_the_machines_that_failed() -> None:
    spec = spec_with(max_failed_upgrades=1)
    failed = [replace(ready(h), state=MachineState.UPGRADE, progress=ItemProgress(
        "upgrade-worker-2.0.0", 3, "failed", gave_up=True)) for h in ("w1", "w2")]
    fleet = [at_release(spec, ready("m1", "manager")), *failed, ready("w3")]
    assert [d for d in plan(spec, fleet, 0.0) if d.to_state is MachineState.UPGRADE] == []
    assert upgrade_held(spec, fleet, 0.0) == (
        "upgrades stopped: the upgrade of 2 machines failed, more than "
        "settings.upgrade.maxFailedUpgrades (1): w1, w2 (fix and retry them: coordinator "
        "machines retry MACHINE)")
    within = spec_with(max_failed_upgrades=2)
    assert [d.hostname for d in plan(within, fleet, 0.0)
            if d.to_state is MachineState.UPGRADE] == ["w3"]


def test_the_status_says_the_upgrade_waits_for_the_next_window() -> None:
    spec = spec_with(windows=[WEEKEND_NIGHTS])
    fleet = [ready("m1", "manager"), ready("w1")]
    now = berlin("2026-11-27 12:00")
    found = stages(spec, 0.0, fleet, History([]), now)
    ready_stage = next(s for s in found if s.name == "ready")
    assert ready_stage.state == "waiting"
    assert ready_stage.message == (
        "2 of 2 Ready; outside the maintenance windows: waiting for the window at "
        "2026-11-28T21:00:00Z (settings.upgrade.windows): m1, w1 to upgrade to release 2.0.0")
    assert held_by(spec, found) == ("stalled: outside the maintenance windows "
                                    "(settings.upgrade.windows)")
