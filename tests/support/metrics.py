"""A served coordinator's /metrics, read as Prometheus scrapes it (no token), and one value
picked out of the text."""

from __future__ import annotations

import ssl
import urllib.request

from tests.support.harness import ServedCoordinator


def tls(served: ServedCoordinator) -> ssl.SSLContext:
    """Trusting the coordinator's own CA."""
    return ssl.create_default_context(cafile=str(served.ca_file))


def scrape(served: ServedCoordinator, timeout: float = 10) -> str:
    with urllib.request.urlopen(f"{served.url}/metrics", timeout=timeout,
                                context=tls(served)) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return str(response.read().decode())


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample name{labels} in the text; None when there is none."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head == (f"{name}{{{wanted}}}" if labels else name):
            return float(value)
    return None


def polls_parked(served: ServedCoordinator) -> int:
    """Machines whose assignment long-poll the coordinator holds now."""
    return int(metric(scrape(served), "nodeagent_agents_connected") or 0)
