"""Process wiring for `coordinator serve` and `coordinator init`: store, service, reconcile
loop, TLS and the HTTP server."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
import sys
from dataclasses import dataclass, field
from pathlib import Path

import uvloop
from aiohttp import web

from coordinator.api.app import create_app
from coordinator.api.context import ARTIFACT_LINKS, Presentation
from coordinator.domain.machines.refusals import CONNECTION
from coordinator.domain.machines.tokens import DEFAULT_CREDENTIAL_TTL_SECONDS
from coordinator.domain.transfer.pivot import DEFAULT_REFRESH_SECONDS
from coordinator.edge.artifact_links import ArtifactLinks
from coordinator.gcpolicy import DEFAULT_INTERVAL_SECONDS, GcPolicy
from coordinator.metrics import METRICS
from coordinator.server import advertised, datadir, secrets_key
from coordinator.server.artifact_process import ArtifactProcess, tls_server_context
from coordinator.server.listener import ConnectionLimits, GuardedSite, raise_descriptor_limit
from coordinator.server.pki import Pki
from coordinator.service import pivots
from coordinator.service.coordinator import Coordinator
from coordinator.service.history import DEFAULT_RETENTION, Retention
from coordinator.store.base import Store, StoreError
from coordinator.store.cipher import Cipher
from coordinator.store.sqlite import SQLiteStore
from nodeagent.wire import logfmt

WILDCARDS = frozenset({"0.0.0.0", "::", ""})


class SetupError(Exception):
    """The coordinator cannot start as configured; the message says what to do."""


@dataclass(frozen=True)
class ServeOptions:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8080
    artifacts: Path | None = None
    insecure_http: bool = False  # plain HTTP: only for demos on one machine
    advertise_url: str | None = None  # what join strings tell agents; default from the listen address
    credential_ttl: float | None = DEFAULT_CREDENTIAL_TTL_SECONDS
    register_rate: float = 5.0
    register_rate_total: float = 50.0
    store: str | None = None  # a postgresql:// DSN; None: the SQLite file in data_dir
    gc_interval: float = DEFAULT_INTERVAL_SECONDS  # 0: CPython's own garbage collection
    metrics_token_file: Path | None = None  # None: /metrics needs no token
    retention: Retention = DEFAULT_RETENTION  # how much event history is kept
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    pivot_refresh_seconds: float = DEFAULT_REFRESH_SECONDS  # a moved coordinator's copy
    artifact_port: int | None = None  # artifacts' bytes from threads there (artifact_port.py)

    def pki(self) -> Pki:
        return Pki(self.data_dir / "pki")

    def key_file(self) -> Path:
        """The secrets key's file (coordinator/server/secrets_key.py)."""
        return self.data_dir / secrets_key.FILE_NAME

    def url(self) -> str:
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        host = self.host
        if host in WILDCARDS:  # this machine's name, or the certificate's first when it lacks it
            cert = None if self.insecure_http else self.pki().server_cert
            host = advertised.default_host(socket.gethostname(), cert)
        host = f"[{host}]" if ":" in host else host
        return f"{'http' if self.insecure_http else 'https'}://{host}:{self.port}"


def tls_context(pki: Pki) -> ssl.SSLContext:
    if not pki.exists():
        raise SetupError(
            f"no TLS certificate in {pki.directory}: run `coordinator init --data-dir "
            f"{pki.directory.parent} --name HOST_OR_IP ...` first (or pass --insecure-http for a "
            "demo on one machine)")
    return tls_server_context(pki.server_cert, pki.server_key)


def artifact_port(options: ServeOptions, store: Path) -> ArtifactProcess | None:
    """The artifact port when asked for, its links signed with a key derived from the
    secrets key (the same on every replica)."""
    if options.artifact_port is None:
        return None
    try:
        key = secrets_key.load(options.key_file()).derive(b"artifact links")
    except secrets_key.KeyFileError as exc:
        raise SetupError(str(exc)) from None
    pki = options.pki()
    return ArtifactProcess(options.host, options.artifact_port, pki.server_cert,
                           pki.server_key, store, ArtifactLinks(key, options.artifact_port),
                           options.connections)


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def make_store(location: str | None, data_dir: Path, cipher: Cipher | None) -> Store:
    """The embedded SQLite file by default; PostgreSQL (which replicas may share) for a DSN.
    Either seals machines' secrets with cipher (None: a restore, which writes them sealed as
    they were)."""
    if location is None:
        return SQLiteStore(data_dir / datadir.DATABASE, cipher)
    if location.startswith(POSTGRES_SCHEMES):
        from coordinator.store.postgres import PostgresStore  # asyncpg only when used

        return PostgresStore(location, cipher=cipher)
    raise SetupError("--store: expected a postgresql://USER@HOST:PORT/DATABASE DSN "
                     "(or no --store, for the embedded SQLite file)")


async def open_coordinator(options: ServeOptions) -> Coordinator:
    """The store opened and migrated with the secrets key (made unless DATA_DIR has one), an
    admin token ensured (DATA_DIR/admin.token); DATA_DIR made private first (datadir.py)."""
    try:
        datadir.make_private(options.data_dir)
        cipher = secrets_key.load_or_create(options.key_file())
    except (datadir.DataDirError, secrets_key.KeyFileError) as exc:
        raise SetupError(str(exc)) from None
    store = make_store(options.store, options.data_dir, cipher)
    try:
        await store.open()
    except StoreError as exc:
        raise SetupError(f"cannot open the store: {exc}") from None
    coordinator = Coordinator(store, credential_ttl=options.credential_ttl,
                              retention=options.retention,
                              pivot_file=options.data_dir / pivots.FILE_NAME)
    await coordinator.access.ensure_admin_token(options.data_dir / datadir.ADMIN_TOKEN)
    return coordinator


def metrics_token(path: Path | None) -> str | None:
    """The token /metrics asks for, from its file (None: no file, metrics are open)."""
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise SetupError(f"--metrics-token-file: cannot read {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise SetupError(f"--metrics-token-file: {path} must hold a token of at least 16 "
                         "characters")
    return token


async def serve(options: ServeOptions, ready: asyncio.Event | None = None) -> None:
    if options.insecure_http and options.artifact_port is not None:
        raise SetupError("--artifact-port serves artifacts over TLS: not with --insecure-http")
    context = None if options.insecure_http else tls_context(options.pki())
    if context is not None and (problem := advertised.unnamed(
            options.url(), options.advertise_url is not None, options.port,
            options.pki().server_cert)):
        raise SetupError(problem)
    coordinator = await open_coordinator(options)
    artifacts = options.artifacts or options.data_dir / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    ca_pem = None if options.insecure_http else options.pki().ca_cert.read_text()
    app = create_app(coordinator, artifacts, Presentation(
        advertise_url=options.url(), ca_pem=ca_pem, register_rate=options.register_rate,
        metrics_token=metrics_token(options.metrics_token_file),
        register_total_rate=options.register_rate_total,
        body_seconds=options.connections.body_seconds), options.data_dir)
    limits = options.connections
    port = artifact_port(options, artifacts)
    if port is not None:
        app[ARTIFACT_LINKS] = port.links
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.idle_seconds)
    await runner.setup()
    try:
        descriptors = raise_descriptor_limit()
        logging.getLogger(__name__).info(
            "descriptor limit %d: up to %d connections, %s from one address", descriptors,
            max(1, descriptors - limits.reserve), limits.per_address or "all")
        site = GuardedSite(runner, options.host, options.port, context, limits, descriptors,
                           lambda client, why: coordinator.refusals.refused(
                               client, 0, why, "", "", CONNECTION))
        await site.start()
        if port is not None:
            try:
                await port.start()
            except OSError as exc:
                raise SetupError(f"--artifact-port: cannot listen on {options.host}:"
                                 f"{options.artifact_port}: {exc.strerror}") from None
        scheme = "http" if context is None else "https"
        also = "" if port is None else f", artifacts' bytes on port {options.artifact_port}"
        print(f"coordinator listening on {scheme}://{options.host}:{options.port} "
              f"(data in {options.data_dir}; agents use {options.url()}{also})", flush=True)
        background = [asyncio.create_task(coordinator.run()),
                      asyncio.create_task(coordinator.write_heartbeats()),
                      asyncio.create_task(coordinator.audit_refusals()),
                      asyncio.create_task(coordinator.history.run()),
                      asyncio.create_task(coordinator.queries.warm_status()),
                      asyncio.create_task(pivots.refresh_loop(
                          coordinator.pivots, coordinator.writes, options.pivot_refresh_seconds))]
        if port is not None:
            background.append(asyncio.create_task(port.run()))
        policy = None
        METRICS.gc_pauses.install()  # at /metrics, whoever schedules the collections
        if options.gc_interval > 0:
            policy = GcPolicy(METRICS.gc_pauses, options.gc_interval,
                              busy=coordinator.reconciler.rolling_out)
            policy.start()
            background.append(asyncio.create_task(policy.run()))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        if ready is not None:
            ready.set()
        try:
            await stop.wait()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if policy is not None:
                policy.stop()
            coordinator.notifier.wake_all()
    finally:
        if port is not None:
            await port.stop()
        await runner.cleanup()
        await coordinator.close()
        await coordinator.store.close()


def serve_forever(options: ServeOptions) -> None:
    os.umask(datadir.PRIVATE_UMASK)  # whatever the shell's: every file it makes is its own
    logfmt.configure("info")  # the agent's format: stable keys, journal priorities, redacted
    try:
        # uvloop's event loop and TLS (libuv, C): with an agent's connection open per machine,
        # asyncio's TLS held a zero-filled 256 KiB read buffer per connection (2.5 GiB at
        # 10,000 agents until cut to 32 KiB) and its Python-level transports cost every
        # request; uvloop: ~22 % less memory at 10,000 agents (docs/benchmarks.md).
        uvloop.run(serve(options))
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        print(f"error: cannot listen on {options.host}:{options.port}: {exc.strerror}",
              file=sys.stderr)
        sys.exit(1)
