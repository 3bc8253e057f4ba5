"""The node's disks as its facts report them: this machine's own /sys/block through
`nodeagent facts`, and a sysfs tree of our own for what uses a disk (a mount by device
number, swap, an LVM or RAID holder, a partition's as much as the disk's)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from nodeagent.blockdevices import block_devices
from nodeagent.host import Host
from tests.support.agent import NODEAGENT

FIELDS = {"name": str, "size_bytes": int, "rotational": bool, "removable": bool,
          "read_only": bool, "partitions": list, "mounts": list, "holders": list, "in_use": bool}


def test_the_facts_list_this_machines_disks_and_no_loop_ram_or_zram_device() -> None:
    facts = json.loads(subprocess.run([NODEAGENT, "facts", "--output", "json"], check=True,
                                      capture_output=True, text=True, timeout=60).stdout)
    disks = [p.name for p in Path("/sys/block").iterdir()
             if not p.name.startswith(("loop", "ram", "zram"))]
    assert sorted(d["name"] for d in facts["block_devices"]) == sorted(disks)
    for device in facts["block_devices"]:
        assert {name: type(device[name]) for name in FIELDS} == FIELDS, device
        assert device["model"] is None or isinstance(device["model"], str)
        assert device["in_use"] == bool(device["mounts"] or device["holders"])
    text = subprocess.run([NODEAGENT, "facts"], check=True, capture_output=True, text=True,
                          timeout=60).stdout
    assert "block devices:" in text


def disk(root: Path, name: str, dev: str, *partitions: tuple[str, str], removable: bool = False,
         holders: dict[str, list[str]] | None = None) -> None:
    base = root / "sys/block" / name
    (base / "queue").mkdir(parents=True)
    (base / "device").mkdir()
    for path, text in {"dev": dev, "size": "2097152", "removable": str(int(removable)),
                       "ro": "0", "queue/rotational": "1", "device/model": "QEMU HARDDISK  \n"
                       }.items():
        (base / path).write_text(text + "\n")
    for part, part_dev in partitions:
        (base / part).mkdir()
        (base / part / "partition").write_text("1\n")
        (base / part / "dev").write_text(part_dev + "\n")
    for owner, held_by in (holders or {}).items():
        for holder in held_by:
            (base / owner / "holders" / holder).mkdir(parents=True)


def test_a_disk_is_in_use_when_it_or_a_partition_is_mounted_swap_or_held(tmp_path: Path) -> None:
    disk(tmp_path, "sda", "8:0", ("sda1", "8:1"), ("sda2", "8:2"))  # / on sda1, swap on sda2
    disk(tmp_path, "sdb", "8:16")  # empty
    disk(tmp_path, "sdc", "8:32", ("sdc1", "8:33"), holders={"sdc1": ["dm-0"]})  # LVM's
    disk(tmp_path, "sdd", "8:48")  # mounted whole, twice (a bind mount)
    disk(tmp_path, "sr0", "11:0", removable=True)
    for name in ("loop0", "ram0", "zram0"):
        disk(tmp_path, name, "7:0")
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(
        "22 1 8:1 / / rw - ext4 /dev/disk/by-uuid/1234 rw\n"
        "23 22 8:48 / /srv rw - xfs /dev/sdd rw\n"
        "24 22 8:48 / /mnt/srv rw - xfs /dev/sdd rw\n"
        "25 22 8:48 / /srv rw - xfs /dev/sdd rw\n")
    (tmp_path / "proc/swaps").write_text(
        "Filename\tType\tSize\tUsed\tPriority\n/dev/sda2 partition 1024 0 -2\n")

    devices = {d["name"]: d for d in block_devices(Host(tmp_path))}
    assert sorted(devices) == ["sda", "sdb", "sdc", "sdd", "sr0"]
    assert {name: (d["in_use"], d["mounts"], d["holders"]) for name, d in devices.items()} == {
        "sda": (True, ["/", "swap (sda2)"], []),
        "sdb": (False, [], []),
        "sdc": (True, [], ["dm-0"]),
        "sdd": (True, ["/srv", "/mnt/srv"], []),
        "sr0": (False, [], []),
    }
    assert devices["sda"]["partitions"] == ["sda1", "sda2"]
    assert (devices["sdb"]["size_bytes"], devices["sdb"]["rotational"], devices["sdb"]["model"],
            devices["sr0"]["removable"]) == (1 << 30, True, "QEMU HARDDISK", True)


def test_without_a_readable_sys_block_there_are_no_disks(tmp_path: Path) -> None:
    assert block_devices(Host(tmp_path)) == []
