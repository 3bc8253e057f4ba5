"""A PostgreSQL 15 server for the tests: Debian's binaries started in a temp dir (initdb,
loopback port, unix socket in the same dir, as an unprivileged user since postgres refuses
root), or the server NODEAGENT_TEST_PG_DSN names. Each test gets a database of its own.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.ports import free_port
from tests.support.process import serving
from tests.support.requirements import IN_CI

BINDIR = Path("/usr/lib/postgresql/15/bin")
DSN_VARIABLE = "NODEAGENT_TEST_PG_DSN"
USER = "postgres"  # the bootstrap superuser initdb creates
RUN_AS = "nobody"  # when the tests run as root


@dataclass(frozen=True)
class Postgres:
    dsn: str  # the maintenance database of a superuser (or a role that may CREATE DATABASE)
    socket_dir: Path | None  # set for a server started here: reachable from any netns

    def psql(self, sql: str, dsn: str | None = None) -> str:
        """Run sql on the database dsn names (default: the maintenance one); its output."""
        argv = [str(BINDIR / "psql") if (BINDIR / "psql").exists() else "psql",
                "--no-psqlrc", "-X", "-v", "ON_ERROR_STOP=1", "-At", "-d", dsn or self.dsn,
                "-c", sql]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, f"psql {sql!r}: {result.stderr}"
        return result.stdout.strip()

    def database_dsn(self, database: str, via_socket: bool = False) -> str:
        """The DSN of another database on this server; via_socket: over the unix socket, so
        that a process in a network namespace of its own reaches it too."""
        parts = urlsplit(self.dsn)
        if via_socket and self.socket_dir is not None:
            return f"postgresql://{parts.username}@/{database}?host={self.socket_dir}&port={parts.port}"
        return urlunsplit(parts._replace(path=f"/{database}"))

    @contextlib.contextmanager
    def database(self, via_socket: bool = False) -> Iterator[str]:
        """A new empty database (a copy of template0) for one test; dropped afterwards."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.psql(f"CREATE DATABASE {name} TEMPLATE template0")
        try:
            yield self.database_dsn(name, via_socket)
        finally:
            self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _missing(message: str) -> None:
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _as_user(argv: Sequence[str]) -> list[str]:
    """argv as RUN_AS when we are root: postgres refuses to run as root."""
    if os.geteuid() != 0:
        return list(argv)
    return ["setpriv", f"--reuid={RUN_AS}", f"--regid={pwd.getpwnam(RUN_AS).pw_gid}",
            "--clear-groups", *argv]


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    """The server NODEAGENT_TEST_PG_DSN names, else a fresh one, stopped at the end."""
    external = os.environ.get(DSN_VARIABLE)
    if external:
        yield Postgres(external, None)
        return
    if not (BINDIR / "postgres").exists():
        _missing(f"PostgreSQL 15 is not installed in {BINDIR} (postgresql-15, see "
                 f"scripts/system-packages.txt), and {DSN_VARIABLE} is not set")
    # Not under pytest's tmp: its directories are private to root, and the server runs as RUN_AS.
    base = Path(tempfile.mkdtemp(prefix="nodeagent-pg-"))
    try:
        data = base / "data"
        if os.geteuid() == 0:
            entry = pwd.getpwnam(RUN_AS)
            os.chown(base, entry.pw_uid, entry.pw_gid)
        initdb = subprocess.run(_as_user([
            str(BINDIR / "initdb"), "-D", str(data), "-U", USER, "--auth=trust",
            "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"]),
            capture_output=True, text=True, timeout=120, check=False)
        assert initdb.returncode == 0, f"initdb failed: {initdb.stderr}"
        port = free_port()
        argv = _as_user([
            str(BINDIR / "postgres"), "-D", str(data), "-p", str(port), "-k", str(base),
            "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
            # Throwaway data: durability is not what these tests are about.
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
        server = Postgres(f"postgresql://{USER}@127.0.0.1:{port}/postgres", base)
        with serving(argv, base / "postgres.log", lambda: _accepts(base, port),
                     "postgres") as process:
            try:
                yield server
            finally:
                process.send_signal(signal.SIGINT)  # fast shutdown: SIGTERM waits for clients
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _accepts(socket_dir: Path, port: int) -> bool:
    return subprocess.run([str(BINDIR / "pg_isready"), "-q", "-h", str(socket_dir), "-p",
                           str(port)], check=False, timeout=10).returncode == 0


def holder_of(postgres: Postgres, dsn: str, key: int) -> int:
    """The server pid of the session holding advisory lock `key` (keys below 2**32)."""
    return int(postgres.psql(f"SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND "
                             f"objid = {key} AND granted AND database = "
                             "(SELECT oid FROM pg_database WHERE datname = current_database())",
                             dsn))


def terminate(postgres: Postgres, pid: int) -> None:
    """What losing a connection looks like from the coordinator: the server ends it."""
    assert postgres.psql(f"SELECT pg_terminate_backend({pid})") == "t"
