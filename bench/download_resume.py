"""What a node fetches again: a coordinator artifact cut at half-way and resumed, then the same
item re-run and another item wanting the same sha256.

The coordinator's real artifact route (in process, on loopback) behind a relay that cuts the
first artifact answer after --size/2 bytes and counts every byte it passes on; the agent's own
client and download item (as `nodeagent apply` runs them), its cache in a temp state dir.

    .venv/bin/python bench/download_resume.py --size-mib 256
    .venv/bin/python bench/download_resume.py --quick   # seconds; CI runs it

Prints the bytes the coordinator sent for each step, as MiB and as a share of the file, and
each step's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nodeagent.client import CoordinatorClient
from nodeagent.http_client import Body
from nodeagent.wire.endpoint import Endpoint
from tests.support.harness import in_process_coordinator
from tests.support.items import apply, make_item
from tests.support.relay import relay

MIB = 1 << 20


async def bench(size: int, directory: Path) -> None:
    content = bytes(range(256)) * (size // 256)
    sha = hashlib.sha256(content).hexdigest()
    root = directory / "root"
    root.mkdir()
    (directory / "coordinator").mkdir()
    (directory / "coordinator" / "tool.bin").write_bytes(content)

    def item(path: str) -> object:
        return make_item("tool", {"type": "download", "artifact": "tool.bin", "sha256": sha,
                                  "path": path})

    async with in_process_coordinator(directory / "coordinator") as coordinator:
        agent = await coordinator.register("node-1")
        with relay(coordinator.client.port, losing=b"GET /v1/artifacts/") as cutting:
            cutting.cut_after = len(content) // 2
            client = CoordinatorClient([Endpoint(cutting.url)], timeout=30)

            async def artifacts(name: str, headers: Mapping[str, str]) -> Body:
                return await client.artifact(agent["credential"], name, headers)

            steps = [("first attempt, cut at 50 %", "/opt/tool", False),
                     ("next attempt, resumed", "/opt/tool", True),
                     ("the item re-run (target removed)", "/opt/tool", True),
                     ("another item, same sha256", "/opt/other", True)]
            print(f"file: {len(content) / MIB:.1f} MiB")
            for what, path, must_succeed in steps:
                if what.startswith("the item re-run"):
                    (root / path.lstrip("/")).unlink()
                before = len(cutting.answers)
                started = time.perf_counter()
                outcome = await apply(item(path), root, artifacts=artifacts)  # type: ignore[arg-type]
                took = time.perf_counter() - started
                if outcome.succeeded != must_succeed:
                    raise SystemExit(f"{what}: {outcome.error or outcome.output}")
                sent = sum(size for _, size in cutting.answers[before:])
                print(f"{what:34} fetched {sent:>10} bytes = {sent / MIB:7.2f} MiB "
                      f"({100 * sent / len(content):5.1f} % of the file, headers included) "
                      f"in {took * 1000:7.1f} ms")
            total = sum(size for _, size in cutting.answers)
            print(f"{'in all':34} fetched {total:>10} bytes = {total / MIB:7.2f} MiB "
                  f"({100 * total / len(content):5.1f} % of the file)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="4 MiB: seconds")
    args = parser.parse_args()
    size = 4 * MIB if args.quick else args.size_mib * MIB
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(bench(size, Path(directory)))


if __name__ == "__main__":
    main()
