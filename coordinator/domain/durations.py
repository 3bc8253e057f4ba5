"""Durations as every text shows them (the notes the API serves, the CLI's tables): short
enough for a table cell, and moments as they write them. Apart, importing only `time`, so
that the CLI pays nothing for it."""

from __future__ import annotations

import time


def duration(seconds: float | None) -> str:
    """3s, 4m05s, 2h10m; "-" for None."""
    if seconds is None:
        return "-"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def utc(moment: float) -> str:
    """A moment as every text writes it: 2026-11-28T10:30:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))
