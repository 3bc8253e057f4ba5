"""Process wiring for `coordinator serve`: store, service, reconcile loop and HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from coordinator.api.app import create_app
from coordinator.service import Coordinator
from coordinator.store.sqlite import SQLiteStore
from coordinator.tokens import new_token


def admin_token(data_dir: Path) -> str:
    """The admin token in DATA_DIR/admin.token, created (mode 0600) on first start."""
    path = data_dir / "admin.token"
    if path.exists():
        return path.read_text().strip()
    token = new_token("admin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


async def serve(data_dir: Path, host: str, port: int, artifacts: Path | None,
                ready: asyncio.Event | None = None) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    artifacts = artifacts or data_dir / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(data_dir / "coordinator.db")
    await store.open()
    coordinator = Coordinator(store)
    app = create_app(coordinator, admin_token(data_dir), artifacts)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    print(f"coordinator listening on http://{host}:{port} (data in {data_dir})", flush=True)
    reconciler = asyncio.create_task(coordinator.run())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        reconciler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reconciler
        await runner.cleanup()
        await coordinator.close()
        await store.close()


def serve_forever(data_dir: Path, host: str, port: int, artifacts: Path | None) -> None:
    try:
        asyncio.run(serve(data_dir, host, port, artifacts))
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        sys.exit(1)
