"""Maintenance windows (settings.upgrade.windows): upgrade steps start only inside one, and
outside every window the status says when the next opens. A step under way finishes: only
admissions into Upgrade wait.

A window opens on each of its days at its start, in its time zone (daylight saving time as
that zone keeps it), and stays open for its duration, past midnight if it runs that long:
{days: [sat, sun], start: "22:00", duration: 4h, timeZone: Europe/Berlin} is open from
Saturday 22:00 to Sunday 02:00 and from Sunday 22:00 to Monday 02:00, Berlin time. No
windows: always open."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from coordinator.domain.model import WEEKDAYS, UpgradeWindow

LOOK_AHEAD_DAYS = 8  # every weekly window opens within a week and a day


def _openings(window: UpgradeWindow, first: date, days: int) -> list[datetime]:
    """The window's openings on the days from first, as aware datetimes."""
    zone = ZoneInfo(window.time_zone)
    hour, minute = (int(part) for part in window.start.split(":"))
    wanted = set(window.days)
    found = []
    for offset in range(days):
        day = first + timedelta(days=offset)
        if WEEKDAYS[day.weekday()] in wanted:
            found.append(datetime.combine(day, time(hour, minute), tzinfo=zone))
    return found


def open_now(windows: Sequence[UpgradeWindow], now: float) -> bool:
    """Whether some window is open at now (no windows: always)."""
    if not windows:
        return True
    for window in windows:
        local = datetime.fromtimestamp(now, ZoneInfo(window.time_zone))
        span = timedelta(seconds=window.duration_seconds)
        back = span.days + 1  # openings this long ago may still be open
        for opening in _openings(window, local.date() - timedelta(days=back), back + 1):
            if opening.timestamp() <= now < opening.timestamp() + span.total_seconds():
                return True
    return False


def next_opening(windows: Sequence[UpgradeWindow], now: float) -> float | None:
    """When the next window opens after now (None: no windows)."""
    starts = [opening.timestamp() for window in windows
              for opening in _openings(window, datetime.fromtimestamp(
                  now, ZoneInfo(window.time_zone)).date(), LOOK_AHEAD_DAYS)
              if opening.timestamp() > now]
    return min(starts, default=None)
