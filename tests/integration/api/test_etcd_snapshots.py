"""etcd snapshots through the coordinator: a manager's agent uploads a real etcd's snapshot with
the agent's own client, the coordinator keeps it sealed (its bytes are nowhere in the database
file), lists it, keeps the newest `keep`, puts the newest in a backup, and hands it back whole
to `coordinator cluster etcd-snapshot`, from which a real etcd is restored with what it held.
What does not qualify is refused with nothing kept, saying why: a worker, an item that takes
none, a manager not upgrading, a snapshot larger than the setting, one damaged on the way, a
read-only token asking for the bytes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from coordinator.api.app import create_app
from coordinator.api.context import Presentation
from coordinator.domain.changes import Change
from coordinator.domain.machines.tokens import READ_ONLY, new_token, token_hash
from coordinator.domain.model import MachineState
from coordinator.domain.records import EtcdSnapshot
from coordinator.service.snapshot import from_bytes
from nodeagent.client import CoordinatorClient, Rejected
from nodeagent.wire.endpoint import Endpoint
from tests.support.harness import InProcessCoordinator, in_process_coordinator
from tests.support.ports import free_port
from tests.support.requirements import require_binary
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

CLUSTER = """\
name: lab
release: "1.0"
settings: {etcdSnapshots: {keep: 2, maxSizeMiB: 1}}
machineTypes:
  manager:
    - {name: setup, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: control-plane, phase: deploy, action: {type: exec, argv: ["true"]}}
    - {name: etcd-snapshot, phase: upgrade, etcdSnapshotFrom: /var/lib/snapshot.db,
       action: {type: exec, argv: ["true"]}}
    - {name: kubeadm-upgrade, phase: upgrade, action: {type: exec, argv: ["true"]}}
  worker:
    - {name: setup, phase: prepare, action: {type: exec, argv: ["true"]}}
"""
VALUE = "the-value-kept-before-the-upgrade"
ETCD_ENV = {"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"}


@contextlib.contextmanager
def real_etcd(data: Path, peer: str) -> Iterator[str]:
    """Debian's etcd, member m1 at peer, on a loopback client port, data in data, until the
    block ends: its client URL."""
    etcd = require_binary("etcd")
    client = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [etcd, "--name", "m1", "--data-dir", str(data), "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer,
         "--initial-advertise-peer-urls", peer, "--initial-cluster", f"m1={peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: etcdctl(client, "endpoint", "health").returncode == 0, 20,
                   "etcd serves")
        yield client
    finally:
        process.terminate()
        process.wait(10)


def etcdctl(endpoint: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    endpoints = [f"--endpoints={endpoint}"] if endpoint else []
    return subprocess.run([require_binary("etcdctl"), *endpoints, *args], capture_output=True,
                          text=True, timeout=30, check=False, env=ETCD_ENV)


def etcd_snapshot(tmp: Path) -> bytes:
    """A real snapshot of an etcd holding /registry/secrets/VALUE."""
    with real_etcd(tmp / "etcd", f"http://127.0.0.1:{free_port()}") as endpoint:
        assert etcdctl(endpoint, "put", "/registry/secrets/kept", VALUE).returncode == 0
        saved = etcdctl(endpoint, "snapshot", "save", str(tmp / "saved.db"))
        assert saved.returncode == 0, saved.stderr
    return (tmp / "saved.db").read_bytes()


async def upgrading_manager(env: InProcessCoordinator, hostname: str) -> dict[str, str]:
    """A manager of lab, approved, in Upgrade: as its agent is while it runs upgrade items."""
    agent = await env.register(hostname)
    await env.call("POST", f"/v1/machines/{agent['machine_id']}/approve", 200,
                   json={"role": "manager"})
    machine = await env.store.get_machine(agent["machine_id"])
    assert machine is not None
    await env.coordinator.writes.apply(Change(machines=[
        replace(machine, state=MachineState.UPGRADE, state_since=env.clock.now)]))
    return agent


async def upload(env: InProcessCoordinator, agent: dict[str, str], data: bytes,
                 item: str = "etcd-snapshot") -> dict[str, object]:
    """What the agent's own client does once the item succeeded."""
    client = CoordinatorClient([Endpoint(str(env.client.make_url("")).rstrip("/"))])
    return await client.upload_etcd_snapshot(agent["machine_id"], agent["credential"], item,
                                             io.BytesIO(data))


@pytest.fixture
async def env(tmp_path: Path) -> InProcessCoordinator:  # type: ignore[misc]
    async with in_process_coordinator(tmp_path, cluster=CLUSTER) as running:
        yield running


async def test_a_snapshot_uploaded_sealed_downloaded_whole_restores_a_real_etcd(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    data = await asyncio.to_thread(etcd_snapshot, tmp_path)
    agent = await upgrading_manager(env, "m1")
    kept = await upload(env, agent, data)
    assert (kept["size"], kept["sha256"], kept["subject"], kept["before"]) == \
        (len(data), hashlib.sha256(data).hexdigest(), "m1", "upgrade")
    listed = await env.call("GET", "/v1/clusters/lab/etcd-snapshots", 200)
    assert [s["id"] for s in listed] == [kept["id"]]
    events = await env.call("GET", "/v1/events?kind=etcd-snapshot", 200)
    assert f"etcd snapshot {kept['id']} kept before m1's upgrade to release 1.0" in \
        events[-1]["message"]
    # sealed at rest: neither the snapshot's bytes nor the value it holds are in the file
    database = (tmp_path / "coordinator.db").read_bytes() + \
        (tmp_path / "coordinator.db-wal").read_bytes()
    assert VALUE.encode() not in database and data[:4096] not in database

    out = tmp_path / "restore" / "snapshot.db"
    out.parent.mkdir()
    said = await env.cli("cluster", "etcd-snapshot", "lab", "--out", str(out))
    assert f"etcd snapshot {kept['id']} of cluster lab, {len(data)} bytes" in said
    assert out.read_bytes() == data and out.stat().st_mode & 0o777 == 0o600
    listing = await env.cli("cluster", "etcd-snapshots", "lab")
    assert "m1's upgrade to 1.0" in listing and kept["id"] in listing

    # the restore of docs/kubernetes.md, "Restoring etcd from a snapshot" (etcd-restore.sh)
    restored, peer = tmp_path / "restore" / "etcd", f"http://127.0.0.1:{free_port()}"
    done = etcdctl(None, "snapshot", "restore", str(out), "--name", "m1", "--initial-cluster",
                   f"m1={peer}", "--initial-advertise-peer-urls", peer, "--data-dir",
                   str(restored))
    assert done.returncode == 0, done.stderr
    with real_etcd(restored, peer) as endpoint:
        got = etcdctl(endpoint, "get", "/registry/secrets/kept", "--print-value-only")
    assert got.stdout.strip() == VALUE


async def test_the_newest_are_kept_and_a_backup_carries_the_newest(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    agent = await upgrading_manager(env, "m1")
    sent = [os.urandom(300_000) for _ in range(3)]
    kept = []
    for data in sent:
        kept.append(await upload(env, agent, data))
        env.clock.now += 10
    listed = await env.call("GET", "/v1/clusters/lab/etcd-snapshots", 200)
    assert [s["id"] for s in listed] == [kept[2]["id"], kept[1]["id"]]  # keep: 2
    events = await env.call("GET", "/v1/events?kind=etcd-snapshot", 200)
    assert "1 older deleted (settings.etcdSnapshots.keep)" in events[-1]["message"]
    # the data dir's key, which seals them (the harness's store uses it without its file)
    (tmp_path / "secrets.key").write_bytes(base64.b64encode(bytes(range(32))) + b"\n")
    response = await env.client.post("/v1/backup", headers=env.admin)
    archive = from_bytes(await response.read(), "backup")  # read as restore reads it
    assert [row["id"] for row in archive.tables["etcd_snapshots"]] == [kept[2]["id"]]
    assert len(archive.tables["etcd_snapshot_chunks"]) == 1
    assert sent[2] not in str(archive.tables).encode()  # sealed there too


async def test_a_snapshot_over_a_chunk_comes_back_whole(env: InProcessCoordinator,
                                                        tmp_path: Path) -> None:
    """Larger than the MiB a row holds: three rows, read back in order."""
    await env.call("PUT", "/v1/clusters", 200,
                   data=CLUSTER.replace("maxSizeMiB: 1", "maxSizeMiB: 4"))
    agent = await upgrading_manager(env, "m1")
    data = os.urandom(2_500_000)
    kept = await upload(env, agent, data)
    out = tmp_path / "big.db"
    await env.cli("cluster", "etcd-snapshot", "lab", str(kept["id"]), "--out", str(out))
    assert out.read_bytes() == data


async def test_what_does_not_qualify_is_refused_saying_why_and_nothing_is_kept(
        env: InProcessCoordinator) -> None:
    manager = await upgrading_manager(env, "m1")
    worker = await env.register("w1")
    await env.call("POST", f"/v1/machines/{worker['machine_id']}/approve", 200,
                   json={"role": "worker"})
    idle = await env.register("m2")
    await env.call("POST", f"/v1/machines/{idle['machine_id']}/approve", 200,
                   json={"role": "manager"})
    refusals = [
        (worker, b"x", "etcd-snapshot", 403, "w1 is not a manager"),
        (manager, b"x", "kubeadm-upgrade", 404, "no manager item 'kubeadm-upgrade' with "
                                                "etcdSnapshotFrom"),
        (idle, b"x", "etcd-snapshot", 409, "m2 does not run upgrade items now"),
        (manager, os.urandom(2**20 + 1), "etcd-snapshot", 413,
         "larger than settings.etcdSnapshots.maxSizeMiB (1 MiB)"),
    ]
    for agent, data, item, status, message in refusals:
        with pytest.raises(Rejected) as refused:
            await upload(env, agent, data, item)
        assert refused.value.status == status and message in str(refused.value)
    # damaged on the way: the bytes that came are not the ones the digest names
    headers = {"Authorization": f"Bearer {manager['credential']}",
               "Content-Digest": "sha-256=:" + "A" * 43 + "=:"}
    response = await env.client.put(
        f"/v1/agent/machines/{manager['machine_id']}/etcd-snapshots/etcd-snapshot",
        data=b"etcd", headers=headers)
    assert response.status == 400
    assert "damaged on the way, and is not kept" in (await response.json())["error"]
    no_digest = await env.client.put(
        f"/v1/agent/machines/{manager['machine_id']}/etcd-snapshots/etcd-snapshot",
        data=b"etcd", headers={"Authorization": headers["Authorization"]})
    assert no_digest.status == 400
    assert await env.call("GET", "/v1/clusters/lab/etcd-snapshots", 200) == []
    assert await env.store.incomplete_etcd_snapshots(time.time() + 10**9) == []


@contextlib.asynccontextmanager
async def served_as_in_production(env: InProcessCoordinator, tmp_path: Path,
                                  **presentation: Any) -> AsyncIterator[int]:
    """env's service behind a second listener run as `coordinator serve` runs it (an
    AppRunner without handler cancellation: a handler whose client hung up goes on, unlike
    under aiohttp's TestServer): its port."""
    port = free_port()
    runner = web.AppRunner(create_app(env.coordinator, tmp_path, Presentation(
        advertise_url=f"http://127.0.0.1:{port}", **presentation), tmp_path), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("hang_up", [True, False])
async def test_an_upload_cut_off_is_not_kept_and_no_error_is_logged(
        env: InProcessCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        hang_up: bool) -> None:
    """The agent died halfway (its connection closed), or hangs (open, nothing more comes):
    fewer bytes than announced came. The refusal (or the body's deadline: a second's grace
    here, and a second per 64 KiB that came) ends the wait; what came of it is deleted."""
    agent = await upgrading_manager(env, "m1")
    began: list[str] = []
    begin = env.store.begin_etcd_snapshot

    async def noted(snapshot: EtcdSnapshot) -> None:
        began.append(snapshot.id)
        await begin(snapshot)

    env.store.begin_etcd_snapshot = noted  # type: ignore[method-assign]
    async with served_as_in_production(env, tmp_path, body_seconds=1) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write((f"PUT /v1/agent/machines/{agent['machine_id']}/etcd-snapshots/"
                      f"etcd-snapshot HTTP/1.1\r\nHost: x\r\n"
                      f"Authorization: Bearer {agent['credential']}\r\n"
                      f"Content-Digest: {'sha-256=:' + 'A' * 43 + '=:'}\r\n"
                      "Content-Length: 900000\r\n\r\n").encode() + b"x" * 70_000)
        await writer.drain()
        if hang_up:
            writer.close()
            await writer.wait_closed()

        async def none_left() -> bool:
            return not env.coordinator.etcd_snapshots._receiving and \
                await env.store.incomplete_etcd_snapshots(time.time() + 10**9) == []
        await env.until("the upload begins", lambda: asyncio.sleep(0, bool(began)))
        await env.until("the cut-off upload is dropped", none_left, timeout=10)
        if not hang_up:
            assert b" 408 " in await reader.read(100)  # the body's deadline
        writer.close()
    assert await env.call("GET", "/v1/clusters/lab/etcd-snapshots", 200) == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


async def test_a_download_the_client_hangs_up_on_ends_quietly(
        env: InProcessCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    await env.call("PUT", "/v1/clusters", 200,
                   data=CLUSTER.replace("maxSizeMiB: 1", "maxSizeMiB: 8"))
    kept = await upload(env, await upgrading_manager(env, "m1"), os.urandom(6 * 2**20))
    async with served_as_in_production(env, tmp_path) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write((f"POST /v1/clusters/lab/etcd-snapshots/{kept['id']}/download HTTP/1.1\r\n"
                      f"Host: x\r\nAuthorization: {env.admin['Authorization']}\r\n"
                      "Content-Length: 0\r\n\r\n").encode())
        assert b" 200 OK" in await reader.read(64 * 1024)
        writer.transport.abort()  # gone, with most of it unsent
        await asyncio.sleep(0.5)
        await env.call("GET", "/v1/clusters/lab/etcd-snapshots", 200)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


async def test_a_read_only_token_lists_snapshots_but_never_gets_their_bytes(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    agent = await upgrading_manager(env, "m1")
    kept = await upload(env, agent, b"etcd snapshot bytes")
    secret = new_token("admin")
    await env.store.add_admin_token(token_hash(secret), "viewer", READ_ONLY, env.clock.now)
    viewer = {"Authorization": f"Bearer {secret}"}
    assert [s["id"] for s in await env.call("GET", "/v1/clusters/lab/etcd-snapshots", 200,
                                            headers=viewer)] == [kept["id"]]
    await env.call("POST", f"/v1/clusters/lab/etcd-snapshots/{kept['id']}/download", 403,
                   headers=viewer)
    out = tmp_path / "s.db"
    said = await env.cli("cluster", "etcd-snapshot", "lab", "--out", str(out), token=secret,
                         exit_code=1)
    assert "read-only" in said and not out.exists()
    audit = await env.call("GET", "/v1/events?kind=audit", 200)
    assert not any("etcd-snapshots" in e["message"] for e in audit)
    await env.cli("cluster", "etcd-snapshot", "lab", "--out", str(out))
    audit = await env.call("GET", "/v1/events?kind=audit", 200)
    assert any(f"etcd-snapshots/{kept['id']}/download" in str(e) for e in audit), audit
    await env.call("POST", "/v1/clusters/lab/etcd-snapshots/nope/download", 404)
