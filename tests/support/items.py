"""Items built and applied for real in the item tests: commands run, files land in a temp
root; the only stand-in is the artifact source, the daemon's seam."""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from nodeagent.http_client import Body
from nodeagent.items.cache import NodeCache
from nodeagent.items.download import ArtifactSource
from nodeagent.items.outcome import ItemOutcome
from nodeagent.items.runner import SnapshotUpload, apply_item, run_phase
from nodeagent.journal import Journal
from nodeagent.wire.config import DEFAULT_CACHE_MAX_GIB
from nodeagent.wire.protocol import ItemReport, ProxySettings, RetryPolicy, StateItem

PYTHON = sys.executable
VALUES = {"cluster.name": "edge-1", "machine.hostname": "node-a", "machine.ip": "10.0.0.5"}
RETRY = RetryPolicy(base_seconds=2, max_seconds=5)


def make_item(name: str, action: dict[str, Any], **fields: Any) -> StateItem:
    return StateItem.model_validate({"name": name, "phase": "prepare", "action": action, **fields})


def exec_item(name: str, argv: list[str], **fields: Any) -> StateItem:
    action = {"type": "exec", "argv": argv}
    action.update({k: fields.pop(k) for k in ("env", "cwd", "expectedExitCodes") if k in fields})
    return make_item(name, action, **fields)


async def no_artifacts(name: str, headers: Mapping[str, str]) -> Body:
    raise AssertionError(f"no artifact expected, asked for {name}")


async def no_upload(item: str, snapshot: BinaryIO) -> None:
    raise AssertionError(f"no etcd snapshot upload expected, from {item}")


class Uploads:
    """The daemon's upload seam, keeping what each item sent (item name, bytes)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def __call__(self, item: str, snapshot: BinaryIO) -> None:
        self.sent.append((item, snapshot.read()))


def artifact_source(chunks: Sequence[bytes], asked: list[str] | None = None,
                    fail_after: int | None = None) -> ArtifactSource:
    """The daemon's seam serving chunks whole (no ranges), each name asked for noted in
    asked; with fail_after, the connection breaks before that chunk."""
    async def stream() -> AsyncIterator[bytes]:
        for index, chunk in enumerate(chunks):
            if index == fail_after:
                raise ConnectionResetError("coordinator went away")
            yield chunk

    async def source(name: str, headers: Mapping[str, str]) -> Body:
        if asked is not None:
            asked.append(name)
        return Body(200, 0, None, stream())

    return source


def node_cache(root: Path) -> NodeCache:
    """The download cache of the node whose root is root: in a state dir beside it."""
    return NodeCache(root.parent / "state" / "cache", int(DEFAULT_CACHE_MAX_GIB * 2**30))


async def apply(item: StateItem, root: Path, values: dict[str, str] | None = None,
                proxy: ProxySettings | None = None,
                artifacts: ArtifactSource = no_artifacts,
                cache: NodeCache | None = None, upload: SnapshotUpload = no_upload) -> ItemOutcome:
    return await apply_item(item, VALUES if values is None else values, root, artifacts,
                            proxy or ProxySettings(), cache or node_cache(root), upload=upload)


def leftovers(directory: Path) -> list[str]:
    """Temp files an atomic write left behind (there must never be any)."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".nodeagent-tmp"))


class Recorder:
    """The report callback and the injected sleep: what the daemon would send, and the waits."""

    def __init__(self) -> None:
        self.reports: list[ItemReport] = []
        self.sleeps: list[float] = []

    async def report(self, report: ItemReport) -> None:
        self.reports.append(report)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def statuses(self) -> list[tuple[str, str, int]]:
        return [(r.item, r.status, r.attempt) for r in self.reports]


async def run(items: list[StateItem], journal: Journal, recorder: Recorder, root: Path,
              retry: RetryPolicy = RETRY, rand: random.Random | None = None,
              values: Mapping[str, str] = VALUES, secrets: Collection[str] = (),
              upload: SnapshotUpload = no_upload) -> bool:
    """run_phase as `nodeagent apply` runs it, its reports and waits going to recorder."""
    return await run_phase(items, values, journal, recorder.report, retry, root, no_artifacts,
                           ProxySettings(), node_cache(root), rand or random.Random(0), sleep=recorder.sleep,
                           secrets=secrets, upload=upload)
