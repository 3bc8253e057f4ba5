"""The coordinator under test, in one of two flavours sharing the driver of driver.py (admin
calls and simulated agents):

- InProcessCoordinator: the service over a real store, its HTTP API served by aiohttp on a
  loopback port, all in the caller's event loop, so a test may also reach the service and the
  store, and move the clock;
- ServedCoordinator: `coordinator serve` as a process, from a data dir, stopped and started at
  will, reached over HTTPS with its own CA (or plain HTTP), and by its CLI.

Tests, the bench scripts and scripts/demo.py all start their coordinators here."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from click.testing import CliRunner, Result

from coordinator.cli import main
from coordinator.cli.client import AdminClient, ClientError
from coordinator.domain.machines.tokens import ADMIN, new_token, token_hash
from tests.support.builders import API_CLUSTER, OPERATOR_CLUSTER, TEST_CIPHER
from tests.support.driver import AsyncDriver, Call, Registered, SyncDriver
from tests.support.ports import free_port
from tests.support.process import serving
from tests.support.waiting import wait_until_async

# The in-process flavour's service, API and store are imported where it starts (below): they
# are most of this module's import, which a served coordinator's driver (a bench script, each a
# process of its own, and its spawned helpers) never needs.
if TYPE_CHECKING:
    from aiohttp.test_utils import TestClient

    from coordinator.service.coordinator import Coordinator
    from coordinator.store.base import Store

COORDINATOR = str(Path(sys.executable).with_name("coordinator"))


class ManualClock:
    """A clock tests move by hand: it says what they set `now` to."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- in-process ----------------------------------------------------------------------------------

@dataclass
class InProcessCoordinator(AsyncDriver):
    """The service over a real store, its API on a loopback port, in the caller's event loop:
    driven over HTTP like a served one, and open to the test (service, store, clock) besides."""

    client: TestClient  # the HTTP API, on its loopback port
    coordinator: Coordinator  # the service
    store: Store  # the service's store, open
    clock: Any  # a ManualClock unless the test gave another
    admin: dict[str, str]  # the admin's Authorization header
    agents: dict[str, Registered] = field(default_factory=dict)  # by hostname, as registered

    async def call(self, method: str, path: str, status: int, **kwargs: Any) -> Any:
        """The JSON answer of a request (as the admin unless headers say otherwise), which
        must have this status."""
        kwargs.setdefault("headers", self.admin)
        response = await self.client.request(method, path, **kwargs)
        body = await response.json()
        assert response.status == status, body
        return body

    async def send(self, call: Call) -> Any:
        token = call.join_token or (call.agent or {}).get("credential")
        headers = self.admin if token is None else {"Authorization": f"Bearer {token}"}
        return await self.call(call.method, call.path, call.expect, json=call.body,
                               headers=headers)

    async def cli(self, *args: str, token: str | None = None, exit_code: int = 0) -> str:
        """The CLI's output (its errors too) against this coordinator, as the admin (or with
        the given token); it must exit with exit_code."""
        return (await self.cli_result(*args, token=token, exit_code=exit_code)).output

    async def cli_result(self, *args: str, token: str | None = None,
                         exit_code: int = 0) -> Result:
        """The CLI's run as cli makes it, its stdout and stderr apart (what a script reads)."""
        url = str(self.client.make_url("")).rstrip("/")
        result = await asyncio.to_thread(CliRunner().invoke, main, [
            "--url", url, "--token", token or self.admin["Authorization"].split()[1], *args])
        assert result.exit_code == exit_code, result.output
        return result

    async def until(self, what: str, predicate: Callable[[], Awaitable[bool]],
                    timeout: float = 15) -> None:
        """predicate true, with a reconcile pass after every time it is not."""
        async def settled() -> bool:
            if await predicate():
                return True
            await self.coordinator.reconciler.reconcile_once()
            return False

        await wait_until_async(settled, timeout, what, interval=0.05)

    async def parked(self, *agents: Registered) -> None:
        """Until each agent's assignment long-poll waits for its machine's next wake."""
        await wait_until_async(
            lambda: all(self.coordinator.notifier.waiting(a["machine_id"]) for a in agents),
            message="the long-polls parked")

    @contextlib.asynccontextmanager
    async def background(self, tick: float = 1.0) -> AsyncIterator[None]:
        """The reconcile loop (once this replica leads) and the heartbeat writer running, as
        `coordinator serve` runs them."""
        tasks = [asyncio.create_task(self.coordinator.run(tick=tick)),
                 asyncio.create_task(self.coordinator.write_heartbeats())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def admin_header(store: Store, now: float) -> dict[str, str]:
    """The Authorization header of a new admin token in store."""
    secret = new_token("admin")
    await store.add_admin_token(token_hash(secret), "tests", ADMIN, now)
    return {"Authorization": f"Bearer {secret}"}


@contextlib.asynccontextmanager
async def in_process_coordinator(
        directory: Path, cluster: str | None = API_CLUSTER, store: Store | None = None,
        clock: Callable[[], float] | None = None,
        **presentation: Any) -> AsyncIterator[InProcessCoordinator]:
    """The service on store (opened here and closed after; default: SQLite in directory,
    which also holds the artifacts, sealing secrets with TEST_CIPHER), its clock a ManualClock
    unless one is given, an admin token made, and cluster (a spec's text) applied; presentation:
    Presentation's fields besides the URL (its rate limits...). Closed on leaving."""
    from aiohttp.test_utils import TestClient, TestServer

    from coordinator.api.app import create_app
    from coordinator.api.context import Presentation
    from coordinator.service.coordinator import Coordinator
    from coordinator.store.sqlite import SQLiteStore

    store = store or SQLiteStore(directory / "coordinator.db", TEST_CIPHER)
    clock = clock or ManualClock()
    await store.open()
    try:
        coordinator = Coordinator(store, clock=clock)
        port = free_port()
        app = create_app(coordinator, directory,
                         Presentation(advertise_url=f"http://127.0.0.1:{port}", **presentation),
                         directory)
        client = TestClient(TestServer(app, host="127.0.0.1", port=port))
        await client.start_server()
        try:
            running = InProcessCoordinator(client, coordinator, store, clock,
                                           await admin_header(store, clock()))
            if cluster is not None:
                await running.call("PUT", "/v1/clusters", 200, data=cluster)
            yield running
        finally:
            await client.close()
            await coordinator.close()
    finally:
        await store.close()


# -- as a process --------------------------------------------------------------------------------

@dataclass
class ServedCoordinator(SyncDriver):
    """`coordinator serve` from a data dir on the URL's port, stopped and started at will (a
    restarted one is where the agents look). Plain HTTP (--insecure-http) when the URL says
    http. prefix (e.g. nsenter into a network namespace) runs it and its CLI: then only cli()
    reaches it, not admin or client() from this process."""

    url: str
    data: Path
    log: Path
    serve_args: tuple[str, ...] = ()
    prefix: tuple[str, ...] = ()
    listen: str = "127.0.0.1"  # the address it binds, on the URL's port
    agents: dict[str, Registered] = field(default_factory=dict)  # by hostname, as registered
    process: subprocess.Popen[bytes] | None = None
    _serving: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)
    _clients: dict[str | None, AdminClient] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def admin(self) -> AdminClient:
        """With the token init (or, over plain HTTP, serve) wrote."""
        return self.client(self.token_file.read_text().strip())

    @property
    def tls(self) -> bool:
        return self.url.startswith("https:")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def init(self, *args: str) -> None:
        """`coordinator init`: its CA, certificate (for 127.0.0.1, and names in args) and
        admin token in the data dir."""
        subprocess.run([*self.prefix, COORDINATOR, "init", "--data-dir", str(self.data),
                        "--listen", f"{self.listen}:{self.port}", "--name", "127.0.0.1", *args],
                       check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        """Serve, and return once it answers; fail with its log if it exits first."""
        argv = [*self.prefix, COORDINATOR, "serve", "--data-dir", str(self.data),
                "--listen", f"{self.listen}:{self.port}",
                *([] if self.tls else ["--insecure-http"]), *self.serve_args]
        self.process = self._serving.enter_context(serving(
            argv, self.log, self._answers, f"coordinator on port {self.port}",
            interval=0.1))

    def stop(self, crash: bool = False) -> None:
        """Terminate it (or, with crash, SIGKILL it: no shutdown code runs) and wait; its pid
        stays known."""
        if crash and self.process is not None:
            self.process.kill()
        self._serving.close()  # terminates (a no-op after the kill) and waits

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _answers(self) -> bool:
        if self.prefix:  # this process cannot reach the namespace it serves in
            return self.cli("cluster", "get", ok=False).returncode == 0
        try:
            AdminClient(self.url, None, timeout=1, ca_file=self._ca).get("/healthz")
        except ClientError:
            return False
        return True

    @property
    def pid(self) -> int:
        """The process's, running or the last one stopped."""
        assert self.process is not None, "never started"
        return self.process.pid

    @property
    def token_file(self) -> Path:
        return self.data / "admin.token"

    @property
    def ca_file(self) -> Path:
        return self.data / "pki" / "ca.crt"

    @property
    def _ca(self) -> str | None:
        return str(self.ca_file) if self.tls else None

    def client(self, token: str | None) -> AdminClient:
        """A client with this token (an admin's, an agent's credential, or none)."""
        if token not in self._clients:
            self._clients[token] = AdminClient(self.url, token, ca_file=self._ca)
        return self._clients[token]

    def send(self, call: Call) -> Any:
        token = call.join_token or (call.agent or {}).get("credential")
        client = self.admin if token is None else self.client(token)
        try:
            return client.request(call.method, call.path, body=call.body)
        except ClientError as error:
            if error.status != call.expect:
                raise
            return {"error": str(error), "problems": error.problems}

    def cli_argv(self, *args: str) -> list[str]:
        return [*self.prefix, COORDINATOR, "--url", self.url, "--token-file",
                str(self.token_file), *(["--ca", str(self.ca_file)] if self.tls else []), *args]

    def cli(self, *args: str, ok: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.cli_argv(*args), capture_output=True, text=True,
                                timeout=timeout, check=False)
        if ok:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def cli_json(self, *args: str, timeout: float = 30) -> Any:
        return json.loads(self.cli(*args, "--output", "json", timeout=timeout).stdout)


def restore(archive: Path, data: Path, *store: str) -> subprocess.CompletedProcess[str]:
    """`coordinator restore` of archive into the data dir (and store: --store DSN)."""
    return subprocess.run([COORDINATOR, "restore", str(archive), "--data-dir", str(data),
                           *store], capture_output=True, text=True, timeout=120, check=False)


@contextlib.contextmanager
def running_coordinator(tmp: Path, cluster: str | None = OPERATOR_CLUSTER,
                        serve_args: Sequence[str] = (), prefix: Sequence[str] = (),
                        tls: bool = True) -> Iterator[ServedCoordinator]:
    """`coordinator serve` on a free 127.0.0.1 port from tmp/coordinator-data, with `cluster`
    applied. HTTPS with its own CA, made by `coordinator init` unless the data dir has one (a
    copy of another's carries its CA and machines over); tls=False: plain HTTP, no init.
    serve_args go to `serve` (e.g. --register-rate 0); prefix: see ServedCoordinator."""
    port = free_port()
    served = ServedCoordinator(f"{'https' if tls else 'http'}://127.0.0.1:{port}",
                               tmp / "coordinator-data", tmp / "coordinator.log",
                               tuple(serve_args), tuple(prefix))
    if tls and not (served.data / "pki").exists():
        served.init()
    try:
        served.start()
        if cluster:
            served.admin.request("PUT", "/v1/clusters", text=cluster,
                                 content_type="application/yaml")
        yield served
    finally:
        served.stop()
