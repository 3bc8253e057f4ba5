"""Applies a phase's items strictly in order, each until it succeeds: a failing item is
retried with capped, jittered backoff and later items wait for it (they may depend on it).
What the journal says is done is not run again; every start, success and failure is reported."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import BinaryIO

from nodeagent.backoff import delay
from nodeagent.items import open_left_file, read_left_file
from nodeagent.items.cache import NodeCache
from nodeagent.items.download import ArtifactSource, apply_download
from nodeagent.items.exec import Watch, run_exec, run_version
from nodeagent.items.file import apply_file
from nodeagent.items.outcome import ItemFailed, ItemOutcome
from nodeagent.items.outputs import OutputLines, collect, refuse_line_outputs, secret_values, shown
from nodeagent.journal import Journal
from nodeagent.wire.protocol import (
    MAX_KUBECONFIG_BYTES,
    ExecAction,
    FileAction,
    ItemReport,
    ProxySettings,
    RetryPolicy,
    StateItem,
    VersionAction,
)
from nodeagent.wire.templates import TemplateError

Report = Callable[[ItemReport], Awaitable[None]]
Sleep = Callable[[float], Awaitable[None]]
# Sends the etcd snapshot an item left (its etcdSnapshotFrom, opened) to the coordinator, for
# the item of that name; returns once the coordinator kept it, ItemFailed saying why it did not.
SnapshotUpload = Callable[[str, BinaryIO], Awaitable[None]]


async def _attempt(item: StateItem, values: Mapping[str, str], root: Path,
                   artifacts: ArtifactSource, proxy: ProxySettings, cache: NodeCache,
                   watch: Watch) -> ItemOutcome:
    action = item.action
    if isinstance(action, ExecAction):  # bounds itself, to keep the output of a timed-out run
        return await run_exec(action, values, root, item.timeout, watch)
    if isinstance(action, VersionAction):
        return await run_version(action, values, root, item.timeout, watch)
    try:
        async with asyncio.timeout(item.timeout):
            if isinstance(action, FileAction):
                return await asyncio.to_thread(apply_file, action, values, root)
            return await apply_download(action, root, artifacts, proxy, cache)
    except TimeoutError:
        raise ItemFailed(f"timed out after {item.timeout:g}s") from None


async def apply_item(item: StateItem, values: Mapping[str, str], root: Path,
                     artifacts: ArtifactSource, proxy: ProxySettings, cache: NodeCache,
                     masked: Collection[str] = (), *, upload: SnapshotUpload) -> ItemOutcome:
    """One attempt at one item, its output and error showing none of masked (secret values)
    nor of its secret outputs. An item's own failure, whatever its cause, is an outcome,
    never an exception: it must not take the agent down. Cancellation still propagates.
    An item with etcdSnapshotFrom succeeds only once the coordinator kept its snapshot: run
    again after dying anywhere, it takes and uploads a new one."""
    started = time.monotonic()
    lines = OutputLines(item.outputs)
    try:
        refuse_line_outputs(item)
        outcome = await _attempt(item, values, root, artifacts, proxy, cache, lines.feed)
        if item.kubeconfig_from is not None:
            outcome = dataclasses.replace(outcome, kubeconfig=read_kubeconfig(item, root))
        if item.etcd_snapshot_from is not None:
            with open_left_file(root, item.etcd_snapshot_from,
                                f"etcdSnapshotFrom {item.etcd_snapshot_from}") as snapshot:
                await upload(item.name, snapshot)
        if item.outputs:
            lines.finish()
            outcome = dataclasses.replace(outcome, outputs=collect(item, lines.values, root))
    except ItemFailed as exc:
        outcome = ItemOutcome(False, exc.output, exc.exit_code, str(exc))
    except (TemplateError, OSError) as exc:
        outcome = ItemOutcome(False, error=str(exc))
    except Exception as exc:  # e.g. the coordinator went away mid-download
        outcome = ItemOutcome(False, error=f"{type(exc).__name__}: {exc}")
    lines.finish()
    secrets = [*masked, *lines.secrets, *secret_values(item, outcome.outputs)]
    return dataclasses.replace(outcome, output=shown(outcome.output, item, secrets),
                               error=shown(outcome.error, item, secrets),
                               duration=time.monotonic() - started)


def read_kubeconfig(item: StateItem, root: Path) -> str:
    """The kubeconfig the item left in its kubeconfigFrom file: what its report carries back
    to the coordinator (in its own field; output and logs never hold it)."""
    assert item.kubeconfig_from is not None
    return read_left_file(root, item.kubeconfig_from, MAX_KUBECONFIG_BYTES,
                          f"kubeconfigFrom {item.kubeconfig_from}")


def _journaled(item: StateItem, journal: Journal, root: Path) -> ItemOutcome | None:
    """What to report of an item the journal says is applied (its kubeconfig, its outputs);
    None when it must run: not applied, or a file it left for its report is gone (it is what
    makes the file)."""
    lines = journal.recorded(item)
    if lines is None:
        return None
    try:
        kubeconfig = read_kubeconfig(item, root) if item.kubeconfig_from is not None else None
        outputs = collect(item, lines, root) if item.outputs else None
    except ItemFailed:
        return None
    return ItemOutcome(True, output="already applied (journal)", kubeconfig=kubeconfig,
                       outputs=outputs)


async def run_phase(
    items: Sequence[StateItem],
    values: Mapping[str, str],
    journal: Journal,
    report: Report,
    retry: RetryPolicy,
    root: Path,
    artifacts: ArtifactSource,
    proxy: ProxySettings,
    cache: NodeCache,
    rand: random.Random | None = None,
    sleep: Sleep = asyncio.sleep,
    secrets: Collection[str] = (),
    *,
    upload: SnapshotUpload,
) -> bool:
    """True when every item is applied; False when one failed retry.max_attempts times
    (the items after it are then not run). secrets names the values that are secret: they,
    and the secret outputs of the items run so far, are masked in every report's output."""
    rand = random.Random() if rand is None else rand
    masked = {values[name] for name in secrets if name in values}
    for item in items:
        fingerprint = item.fingerprint()
        item_report = partial(ItemReport, item=item.name, fingerprint=fingerprint,
                              phase=item.phase)
        replayed = _journaled(item, journal, root)
        if replayed is not None:
            now = time.time()
            await report(item_report(status="succeeded", attempt=1, started_at=now,
                                     finished_at=now, output=replayed.output,
                                     kubeconfig=replayed.kubeconfig, outputs=replayed.outputs))
            masked |= secret_values(item, replayed.outputs)
            continue
        journal.record_started(item)
        attempt = 0
        while True:
            attempt += 1
            started = time.time()
            await report(item_report(status="running", attempt=attempt, started_at=started))
            outcome = await apply_item(item, values, root, artifacts, proxy, cache, masked,
                                       upload=upload)
            finished = started + outcome.duration
            if outcome.succeeded:
                journal.record_applied(item, outcome.outputs)
                await report(item_report(status="succeeded", attempt=attempt,
                                         started_at=started, finished_at=finished,
                                         exit_code=outcome.exit_code, output=outcome.output,
                                         kubeconfig=outcome.kubeconfig, outputs=outcome.outputs))
                masked |= secret_values(item, outcome.outputs)
                break
            give_up = retry.max_attempts is not None and attempt >= retry.max_attempts
            wait = delay(attempt, retry.base_seconds, retry.max_seconds, rand)
            await report(item_report(status="failed", attempt=attempt, started_at=started,
                                     finished_at=finished, exit_code=outcome.exit_code,
                                     output=outcome.output, error=outcome.error,
                                     next_retry_at=None if give_up else finished + wait,
                                     gave_up=give_up))
            if give_up:
                return False
            await sleep(wait)
    return True
