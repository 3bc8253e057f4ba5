"""What an admin and an agent wait for while a bench script loads a served coordinator: each
prober sends one request at a time, on its own thread, and records how long each took (a
failure counts as the time it took to fail, and is counted)."""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.cli.client import AdminClient
from nodeagent.client import CoordinatorClient
from nodeagent.wire.endpoint import Endpoint
from tests.support.driver import Registered
from tests.support.harness import ServedCoordinator


def as_another_machine() -> None:
    """For a bench's hostile process: yield the CPU to the coordinator and the probers, as an
    attacker on a machine of its own would; on a shared 2-core machine its own work would
    otherwise be most of what the probers measure."""
    os.nice(10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


@dataclass
class Prober:
    """send() every `interval` seconds (or as soon as the last one ended, if later) until
    stop()."""

    name: str
    send: Callable[[], object]
    interval: float = 0.05
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Prober:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def reset(self) -> None:
        """Forget what was recorded so far (the warm-up)."""
        self.latencies, self.failures = [], []

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.send()
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            self.latencies.append(time.monotonic() - started)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def summary(self) -> str:
        values = self.latencies
        worst = max(values) if values else float("nan")
        failed = f", {len(self.failures)} failed ({self.failures[0]})" if self.failures else ""
        return (f"{self.name:<28s} n={len(values):>5d}  p50 {ms(percentile(values, 0.5)):>9s}"
                f"  p99 {ms(percentile(values, 0.99)):>9s}  max {ms(worst):>9s}{failed}")


def admin_prober(served: ServedCoordinator, path: str = "/v1/machines") -> Prober:
    """GET path as the admin, on a new connection each time (as the CLI does)."""
    admin = AdminClient(served.url, served.token_file.read_text().strip(), timeout=10,
                        ca_file=str(served.ca_file))
    return Prober(f"admin GET {path}", lambda: admin.get(path))


def agent_prober(served: ServedCoordinator, agent: Registered) -> Prober:
    """Heartbeats of a registered agent through the agent's own client (its kept-alive
    connections)."""
    client = CoordinatorClient([Endpoint(served.url)], timeout=10,
                               context=ssl.create_default_context(cafile=str(served.ca_file)))
    loop = asyncio.new_event_loop()
    return Prober("agent heartbeat", lambda: loop.run_until_complete(
        client.heartbeat(agent["machine_id"], agent["credential"])))


def download_prober(served: ServedCoordinator, agent: Registered, name: str) -> Prober:
    """Downloads of artifact name, whole, through the agent's own client (the API's 307 to
    the artifact port followed, as an agent's download does), waiting 90 s for an answer (the
    client's artifact() waits three times its timeout)."""
    client = CoordinatorClient([Endpoint(served.url)], timeout=30,
                               context=ssl.create_default_context(cafile=str(served.ca_file)))
    loop = asyncio.new_event_loop()

    async def download() -> int:
        body = await client.artifact(agent["credential"], name, {})
        return sum([len(chunk) async for chunk in body.chunks])

    return Prober(f"agent download of {name}", lambda: loop.run_until_complete(download()))
