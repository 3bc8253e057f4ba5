"""A decompression bomb handed to both archive readers: `coordinator restore` and the pivot's
import (POST /v1/pivot/import on a `coordinator serve` with no state). The bomb is a real
backup with one member, tables/events.jsonl, replaced by --zeros MiB of zero bytes (gzip makes
them a thousandth of that), in two disguises: the manifest lying about the member's size
(its old entry kept), or declaring it honestly (size and sha256 of the zeros).

    # the issue's bomb (a 518 KiB archive of 512 MiB), before and after, side by side
    .venv/bin/python bench/archive_bomb.py --before 6a15f92
    # seconds, a 32 MiB bomb in one disguise (CI runs it so that the script keeps working)
    .venv/bin/python bench/archive_bomb.py --quick

Prints, per revision and disguise, the archive's size, how restore and the import answered,
and the peak resident memory each process reached beyond what it reached without the bomb
(restore: beside restoring the real backup; the import, by a coordinator started for it: its
VmHWM before the request).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.cli.client import ClientError
from tests.support.archives import bomb
from tests.support.harness import COORDINATOR, running_coordinator
from tests.support.memory import peak_rss_mib, run_measured
from tests.support.revisions import revision

MEMBER = "tables/events.jsonl"


def restore_peak(archive: Path, into: Path) -> tuple[float, str]:
    done = run_measured([COORDINATOR, "restore", str(archive), "--data-dir", str(into)])
    answer = "restored" if done.returncode == 0 else \
        (done.stderr.strip().splitlines() or ["?"])[-1][:90]
    return done.peak_rss_mib, answer


def measure(rev: str | None, bombs: dict[str, bytes], good: Path, tmp: Path) -> None:
    with revision(rev):
        print(f"coordinator {rev or 'of this worktree'}:")
        base, answer = restore_peak(good, tmp / f"{rev}-good")
        print(f"  restore of the real backup: peak {base:.1f} MiB ({answer})")
        for name, data in bombs.items():
            archive = tmp / f"{name.replace(' ', '-')}.tgz"
            archive.write_bytes(data)
            peak, answer = restore_peak(archive, tmp / f"{rev}-{archive.stem}")
            print(f"  {name} ({len(data) / 1024:.0f} KiB archive):")
            print(f"    restore: peak {peak:.1f} MiB, {peak - base:+.1f} MiB: {answer}")
            print(f"    pivot import: {imported(data, tmp / f'{rev}-{archive.stem}-target')}")


def imported(data: bytes, tmp: Path) -> str:
    """The import of data by a coordinator of its own (its high-water mark is the bomb's
    alone), and its peak's growth."""
    with running_coordinator(tmp, cluster=None) as target:
        assert target.process is not None
        before = peak_rss_mib(target.process.pid)
        try:
            target.admin.request("POST", "/v1/pivot/import?pivot=pv-1&from=https://old",
                                 text=data, content_type="application/gzip")
            answer = "imported"
        except ClientError as exc:
            answer = f"{exc.status}: {str(exc)[:80]}"
        return f"peak {peak_rss_mib(target.process.pid) - before:+.1f} MiB: {answer}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zeros", type=int, default=512, metavar="MIB",
                        help="the bomb's unpacked size")
    parser.add_argument("--before", metavar="REV",
                        help="also measure the coordinator of this git revision, first")
    parser.add_argument("--quick", action="store_true",
                        help="a 32 MiB bomb, the manifest declaring it, this worktree")
    args = parser.parse_args()
    zeros = (32 if args.quick else args.zeros) << 20
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        with running_coordinator(tmp / "source") as source:
            source.register("node-0")
            source.cli("backup", "--out", str(tmp / "backup.tgz"))
        good = tmp / "backup.tgz"
        data = good.read_bytes()
        bombs = {"manifest lies": bomb(data, MEMBER, zeros),
                 "manifest declares": bomb(data, MEMBER, zeros, zeros)}
        if args.quick:  # each disguise costs a restore and a coordinator; the paths are one
            del bombs["manifest lies"]
        print(f"a real backup ({len(data) / 1024:.1f} KiB) with {MEMBER} replaced by "
              f"{zeros >> 20} MiB of zeros")
        for rev in ([args.before] if args.before and not args.quick else []) + [None]:
            measure(rev, bombs, good, tmp)


if __name__ == "__main__":
    main()
