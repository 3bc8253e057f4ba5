"""How model objects become JSON documents and rows become objects, shared by every store
backend (no SQL here: rows are read by column name, as sqlite3.Row and asyncpg.Record allow).

Machines are stored as one document each so that adding a field to Machine needs no
schema migration: documents written before the field existed decode with its default. A
machine's secrets (its kubeconfig, its outputs, and the values of its join material and of
the mint job it runs) are sealed together under the document's key SEALED, by the cipher the
store holds: never in the clear.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields, replace
from typing import Any, Protocol

from coordinator.domain.assignments.etags import Version
from coordinator.domain.machines.clones import identities
from coordinator.domain.model import (
    POOL,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    ItemProgress,
    Machine,
    MachineState,
    Material,
    MintJob,
    NodeStatus,
)
from coordinator.domain.records import (
    AdminToken,
    ClusterOutput,
    CredentialOwner,
    EtcdSnapshot,
    Event,
    JoinToken,
    MachineCount,
    RemovedMachine,
    StoredCluster,
)
from coordinator.store.cipher import Cipher, SecretsKeyError

SEALED = "sealed"
_MACHINE_FIELDS = tuple(f.name for f in fields(Machine))
_PROGRESS_FIELDS = tuple(f.name for f in fields(ItemProgress))
_DRAIN_FIELDS = tuple(f.name for f in fields(DrainStatus))
_NODE_FIELDS = tuple(f.name for f in fields(NodeStatus))
_MATERIAL_FIELDS = tuple(f.name for f in fields(Material))
_JOB_FIELDS = tuple(f.name for f in fields(MintJob))
_PLAIN_FIELDS = tuple(name for name in _MACHINE_FIELDS if name not in ("kubeconfig", "outputs"))


def dumps(value: Any) -> str:
    """Canonical JSON: sorted keys so equal values give equal text (spec change detection),
    and no NaN/Infinity, which PostgreSQL's jsonb would refuse."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def machine_to_doc(machine: Machine, cipher: Cipher | None) -> dict[str, Any]:
    """A JSON-able dict of every field, to serialize at once: facts and precheck are shared
    with the machine, as deep-copying them would cost more than the rest of a commit. Sealed
    only when the machine has a secret: most have none, and this runs for every write."""
    doc = {name: getattr(machine, name) for name in _PLAIN_FIELDS}
    doc["state"] = machine.state.value
    doc["applied"] = sorted(machine.applied)
    doc["upgrading"] = sorted(machine.upgrading)
    doc["managers"] = list(machine.managers)
    doc["waits"] = list(machine.waits)
    doc["clones"] = list(machine.clones)
    doc["remedy_done"] = list(machine.remedy_done)
    doc["progress"] = None if machine.progress is None else asdict(machine.progress)
    doc["drain"] = None if machine.drain is None else asdict(machine.drain)
    doc["node"] = None if machine.node is None else asdict(machine.node)
    doc["material"] = None if machine.material is None else _without_values(machine.material)
    doc["minting"] = None if machine.minting is None else _without_values(machine.minting)
    secrets = _secrets_of(machine)
    if secrets:
        if cipher is None:
            raise SecretsKeyError(f"machine {machine.id} has secrets, and this store has no "
                                  "secrets key to seal them with")
        doc[SEALED] = cipher.seal(dumps(secrets), _context(machine.id))
    return doc


def _without_values(record: Material | MintJob) -> dict[str, Any]:
    doc = asdict(record)
    del doc["values"]
    return doc


def _secrets_of(machine: Machine) -> dict[str, Any]:
    """The machine's secrets that are not empty: the fields kubeconfig and outputs, and the
    values of its material and minting under those records' names."""
    parts = {"kubeconfig": machine.kubeconfig, "outputs": machine.outputs,
             "material": machine.material.values if machine.material else None,
             "minting": machine.minting.values if machine.minting else None}
    return {name: value for name, value in parts.items() if value}


def _context(machine_id: str) -> str:
    """What a machine's sealed secrets are bound to: they open in its own document only."""
    return f"machine {machine_id}"


def machine_to_row(machine: Machine, cipher: Cipher | None) -> tuple[Any, ...]:
    """The values of a machine's columns in the order both stores' upserts name them: id,
    cluster, hostname, state, credential_hash, responding, last_seen, doc, and the listed
    fields GET /v1/machines filters and sorts on: ip, role, state_since."""
    return (machine.id, machine.cluster, machine.hostname, machine.state.value,
            machine.credential_hash, machine.responding, machine.last_seen,
            dumps(machine_to_doc(machine, cipher)), machine.ip, machine.role,
            machine.state_since)


def label_rows(machines: Sequence[Machine]) -> list[tuple[str, str, str]]:
    """The rows of machine_labels for machines: (machine id, key, value) per label."""
    return [(m.id, key, value) for m in machines for key, value in m.labels.items()]


def identity_rows(machines: Sequence[Machine]) -> list[tuple[str, str, str]]:
    """The rows of machine_identities for machines: (machine id, kind, value) per product_uuid
    and MAC its last precheck report carries (domain/machines/clones.py)."""
    return [(m.id, kind, value) for m in machines
            for kind, value in sorted(identities(m.precheck))]


def machine_from_doc(doc: Mapping[str, Any], cipher: Cipher | None) -> Machine:
    """The inverse of machine_to_doc. Missing keys take the field's default and unknown keys
    are ignored, so documents survive fields being added to or dropped from Machine. Secrets
    in the clear (a document written before they were sealed) are taken as they are."""
    values = {name: doc[name] for name in _MACHINE_FIELDS if name in doc}
    secrets = _unsealed(doc, cipher)
    values.update((name, secrets[name]) for name in ("kubeconfig", "outputs") if name in secrets)
    if "state" in values:
        values["state"] = MachineState(values["state"])
    for name in ("applied", "upgrading"):
        if name in values:
            values[name] = frozenset(values[name])
    if values.get("progress") is not None:
        progress = values["progress"]
        values["progress"] = ItemProgress(**{n: progress[n] for n in _PROGRESS_FIELDS if n in progress})
    for name in ("managers", "waits", "clones", "remedy_done"):
        if name in values:
            values[name] = tuple(values[name])
    if values.get("drain") is not None:
        drain = {n: values["drain"][n] for n in _DRAIN_FIELDS if n in values["drain"]}
        drain["stage"] = DrainStage(drain["stage"])
        for name in ("blocking_pods", "blocking_budgets", "workloads"):
            drain[name] = tuple(drain.get(name, ()))
        values["drain"] = DrainStatus(**drain)
    if values.get("node") is not None:
        values["node"] = NodeStatus(**{n: values["node"][n] for n in _NODE_FIELDS
                                       if n in values["node"]})
    if values.get("material") is not None:
        material = {n: values["material"][n] for n in _MATERIAL_FIELDS if n in values["material"]}
        material["items"] = tuple(material["items"])
        if "material" in secrets:
            material["values"] = secrets["material"]
        values["material"] = Material(**material)
    if values.get("minting") is not None:
        job = {n: values["minting"][n] for n in _JOB_FIELDS if n in values["minting"]}
        job["items"], job["done"] = tuple(job["items"]), tuple(job.get("done", ()))
        if "minting" in secrets:
            job["values"] = secrets["minting"]
        values["minting"] = MintJob(**job)
    return Machine(**values)


def _unsealed(doc: Mapping[str, Any], cipher: Cipher | None) -> dict[str, Any]:
    """The document's sealed secrets ({} when it has none); SecretsKeyError when the cipher
    cannot open them, rather than a machine that silently lost them."""
    sealed = doc.get(SEALED)
    if sealed is None:
        return {}
    context = _context(doc["id"])
    if cipher is None:
        raise SecretsKeyError(f"the secrets of {context} are sealed, and this store has no "
                              "secrets key to open them with")
    secrets: dict[str, Any] = json.loads(cipher.unseal(sealed, context))
    return secrets


def spec_to_json(spec: ClusterSpec) -> str:
    """Canonical JSON of a cluster spec (camelCase, as the operator writes it)."""
    return dumps(spec.model_dump(mode="json", by_alias=True))


@functools.lru_cache(maxsize=64)
def spec_from_json(text: str) -> ClusterSpec:
    """Cached: every assignment reads its cluster, and validating the spec each time would
    cost more than the rest of the request. Specs are frozen, so sharing one is safe."""
    return ClusterSpec.model_validate_json(text)


class Row(Protocol):
    """A database row read by column name."""

    def __getitem__(self, key: str) -> Any: ...


def cluster_from_row(row: Row) -> StoredCluster:
    return StoredCluster(spec=spec_from_json(row["spec"]), generation=row["generation"],
                         created_at=row["created_at"], updated_at=row["updated_at"],
                         deleting=bool(row["deleting"]))


def cluster_row(cluster: StoredCluster) -> tuple[Any, ...]:
    """The parameters of sql.Statements.write_cluster: the cluster as a change decided it."""
    return (cluster.spec.name, spec_to_json(cluster.spec), cluster.generation,
            cluster.created_at, cluster.updated_at, cluster.deleting)


def with_outputs(cluster: StoredCluster, rows: Sequence[Row],
                 cipher: Cipher | None) -> StoredCluster:
    """The cluster with the outputs it keeps (its rows of cluster_outputs, values unsealed)."""
    if not rows:
        return cluster
    return replace(cluster, outputs={row["name"]: cluster_output_from_row(row, cipher) for row in rows})


def cluster_output_from_row(row: Row, cipher: Cipher | None) -> ClusterOutput:
    context = _output_context(row["cluster"], row["name"])
    if cipher is None:
        raise SecretsKeyError(f"the {context} is sealed, and this store has no secrets key")
    return ClusterOutput(cipher.unseal(row["value"], context), row["machine"], row["hostname"],
                         row["produced_at"])


def output_rows(outputs: Mapping[str, Mapping[str, ClusterOutput]],
                cipher: Cipher | None) -> list[tuple[Any, ...]]:
    """Rows of cluster_outputs for outputs (cluster -> name -> output), values sealed, each
    bound to its cluster and name."""
    rows = []
    for cluster, kept in outputs.items():
        for name, output in kept.items():
            context = _output_context(cluster, name)
            if cipher is None:
                raise SecretsKeyError(f"the {context} is secret, and this store has no secrets "
                                      "key to seal it with")
            rows.append((cluster, name, cipher.seal(output.value, context), output.machine,
                         output.hostname, output.produced_at))
    return rows


def _output_context(cluster: str, name: str) -> str:
    """What a cluster output's sealed value is bound to: its own row only."""
    return f"cluster {cluster} output {name}"


def resealed_output(row: Mapping[str, Any], source: Cipher, target: Cipher) -> dict[str, Any]:
    """A cluster_outputs row with its value sealed by target's key instead of source's."""
    context = _output_context(row["cluster"], row["name"])
    return {**row, "value": target.seal(source.unseal(row["value"], context), context)}


def etcd_snapshot_from_row(row: Row) -> EtcdSnapshot:
    return EtcdSnapshot(id=row["id"], cluster=row["cluster"], machine=row["machine"],
                        hostname=row["hostname"], item=row["item"], phase=row["phase"],
                        subject=row["subject"], release=row["release"],
                        taken_at=row["taken_at"], size=row["size"], sha256=row["sha256"],
                        complete=bool(row["complete"]))


def etcd_snapshot_row(snapshot: EtcdSnapshot) -> tuple[Any, ...]:
    """The parameters of sql.Statements.begin_etcd_snapshot."""
    return tuple(getattr(snapshot, f.name) for f in fields(EtcdSnapshot))


def sealed_etcd_chunk(cipher: Cipher | None, snapshot_id: str, seq: int, data: bytes) -> str:
    """A chunk of an etcd snapshot (which holds every Secret of its cluster) sealed, bound to
    its place: moved to another snapshot or position, it fails to open."""
    context = _etcd_chunk_context(snapshot_id, seq)
    if cipher is None:
        raise SecretsKeyError(f"the {context} is secret, and this store has no secrets key to "
                              "seal it with")
    return cipher.seal_bytes(data, context)


def opened_etcd_chunk(cipher: Cipher | None, snapshot_id: str, seq: int, sealed: str) -> bytes:
    context = _etcd_chunk_context(snapshot_id, seq)
    if cipher is None:
        raise SecretsKeyError(f"the {context} is sealed, and this store has no secrets key")
    return cipher.unseal_bytes(sealed, context)


def resealed_etcd_chunk(row: Mapping[str, Any], source: Cipher, target: Cipher) -> dict[str, Any]:
    """An etcd_snapshot_chunks row sealed by target's key instead of source's."""
    data = opened_etcd_chunk(source, row["snapshot"], row["seq"], row["data"])
    return {**row, "data": sealed_etcd_chunk(target, row["snapshot"], row["seq"], data)}


def _etcd_chunk_context(snapshot_id: str, seq: int) -> str:
    return f"etcd snapshot {snapshot_id} chunk {seq}"


def machine_from_row(row: Row, cipher: Cipher | None) -> Machine:
    """The last_seen column wins over the document's: touch_machine updates only the column."""
    doc = json.loads(row["doc"])
    doc["last_seen"] = row["last_seen"]
    return machine_from_doc(doc, cipher)


def version_from_row(row: Row) -> Version:
    """Columns generation and epoch (Statements.machine_version)."""
    return Version(epoch=str(row["epoch"]), generation=int(row["generation"]))


def credential_owner_from_row(row: Row) -> CredentialOwner:
    """Columns id, cluster, hostname, expires_at and responding, which the query extracts
    from the document without decoding the machine."""
    return CredentialOwner(machine_id=row["id"], cluster=row["cluster"], hostname=row["hostname"],
                           expires_at=row["expires_at"], responding=bool(row["responding"]))


def removed_machine_from_row(row: Row) -> RemovedMachine:
    return RemovedMachine(machine_id=row["id"], cluster=row["cluster"], hostname=row["hostname"],
                          removed_at=row["removed_at"])


def machine_count_from_row(row: Row) -> MachineCount:
    """Columns cluster, state, responding and count (of a GROUP BY)."""
    return MachineCount(cluster=row["cluster"], state=row["state"],
                        responding=bool(row["responding"]), count=row["count"])


def join_token_from_row(row: Row) -> JoinToken:
    return JoinToken(id=row["id"], cluster=row["cluster"] or POOL, created_at=row["created_at"],
                     expires_at=row["expires_at"], max_uses=row["max_uses"], uses=row["uses"],
                     revoked=bool(row["revoked"]), auto_approve=bool(row["auto_approve"]))


def admin_token_from_row(row: Row) -> AdminToken:
    return AdminToken(id=row["id"], name=row["name"], role=row["role"],
                      created_at=row["created_at"], revoked=bool(row["revoked"]))


def event_from_row(row: Row) -> Event:
    return Event(id=row["id"], time=row["time"], cluster=row["cluster"], machine=row["machine"],
                 hostname=row["hostname"], kind=row["kind"], message=row["message"],
                 data=json.loads(row["data"]))


def resealed_doc(doc_text: str, machine_id: str, source: Cipher, target: Cipher) -> str:
    """A machine's stored document with its secrets sealed by target's key instead of
    source's: a pivot's target keeps the secrets key it opened its database with."""
    doc = json.loads(doc_text)
    if SEALED in doc:
        context = _context(machine_id)
        doc[SEALED] = target.seal(source.unseal(doc[SEALED], context), context)
    return dumps(doc)
