"""Short human texts about machines and times, shared by the CLI's plain and rich output."""

from __future__ import annotations

import time
from typing import Any


def duration(seconds: float | None) -> str:
    """3s, 4m05s, 2h10m: short enough for a table cell."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def clock(timestamp: float | None) -> str:
    return "-" if timestamp is None else time.strftime("%H:%M:%S", time.localtime(timestamp))


def machine_note(machine: dict[str, Any]) -> str:
    """Why a machine is where it is, in a few words."""
    step = machine.get("step") or {}
    if machine["precheck_failures"]:
        text = "prechecks failed: " + "; ".join(machine["precheck_failures"])
    elif machine["state"] == "Pending" and not machine["approved"]:
        text = "waiting for approval"
    elif machine["state"] == "Pending" and not machine["role"]:
        text = "approved; waiting for a role"
    elif step.get("status") == "failed":
        retry = step.get("next_retry_in")
        text = (f"failing for {duration(step.get('failing_for'))}"
                + (f", retry in {duration(retry)}" if retry is not None else "")
                + f": {step.get('error', '')}")
    elif step.get("status") == "done" and machine["state"] == "Prepare":
        text = "prepared; waiting for a deploy slot"
    else:
        text = ""
    if not machine["responding"]:
        text = "NOT RESPONDING " + text
    return text.strip()
