"""What a coordinator exposes to anyone who can reach it: refused admin attempts leave an
audit trace that a flood cannot grow, /metrics asks for a token when serve has one, and every
answer carries the headers that keep the dashboard to its own code and out of frames."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.client import ClientError
from tests.support.harness import ServedCoordinator, running_coordinator

FLOOD = 1000


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[ServedCoordinator]:
    """Plain HTTP, so that a thousand requests need no thousand handshakes."""
    with running_coordinator(tmp_path, tls=False) as served:
        yield served


def answer(served: ServedCoordinator, method: str, path: str,
           token: str | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    connection.request(method, path, headers={"Authorization": f"Bearer {token}"} if token else {})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def refusal_events(served: ServedCoordinator) -> list[dict[str, Any]]:
    return [e for e in served.admin.get("/v1/events?kind=audit") if "refused" in e["data"]]


def test_a_flood_of_bad_tokens_leaves_a_few_audit_events_that_count_them(
        plain: ServedCoordinator) -> None:
    reader = plain.admin.request("POST", "/v1/admin-tokens",
                                 body={"name": "grafana", "role": "read-only"})["token"]
    connection = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=10)
    for number in range(FLOOD):  # one connection, kept alive: the flood is cheap to send
        connection.request("GET", "/v1/machines", headers={"Authorization": f"Bearer bad-{number}"})
        response = connection.getresponse()
        response.read()
        assert response.status == 401
    connection.close()
    for _ in range(5):
        assert answer(plain, "POST", "/v1/clusters/lab/upgrade/pause", reader).status == 403
    plain.stop()  # a stop writes what was counted (a running one writes it every minute)
    plain.start()

    found = refusal_events(plain)
    unauthorized = [e for e in found if e["data"]["status"] == 401]
    forbidden = [e for e in found if e["data"]["status"] == 403]
    assert len(found) <= 4, found  # a window's edge may split each in two
    assert sum(e["data"]["refused"] for e in unauthorized) == FLOOD
    assert sum(e["data"]["refused"] for e in forbidden) == 5
    assert {e["data"]["source"] for e in found} == {"127.0.0.1"}
    if len(unauthorized) == 1:
        assert unauthorized[0]["message"] == (
            f"127.0.0.1: admin request refused {FLOOD} times (401: unknown or revoked admin "
            "token), last GET /v1/machines")
    assert "'grafana' is read-only" in forbidden[-1]["message"]


def test_metrics_ask_for_the_token_when_serve_has_one(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text("scrape-" + "x" * 32 + "\n")
    with running_coordinator(tmp_path, tls=False,
                             serve_args=["--metrics-token-file", str(token_file)]) as served:
        assert answer(served, "GET", "/metrics").status == 401
        assert answer(served, "GET", "/metrics", "scrape-wrong").status == 401
        with pytest.raises(ClientError) as refused:
            served.client(served.token_file.read_text().strip()).get("/metrics")
        assert refused.value.status == 401  # an admin token is not the metrics token
        assert answer(served, "GET", "/metrics", "scrape-" + "x" * 32).status == 200
        served.stop()
        served.start()
        assert sum(e["data"]["refused"] for e in refusal_events(served)) == 3


def test_metrics_are_open_by_default(plain: ServedCoordinator) -> None:
    assert answer(plain, "GET", "/metrics").status == 200


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/ui/index.html"), ("GET", "/ui/app.js"), ("GET", "/"), ("GET", "/healthz"),
    ("GET", "/v1/machines"), ("GET", "/metrics"), ("GET", "/nowhere"),
])
def test_every_answer_carries_the_security_headers(
        plain: ServedCoordinator, method: str, path: str) -> None:
    headers = answer(plain, method, path).headers
    policy = headers["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
