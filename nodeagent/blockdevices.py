"""The node's block devices as its facts report them: each disk from /sys/block (loop, ram
and zram devices are not disks) with its size, kind, model, partitions and whatever uses it,
so that the operator sees which disks are free and items get them as ${machine.devices}. A
disk counts as in use when it or one of its partitions is mounted, is swap, or is held by
another block device (LVM, device-mapper, RAID): wiping it would take data with it.

Read under the host's root (Host.path), so tests point it at a tree of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodeagent.host import Host

NOT_DISKS = ("loop", "ram", "zram")
SECTOR_BYTES = 512  # /sys/block/*/size counts 512-byte sectors, whatever the disk's own


def block_devices(host: Host) -> list[dict[str, Any]]:
    """Every disk, by name; an empty list where /sys/block cannot be read."""
    sys_block = host.path("/sys/block")
    try:
        names = sorted(entry.name for entry in sys_block.iterdir())
    except OSError:
        return []
    mounts = _mounts(host)
    swaps = _swaps(host)
    return [_device(sys_block / name, mounts, swaps) for name in names
            if not name.startswith(NOT_DISKS)]


def _device(directory: Path, mounts: dict[str, list[str]],
            swaps: set[str]) -> dict[str, Any]:
    name = directory.name
    partitions = sorted(p.name for p in _entries(directory)
                        if p.name.startswith(name) and (p / "partition").exists())
    parts = [directory, *(directory / p for p in partitions)]
    used_by = [m for part in parts for m in mounts.get(_read(part / "dev") or "", [])]
    used_by = [*dict.fromkeys(used_by), *(f"swap ({p.name})" for p in parts if p.name in swaps)]
    holders = [h.name for part in parts for h in _entries(part / "holders")]
    size = _read(directory / "size")
    return {
        "name": name,
        "size_bytes": int(size) * SECTOR_BYTES if size and size.isdigit() else None,
        "rotational": _read(directory / "queue/rotational") == "1",
        "removable": _read(directory / "removable") == "1",
        "read_only": _read(directory / "ro") == "1",
        "model": _read(directory / "device/model") or None,
        "partitions": partitions,
        "mounts": used_by,
        "holders": holders,
        "in_use": bool(used_by or holders),
    }


def _mounts(host: Host) -> dict[str, list[str]]:
    """Mount points by the major:minor of the device mounted there (mountinfo's third
    field), which names the device whatever path it was mounted by."""
    found: dict[str, list[str]] = {}
    for line in (_read(host.path("/proc/self/mountinfo")) or "").splitlines():
        fields = line.split()
        if len(fields) > 4:
            found.setdefault(fields[2], []).append(fields[4])
    return found


def _swaps(host: Host) -> set[str]:
    """Names of the block devices in use as swap (/proc/swaps lists their /dev paths)."""
    lines = (_read(host.path("/proc/swaps")) or "").splitlines()[1:]
    return {line.split()[0].removeprefix("/dev/") for line in lines if line.strip()}


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
