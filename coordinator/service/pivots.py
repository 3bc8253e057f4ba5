"""Both ends of a pivot (domain/transfer/pivot.py).

The old coordinator's side, `PivotLedger`: the pivot it is in, persisted in its data dir
(pivot.json, written whole and renamed: a kill never leaves half a step), with the target's
admin token sealed by the secrets key like every other secret; and, once done, the read-only
copy of the target's clusters and machines refreshed about every minute (`refresh_loop`).

The target's side, `import_archive`: a snapshot imported into its store in one transaction,
only when it holds no state, or answered at once when it already holds this same pivot."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp

from coordinator.domain.changes import Change
from coordinator.domain.errors import Conflict
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.records import StoredCluster
from coordinator.domain.releases.clusterapply import respecified
from coordinator.domain.transfer import pivot as pv
from coordinator.domain.transfer.archive import SCHEMA_VERSION
from coordinator.domain.views.machinelist import MAX_LIMIT
from coordinator.service import snapshot
from coordinator.service.writes import Writes
from coordinator.store.base import Store, StoreError
from coordinator.store.cipher import Cipher, SecretsKeyError, key_from_text
from coordinator.store.codec import resealed_doc, resealed_etcd_chunk, resealed_output
from nodeagent.wire.logfmt import fields
from nodeagent.wire.validation import InvalidDocument, Problem

log = logging.getLogger("coordinator")
FILE_NAME = "pivot.json"
IMPORTED = "pivot-imported"  # the event a target records its import with, in the same commit
_TOKEN_CONTEXT = "pivot target token"
KEPT = ("admin_tokens",)  # the target's own tables, beside which a pivot's state is imported
# Admin routes a frozen or moved coordinator still answers: the pivot's own, the move target
# its agents follow, and backups (which change nothing).
UNFROZEN_PATHS = ("/v1/pivot", "/v1/move-target", "/v1/backup")


class PivotLedger:
    """The old coordinator's pivot, in memory and in DATA_DIR/pivot.json (no file: a store
    in a test, kept in memory only)."""

    def __init__(self, path: Path | None, cipher: Cipher | None,
                 clock: Callable[[], float]) -> None:
        self.path = path
        self.cipher = cipher
        self.clock = clock
        self._pivot: pv.Pivot | None = None
        self._token = ""  # sealed
        if path is not None and path.is_file():
            saved = json.loads(path.read_text())
            self._pivot, self._token = pv.Pivot.from_json(saved["pivot"]), saved["token"]

    @property
    def pivot(self) -> pv.Pivot | None:
        return self._pivot

    @property
    def moved(self) -> bool:
        return self._pivot is not None and self._pivot.done

    def refused_change(self, path: str) -> str | None:
        """Why an admin change to path is refused now (None: it is not)."""
        if path.startswith(UNFROZEN_PATHS):
            return None
        return pv.refused_change(self._pivot)

    def refused_registration(self) -> str | None:
        """Why a machine may not register now (None: it may)."""
        return pv.refused_registration(self._pivot)

    def begin(self, to_url: str, ca_pem: str | None, token: str) -> pv.Pivot:
        pivot = pv.begin(self._pivot, to_url, ca_pem, self.clock())
        if pivot is not self._pivot:
            if self.cipher is None:
                raise Conflict("this coordinator has no secrets key to keep the target's "
                               "token with")
            self._save(pivot, self.cipher.seal(token, _TOKEN_CONTEXT))
        return pivot

    def record(self, pivot_id: str, step: pv.Step) -> pv.Pivot:
        current = self._under_way(pivot_id)
        advanced = pv.advance(current, step, self.clock())
        if advanced is not current:
            self._save(advanced, self._token)
        return advanced

    def rollback(self, pivot_id: str) -> pv.Pivot:
        current = pv.check_abort(self._under_way(pivot_id))
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        self._pivot, self._token = None, ""
        return current

    def token(self) -> str:
        if self.cipher is None or not self._token:
            raise SecretsKeyError("no token of the target is kept")
        return self.cipher.unseal(self._token, _TOKEN_CONTEXT)

    def refreshed(self, now: float) -> None:
        if self._pivot is not None:
            self._save(pv.refreshed(self._pivot, now), self._token)

    def _under_way(self, pivot_id: str) -> pv.Pivot:
        if self._pivot is None or self._pivot.id != pivot_id:
            under_way = "none is" if self._pivot is None else f"{self._pivot.id} is"
            raise Conflict(f"no pivot {pivot_id} here ({under_way} under way): run "
                           "`coordinator pivot --to URL` again")
        return self._pivot

    def _save(self, pivot: pv.Pivot, token: str) -> None:
        if self.path is not None:
            snapshot.save(json.dumps({"pivot": pivot.to_json(), "token": token}).encode(),
                          self.path)
        self._pivot, self._token = pivot, token


# -- the target's side ------------------------------------------------------------------------

async def receive_pivot(writes: Writes, archive: BinaryIO, pivot_id: str, from_url: str,
                       now: float) -> bool:
    """The target's side of a pivot: the archive's state imported (import_archive), its
    machines marked for the next reconcile pass (their credentials known from now on) and a
    pass asked for; False when it is already here from this same pivot."""
    imported = await import_archive(writes.store, getattr(writes.store, "cipher", None),
                                    archive, pivot_id, from_url, now)
    if imported is None:
        return False
    writes.mark(imported)
    writes.wake(Change(kick=True))
    return True


async def check_receivable(writes: Writes, pivot_id: str | None, schema: int) -> bool:
    """The target's side before the old coordinator is frozen: whether it already holds the
    pivot's state (True) or none (False); Conflict saying why it can take neither."""
    return await _receivable(writes.store, pivot_id, schema)


async def _receivable(store: Store, pivot_id: str | None, schema: int | None) -> bool:
    """domain/transfer/pivot.py's `receivable` for this store (schema None: the archive's
    rules check it as it is read)."""
    held = await store.list_events(kinds=[IMPORTED], limit=1, newest_first=True)
    imported = (str(held[0].data.get("pivot")), str(held[0].data.get("from"))) if held else None
    occupied = [name for name in await store.occupied() if name not in KEPT]
    return pv.receivable(imported, occupied, pivot_id, schema, SCHEMA_VERSION)


async def import_archive(store: Store, cipher: Cipher | None, archive: BinaryIO, pivot_id: str,
                         from_url: str, now: float) -> list[str] | None:
    """The ids of the machines imported with the archive's state (streamed from the file
    object archive); None when it is already here from this same pivot.
    InvalidDocument naming the member (and row) when the archive is refused: nothing is
    written then. Conflict when the store holds another state; the archive's admin tokens stay
    behind (the target keeps its own), its machines' secrets are sealed again with this one's
    key, and the import is recorded by an event in the same transaction."""
    if await _receivable(store, pivot_id, None):
        return None
    try:
        taken = await asyncio.to_thread(snapshot.read, archive, "the pivot's archive")
    except snapshot.ArchiveError as exc:  # bad input: 422 naming the body
        raise InvalidDocument([Problem("body", str(exc))]) from None
    tables = _for_target(taken, cipher)
    events = list(tables["events"])
    events.append({"id": max((row["id"] for row in events), default=0) + 1, "time": now,
                   "cluster": "", "machine": None, "hostname": None, "kind": IMPORTED,
                   "message": f"state imported from {from_url} (pivot {pivot_id})",
                   "data": json.dumps({"pivot": pivot_id, "from": from_url})})
    try:
        await store.import_({**tables, "events": events}, beside=KEPT)
    except StoreError as exc:
        raise Conflict(f"cannot import the pivot's state: {exc}") from None
    return [str(row["id"]) for row in tables["machines"]]


def _for_target(taken: snapshot.Snapshot, cipher: Cipher | None) -> dict[str, list[Any]]:
    tables = {name: list(rows) for name, rows in taken.tables.items() if name not in KEPT}
    key = key_from_text(taken.files.get("secrets.key", b""))
    if cipher is None or key is None:  # a key the archive holds is one: snapshot.read checks
        return tables
    source = Cipher(key, "the pivot's archive")
    tables["machines"] = [{**row, "doc": resealed_doc(row["doc"], row["id"], source, cipher)}
                          for row in tables.get("machines", ())]
    tables["cluster_outputs"] = [resealed_output(row, source, cipher)
                                 for row in tables.get("cluster_outputs", ())]
    tables["etcd_snapshot_chunks"] = [resealed_etcd_chunk(row, source, cipher)
                                      for row in tables.get("etcd_snapshot_chunks", ())]
    return tables


# -- the old coordinator's read-only copy -----------------------------------------------------

async def refresh_loop(ledger: PivotLedger, writes: Writes, interval: float,
                       tick: float = 1.0) -> None:
    """Once the pivot is done, the target's clusters and machines copied into this store
    about every interval seconds (a failure is logged and tried again next time)."""
    while True:
        if pv.refresh_due(ledger.pivot, ledger.clock(), interval):
            try:
                await refresh_once(ledger, writes)
            except (aiohttp.ClientError, OSError, TimeoutError, StoreError, ValueError,
                    KeyError, UnverifiedTarget) as exc:
                log.warning("cannot refresh the copy from %s: %s",
                            ledger.pivot.to_url if ledger.pivot else "?", exc,
                            extra=fields(event="pivot-refresh-failed"))
                ledger.refreshed(ledger.clock())  # next try in an interval, not at once
        await asyncio.sleep(tick)


class UnverifiedTarget(Exception):
    """The pivot's target has no CA to verify it by: its token is not sent there."""


async def refresh_once(ledger: PivotLedger, writes: Writes) -> None:
    """The target's clusters and machines copied here, over TLS verified against the pivot's CA
    on every connection: whoever else answers at its URL gets no token and changes nothing."""
    pivot = ledger.pivot
    assert pivot is not None
    if (why := pv.unverified(pivot)) is not None:
        raise UnverifiedTarget(why)
    assert pivot.ca_pem is not None
    context = ssl.create_default_context(cadata=pivot.ca_pem)
    headers = {"Authorization": f"Bearer {ledger.token()}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        clusters = await _get(session, f"{pivot.to_url}/v1/clusters", headers, context)
        machines = await _all_machines(session, pivot.to_url, headers, context)
    await copy_views(writes, clusters, machines, ledger.clock())
    ledger.refreshed(ledger.clock())


async def _get(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str],
               context: ssl.SSLContext) -> Any:
    # No redirect followed: the token goes to the verified target and nowhere else.
    async with session.get(url, headers=headers, ssl=context, allow_redirects=False) as response:
        if response.status != 200:
            raise ValueError(f"{url} answered HTTP {response.status} {response.reason}")
        return await response.json()


async def _all_machines(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str],
                        context: ssl.SSLContext) -> list[Any]:
    """Every machine the target lists, page after page (a target from before the pages
    answers them all in one list)."""
    found: list[Any] = []
    while True:
        page = await _get(session, f"{url}/v1/machines?limit={MAX_LIMIT}&offset={len(found)}",
                          headers, context)
        if isinstance(page, list):
            return page
        found += page["machines"]
        if not page["machines"] or len(found) >= page["total"]:
            return found


async def copy_views(writes: Writes, clusters: Sequence[Mapping[str, Any]],
                     machines: Sequence[Mapping[str, Any]], now: float) -> None:
    """The target's views of its clusters and machines written over this store's copies, in
    one transaction: each spec as the target holds it, each machine's state, role, labels,
    release and liveness. A machine that joined the target after the pivot is added as its
    view shows it, with no credential an agent could present here (no agent is served here any
    more), so the copy lists what the target does."""
    async with writes.lock:
        held = {c.spec.name: c for c in await writes.store.list_clusters()}
        specs = [ClusterSpec.model_validate(view["spec"]) for view in clusters]
        respecs = [StoredCluster(spec, 1, now, now) if spec.name not in held
                   else respecified(held[spec.name], spec, now) for spec in specs]
        known = {m.id: m for m in await writes.store.get_machines([str(v["id"])
                                                                   for v in machines])}
        updated = [_refreshed(known[view["id"]], view) for view in machines
                   if view["id"] in known]
        updated += [_copied(view) for view in machines if view["id"] not in known]
        gone = {m.id: now for m in await writes.store.list_machines()
                if m.id not in {str(v["id"]) for v in machines}}
        await writes.apply(Change(machines=updated, removed=gone,
                                  clusters=[c for c in respecs if c is not None]))


def _refreshed(machine: Machine, view: Mapping[str, Any]) -> Machine:
    """The copy's machine as the target's view shows it, with a new generation when that
    changes what its assignment says (state, role, labels, release): an agent that falls back
    here (docs/agent.md) is never told 304 for content it has not seen (domain/assignments/etags.py)."""
    copied = replace(machine, state=MachineState(view["state"]), role=view["role"],
                     labels=dict(view["labels"]), release=view["release"],
                     responding=bool(view["responding"]), last_seen=float(view["last_seen"]),
                     state_since=float(view["state_since"]))
    shown = ("state", "role", "labels", "release")
    if any(getattr(copied, name) != getattr(machine, name) for name in shown):
        copied = replace(copied, generation=machine.generation + 1)
    return copied


def _copied(view: Mapping[str, Any]) -> Machine:
    """A machine the copy lacks, from the target's view of it: what status shows, no items'
    record, and a credential no agent can present here (the target holds it; a credential's
    hash is hex), which reads as revoked only when the target revoked it."""
    revoked = bool(view.get("credential", {}).get("revoked"))
    return Machine(
        credential_hash="" if revoked else f"held by the move target: {view['id']}",
        id=str(view["id"]), cluster=str(view["cluster"]), hostname=str(view["hostname"]),
        ip=view["ip"], state=MachineState(view["state"]), role=view["role"],
        approved=bool(view["approved"]), labels=dict(view["labels"]), release=view["release"],
        responding=bool(view["responding"]), last_seen=float(view["last_seen"]),
        state_since=float(view["state_since"]), created_at=float(view["state_since"]))
