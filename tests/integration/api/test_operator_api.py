"""Status, event history, event stream, metrics and dashboard files, from a real `coordinator serve`
process, with agents simulated over HTTP."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.client import ClientError
from tests.support.driver import Registered
from tests.support.harness import COORDINATOR, ServedCoordinator, running_coordinator
from tests.support.metrics import metric, scrape, tls
from tests.support.waiting import wait_until


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[ServedCoordinator]:
    with running_coordinator(tmp_path) as served:
        yield served


def preparing_worker(c: ServedCoordinator, outputs: tuple[str, str] = ("", "")) -> Registered:
    """w1 approved and in Prepare with its two prepare items reported, and w2 Pending."""
    w1 = c.register("w1")
    c.register("w2")
    c.admin.request("POST", "/v1/machines/w1/approve", body={"role": "worker"})
    c.wait_state("w1", "Prepare")
    c.report_item(w1, "base", "succeeded", output=outputs[0], seconds=2.0)
    c.report_item(w1, "runtime", "failed", output=outputs[1], seconds=0.2)
    return w1


def stages(c: ServedCoordinator) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in c.admin.get("/v1/clusters/lab/status")["stages"]}


def test_status_shows_stages_rollout_and_each_machines_step(coordinator: ServedCoordinator) -> None:
    c = coordinator
    m1, w1 = c.register("m1"), c.register("w1")
    c.register("w2", failing=True)
    assert stages(c)["approved"]["state"] == "failing"
    assert "w2 fails hard prechecks: os: Plan 9 is not supported" in stages(c)["approved"]["message"]
    c.admin.request("POST", "/v1/machines/m1/approve", body={"role": "manager"})
    c.admin.request("POST", "/v1/machines/w1/approve", body={"role": "worker"})
    c.wait_state("w1", "Prepare")
    c.report_item(w1, "base", "succeeded")
    c.report_item(w1, "runtime", "failed", attempt=3, error="exit status 100", exit_code=100)
    c.report_all(m1)
    c.wait_state("m1", "Deploy")
    c.report_item(m1, "control-plane", "running")

    status = c.admin.get("/v1/clusters/lab/status")
    by_name = {s["name"]: s for s in status["stages"]}
    assert [s["name"] for s in status["stages"]] == [
        "registered", "approved", "prepared", "first-manager", "managers", "workers", "ready"]
    assert by_name["first-manager"]["state"] == "in-progress"
    assert by_name["first-manager"]["message"] == "m1 deploying"
    assert by_name["prepared"]["state"] == "failing"
    assert "w1: runtime failing (attempt 3): exit status 100" in by_name["prepared"]["message"]
    assert all(s["since"] and s["since"] <= time.time() for s in status["stages"])
    assert (status["rollout"]["done"], status["rollout"]["total"]) == (2, 5)

    steps = {m["hostname"]: m["step"] for m in status["machines"]}
    assert (steps["m1"]["phase"], steps["m1"]["index"], steps["m1"]["total"]) == ("deploy", 1, 1)
    assert (steps["m1"]["item"], steps["m1"]["status"], steps["m1"]["attempt"]) == (
        "control-plane", "running", 1)
    assert 0 <= steps["m1"]["item_elapsed"] < 10
    assert (steps["w1"]["index"], steps["w1"]["item"], steps["w1"]["status"]) == (2, "runtime", "failed")
    assert 20 < steps["w1"]["next_retry_in"] <= 30 and steps["w1"]["error"] == "exit status 100"
    assert steps["w2"]["status"] is None  # Pending runs no phase

    alone = c.admin.get("/v1/clusters/lab/status?machines=false")  # as the dashboard asks
    assert alone["machines"] is None
    assert alone["counts"] == status["counts"]
    assert [s["state"] for s in alone["stages"]] == [s["state"] for s in status["stages"]]
    with pytest.raises(ClientError) as refused:
        c.admin.get("/v1/clusters/lab/status?machines=some")
    assert refused.value.status == 422 and "machines" in str(refused.value)


def test_events_filter_by_hostname_kind_time_and_come_newest_first(coordinator: ServedCoordinator) -> None:
    c = coordinator
    preparing_worker(c, outputs=("one\n", "two\n"))

    mine = c.admin.get("/v1/events?machine=w1")
    assert {e["hostname"] for e in mine} == {"w1"}
    assert [e["kind"] for e in mine] == ["registered", "approved", "state", "item", "item"]
    items = c.admin.get("/v1/events?machine=w1&kind=item&order=desc&limit=1")
    assert [e["data"]["output"] for e in items] == ["two\n"]
    assert [e["kind"] for e in c.admin.get("/v1/events?kind=approved,registered")] == [
        "registered", "registered", "approved"]
    assert c.admin.get(f"/v1/events?since={time.time() + 60}") == []
    with pytest.raises(ClientError) as bad:
        c.admin.get("/v1/events?order=sideways")
    assert bad.value.status == 422 and "order: must be asc or desc" in str(bad.value)


def test_the_event_stream_delivers_new_events_at_once_and_resumes_after_the_last_id(
        coordinator: ServedCoordinator) -> None:
    c = coordinator
    c.register("old")  # before the stream opened: not sent
    received: queue.Queue[dict[str, Any]] = queue.Queue()
    opened = threading.Event()

    def listen() -> None:
        """The stream read as its bytes come, so the test knows when the server has it open
        (its first line, a comment the CLI's client skips)."""
        request = urllib.request.Request(
            f"{c.url}/v1/events/stream?cluster=lab&kind=registered,approved",
            headers={"Authorization": f"Bearer {c.admin.token}"})
        with urllib.request.urlopen(request, timeout=30, context=tls(c)) as response:
            for raw in response:
                line = raw.decode().strip()
                if line == ": stream open":
                    opened.set()
                elif line.startswith("data:"):
                    received.put(json.loads(line[5:]))

    threading.Thread(target=listen, daemon=True).start()
    assert opened.wait(10), "the event stream did not open"
    sent = time.monotonic()
    c.register("new")
    first = received.get(timeout=5)
    assert (first["kind"], first["hostname"]) == ("registered", "new")
    assert time.monotonic() - sent < 1.0  # woken by the notifier, not by a polling interval
    c.admin.request("POST", "/v1/machines/new/approve", body={"role": "worker"})
    assert received.get(timeout=5)["kind"] == "approved"

    request = urllib.request.Request(f"{c.url}/v1/events/stream", headers={
        "Authorization": f"Bearer {c.admin.token}", "Last-Event-ID": str(first["id"])})
    with urllib.request.urlopen(request, timeout=10, context=tls(c)) as response:
        lines = []
        while len([x for x in lines if x.startswith("data:")]) < 2:
            lines.append(response.readline().decode().strip())
    assert any('"kind":"approved"' in x for x in lines)  # what came after the id it had
    assert not any('"hostname":"old"' in x for x in lines)
    with pytest.raises(ClientError) as refused:
        next(c.client("wrong").stream("/v1/events/stream"))
    assert refused.value.status == 401


def test_the_coordinator_collects_cyclic_garbage_on_its_own_schedule(tmp_path: Path) -> None:
    """`serve --gc-interval 1`: the survivors of start-up are frozen, a collection runs every
    second and frees the cycles that requests leave behind (aiohttp's answer to an unknown
    path is an exception, whose traceback holds the frames that hold it)."""
    with running_coordinator(tmp_path, serve_args=["--gc-interval", "1"]) as c:
        text = scrape(c)
        assert metric(text, "nodeagent_gc_collections_total", generation="all") == 1
        scheduled = metric(text, "nodeagent_gc_collections_total", generation="2")
        for _ in range(20):
            with pytest.raises(ClientError, match="Not Found"):
                c.admin.get("/v1/no-such-path")

        def freed() -> float:
            text = scrape(c)
            return sum(metric(text, "nodeagent_gc_collected_objects_total", generation=g) or 0
                       for g in ("0", "1", "2"))
        wait_until(lambda: freed() > 0, message="cyclic garbage freed")
        wait_until(lambda: metric(scrape(c), "nodeagent_gc_collections_total",
                                  generation="2") >= scheduled + 2,
                   message="two scheduled collections")


def test_a_negative_gc_interval_is_refused_naming_the_option(tmp_path: Path) -> None:
    refused = subprocess.run([COORDINATOR, "serve", "--data-dir", str(tmp_path),
                              "--gc-interval", "-1"], capture_output=True, text=True, timeout=60,
                             check=False)
    assert refused.returncode == 2 and "--gc-interval" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


def test_metrics_count_machines_items_api_latency_and_connected_agents(
        coordinator: ServedCoordinator) -> None:
    c = coordinator
    w1 = preparing_worker(c)

    text = scrape(c)
    assert metric(text, "nodeagent_machines", cluster="lab", state="Prepare") == 1
    assert metric(text, "nodeagent_machines", cluster="lab", state="Pending") == 1
    assert metric(text, "nodeagent_machines", cluster="lab", state="Ready") == 0
    assert metric(text, "nodeagent_item_duration_seconds_count",
                  cluster="lab", phase="prepare", status="succeeded") == 1
    assert metric(text, "nodeagent_item_duration_seconds_bucket",
                  cluster="lab", phase="prepare", status="failed", le="0.5") == 1
    assert metric(text, "nodeagent_api_request_duration_seconds_count", code="200",
                  endpoint="/v1/machines/{ref}", method="GET") >= 1
    assert metric(text, "nodeagent_api_request_duration_seconds_count", code="201",
                  endpoint="/v1/agent/register", method="POST") == 2
    assert "nodeagent_drain_duration_seconds" in text and "nodeagent_evictions_blocked" in text
    assert metric(text, "nodeagent_agents_connected") == 0

    held = c.assignment(w1)["generation"]  # an agent ahead of it would be answered at once
    polling = threading.Thread(target=lambda: c.assignment(w1, after=held, wait=3), daemon=True)
    polling.start()
    wait_until(lambda: metric(scrape(c), "nodeagent_agents_connected") == 1,
               message="the long-poll counted")
    polling.join(10)
    assert metric(scrape(c), "nodeagent_agents_connected") == 0


def test_the_dashboard_is_served_without_a_token_and_the_api_still_needs_one(
        coordinator: ServedCoordinator) -> None:
    with urllib.request.urlopen(f"{coordinator.url}/", timeout=10,
                                context=tls(coordinator)) as response:
        assert response.url.endswith("/ui/index.html")
        assert "<title>nodeagent coordinator</title>" in response.read().decode()
    for name in ("app.js", "style.css"):
        with urllib.request.urlopen(f"{coordinator.url}/ui/{name}", timeout=10,
                                    context=tls(coordinator)) as response:
            assert response.status == 200 and len(response.read()) > 1000
    with pytest.raises(ClientError) as missing:
        coordinator.client(None).get("/ui/..%2Fapp.py")
    assert missing.value.status == 404
    with pytest.raises(ClientError) as refused:
        coordinator.client(None).get("/v1/clusters/lab/status")
    assert refused.value.status == 401
