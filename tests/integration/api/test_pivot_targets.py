"""A pivot's target is https with its CA, and every connection to it is verified against that
CA, the read-only copy's refresh included: a rogue answering at the target's URL (a
self-signed server, or plain HTTP) is never sent the target's admin token and changes
nothing in the old coordinator's store. The API and `coordinator pivot` refuse anything else,
naming why, before anything is recorded."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.transfer import pivot as pv
from coordinator.server.pki import Pki, create
from coordinator.service.pivots import PivotLedger, refresh_loop
from tests.support.builders import TEST_CIPHER
from tests.support.harness import InProcessCoordinator
from tests.support.ports import free_port
from tests.support.rogue import rogue_server
from tests.support.waiting import wait_until_async

TOKEN = "na-admin-" + "t" * 32  # the target's admin token the old coordinator keeps sealed


def target_ca(directory: Path) -> str:
    """The CA of the coordinator the pivot means (not the rogue's)."""
    pki = Pki(directory)
    create(pki, ["127.0.0.1"])
    return pki.ca_cert.read_text()


async def test_a_target_that_is_not_https_with_its_ca_is_refused_naming_why(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    ca = target_ca(tmp_path / "target")
    for body, field in (({"to": "https://new.example:8443", "token": TOKEN}, "caPem"),
                        ({"to": "http://new.example:8080", "caPem": ca, "token": TOKEN}, "to"),
                        ({"to": "https://new.example:8443", "caPem": "not a certificate",
                          "token": TOKEN}, "caPem"),
                        ({"to": "https://new.example:8443", "caPem": "4\U0002bc56o,\u00d4",
                          "token": TOKEN}, "caPem")):  # not ASCII (found by the fuzzer: a 500)
        answer = await env.call("POST", "/v1/pivot", 422, json=body)
        assert field in str(answer), (body, answer)
        assert "must be https:// with its CA" in str(answer) or "not a PEM" in str(answer)
    assert (await env.call("GET", "/v1/pivot", 200))["pivot"] is None  # nothing recorded


async def test_coordinator_pivot_refuses_a_plain_http_or_unpinned_target(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    token_file = tmp_path / "new.token"
    token_file.write_text(TOKEN)
    nowhere = f"127.0.0.1:{free_port()}"  # nothing to reach: refused before any connection
    plain = await env.cli("pivot", "--to", f"http://{nowhere}", "--to-token-file",
                          str(token_file), "--to-ca", "sha256:" + "0" * 64, exit_code=2)
    assert "--to" in plain and "must be https:// with its CA" in plain
    unpinned = await env.cli("pivot", "--to", f"https://{nowhere}", "--to-token-file",
                             str(token_file), exit_code=2)
    assert "--to-ca" in unpinned and "required" in unpinned
    not_a_ca = tmp_path / "ca.crt"
    not_a_ca.write_text("not a certificate")
    damaged = await env.cli("pivot", "--to", f"https://{nowhere}", "--to-token-file",
                            str(token_file), "--to-ca", str(not_a_ca), exit_code=2)
    assert "not a PEM certificate" in damaged
    assert (await env.call("GET", "/v1/pivot", 200))["pivot"] is None


async def store_state(env: InProcessCoordinator) -> tuple[Any, ...]:
    """What the old coordinator's copy holds: each cluster's spec, each machine."""
    clusters = await env.store.list_clusters()
    machines = await env.store.list_machines()
    return ([(c.spec.name, c.generation, c.spec.model_dump_json()) for c in clusters],
            sorted((m.id, m.state, m.release, json.dumps(m.labels)) for m in machines))


@pytest.mark.parametrize("rogue_kind", ["self-signed", "self-signed-unpinned", "plain-http"])
async def test_a_rogue_at_the_targets_url_gets_no_token_and_changes_nothing(
        env: InProcessCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        rogue_kind: str) -> None:
    """Once done, the old coordinator refreshes its copy from the target with the target's
    admin token. A rogue answers there instead, with a spec of another release and no
    machines (which would delete every machine of the copy): self-signed while the pivot pins
    the target's CA, self-signed or plain HTTP while the pivot names no CA (recorded so by an
    older version, which took targets without one)."""
    for hostname in ("w0", "w1"):
        await env.register(hostname)
    (view,) = await env.call("GET", "/v1/clusters", 200)
    injected = {**view["spec"], "release": "rogue"}
    answers = {"/v1/clusters": [{**view, "spec": injected}],
               "/v1/machines": {"machines": [], "total": 0}}
    before = await store_state(env)
    pki_dir = None if rogue_kind == "plain-http" else tmp_path / "rogue"
    with rogue_server(pki_dir, answers) as rogue:
        path = tmp_path / "pivot.json"
        ledger = PivotLedger(path, TEST_CIPHER, time.time)
        pivot = ledger.begin(rogue.url.replace("http://", "https://"),
                             target_ca(tmp_path / "target"), TOKEN)
        for step in pv.ORDER[1:]:
            ledger.record(pivot.id, step)
        if rogue_kind != "self-signed":  # as an older version recorded it: no CA
            saved = json.loads(path.read_text())
            saved["pivot"].update(to_url=rogue.url, ca_pem=None)
            path.write_text(json.dumps(saved))
            ledger = PivotLedger(path, TEST_CIPHER, time.time)
        caplog.set_level(logging.WARNING, logger="coordinator")
        refreshing = asyncio.create_task(refresh_loop(ledger, env.coordinator.writes,
                                                      interval=0.1, tick=0.05))
        try:
            await wait_until_async(lambda: rogue.requests or sum(
                "cannot refresh the copy" in r.getMessage() for r in caplog.records) >= 2, 15,
                "two refreshes tried")
        finally:
            refreshing.cancel()
            await asyncio.gather(refreshing, return_exceptions=True)
    assert rogue.authorizations == []
    assert await store_state(env) == before
    said = caplog.text
    if rogue_kind == "self-signed":
        assert rogue.connections > 0 and rogue.requests == []  # TLS refused its certificate
        assert "certificate verify failed" in said, said
    else:
        assert rogue.connections == 0  # not even tried
        assert "has no CA to verify it by" in said, said
