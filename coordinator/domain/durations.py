"""Durations as every text shows them (the notes the API serves, the CLI's tables): short
enough for a table cell. Apart, without imports, so that the CLI pays nothing for it."""

from __future__ import annotations


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
