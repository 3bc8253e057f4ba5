"""systemd's sd_notify protocol: datagrams to $NOTIFY_SOCKET, so a Type=notify unit knows
when the agent is up, what it is doing, and that it is alive. A no-op outside systemd."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send one notification; False when not under systemd or the socket is gone (never
    raises: losing a status line must not stop the agent)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # Linux abstract namespace
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.sendto(message.encode(), address)
        except OSError:
            return False
    return True


def ready() -> bool:
    return notify("READY=1")


def status(text: str) -> bool:
    return notify(f"STATUS={text}")


def watchdog() -> bool:
    return notify("WATCHDOG=1")


def watchdog_interval() -> float | None:
    """How often to ping, in seconds: half of WATCHDOG_USEC (systemd's advice), or None when
    the watchdog is off or meant for another process (WATCHDOG_PID)."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        interval = int(usec) / 2_000_000
    except ValueError:
        return None
    return interval if interval > 0 else None
