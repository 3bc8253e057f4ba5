"""Sample clusters and machines for the store tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.domain.model import ClusterSpec, ItemProgress, Machine, MachineState
from coordinator.store.base import Store


def spec(name: str = "edge", release: str = "1.0.0", **settings: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "name": name,
        "release": release,
        "settings": settings,
        "machineTypes": {
            "worker": [{"name": "sysctl", "phase": "prepare",
                        "action": {"type": "exec", "argv": ["sysctl", "--system"]}}],
        },
    })


def machine(machine_id: str = "m-1", cluster: str = "edge", **changes: Any) -> Machine:
    """A machine with every field away from its default, so a lossy round trip shows."""
    full = Machine(
        id=machine_id,
        cluster=cluster,
        hostname=f"host-{machine_id}",
        ip="10.0.0.7",
        state=MachineState.DEPLOY,
        role="worker",
        approved=True,
        facts={"cpus": 4, "memory": 8.5, "os": {"id": "debian", "version": "12"}, "tags": []},
        precheck={"ok": True, "checks": [{"name": "kernel", "status": "pass"}]},
        applied=frozenset({"a" * 32, "b" * 32}),
        progress=ItemProgress(item="kubelet", attempt=2, status="failed", error="exit 1",
                          next_retry_at=17.5, updated_at=16.25, failing_since=14.0),
        created_at=1.5,
        state_since=2.5,
        last_seen=3.5,
        generation=4,
        credential_hash=f"cred-{machine_id}",
        responding=False,
    )
    return replace(full, **changes)


# Written by a coordinator from before `responding` was a column, to migrate.
BEFORE_RESPONDING_COLUMN = (machine("m-1", responding=False), machine("m-2", responding=True))


async def assert_responding_kept(store: Store) -> None:
    """After the migration, every reader of `responding` sees what the documents said."""
    assert sorted((c.responding, c.count) for c in await store.count_machines()) == [
        (False, 1), (True, 1)]
    owner = await store.credential_owner("cred-m-1")
    assert owner is not None and not owner.responding
    assert await store.get_machine("m-2") == BEFORE_RESPONDING_COLUMN[1]
