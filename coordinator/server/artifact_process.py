"""The artifact port's own process: `coordinator serve --artifact-port` binds the port, then
hands its sockets to a child (`coordinator serve-artifacts`, a hidden command) that serves
them with threads (artifact_port.py). A process, not threads of the coordinator's: twenty
downloads' threads taking and giving back the GIL around each TLS record kept the event loop
waiting for it, and heartbeats took seconds; in a process of their own they share only the
CPU, at a lower priority (NICE) than the API's.

The child reads its settings, the link key among them, as one JSON line on its stdin (never
on its command line, which others on the host can read) and lives until that pipe closes:
when the coordinator stops, or dies however it dies."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

from coordinator.edge.artifact_links import ArtifactLinks
from coordinator.server.artifact_port import ArtifactPort
from coordinator.server.listener import ConnectionLimits, listening_sockets, raise_descriptor_limit
from nodeagent.wire import logfmt

NICE = 10  # the API's event loop (nice 0) comes first when the CPU is short
STOP_SECONDS = 5.0
RESTART_SECONDS = 1.0

log = logging.getLogger(__name__)


def tls_server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The coordinator's TLS settings for a serving socket, on either port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class ArtifactProcess:
    """The child serving the artifact port: started by start(), started again by run() when
    it exits on its own (it keeps the listening sockets here, so connections made meanwhile
    wait for the new one), ended by stop()."""

    def __init__(self, host: str, port: int, cert: Path, key: Path, store: Path,
                 links: ArtifactLinks, limits: ConnectionLimits) -> None:
        self.host, self.port = host, port
        self.links = links
        self.settings = {"cert": str(cert), "key": str(key), "store": str(store),
                         "link_key": links.key.hex(), "port": port,
                         "limits": dataclasses.asdict(limits)}
        self.sockets: list[socket.socket] = []
        self.child: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Bind here (a port in use fails `serve` at once, as the API's does), serve there."""
        self.sockets = listening_sockets(self.host, self.port, 1024)
        await self._spawn()

    async def _spawn(self) -> None:
        fds = [listener.fileno() for listener in self.sockets]
        self.child = await asyncio.create_subprocess_exec(
            *_child_argv(), stdin=asyncio.subprocess.PIPE, pass_fds=fds)
        assert self.child.stdin is not None
        self.child.stdin.write(json.dumps({**self.settings, "fds": fds}).encode() + b"\n")
        await self.child.stdin.drain()

    async def run(self) -> None:
        """Start the child again each time it exits (until cancelled)."""
        while self.child is not None:
            code = await self.child.wait()
            log.error("the artifact port's process exited (%s); starting it again", code)
            await asyncio.sleep(RESTART_SECONDS)
            await self._spawn()

    async def stop(self) -> None:
        """Close the child's stdin, which ends it, and kill it if it is still there after
        STOP_SECONDS."""
        child, self.child = self.child, None
        if child is not None and child.returncode is None:
            assert child.stdin is not None
            child.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.wait(), STOP_SECONDS)
            if child.returncode is None:
                child.kill()
                await child.wait()
        for listener in self.sockets:
            listener.close()


def _child_argv() -> list[str]:
    """This CLI's `serve-artifacts`: the PyInstaller bundle's binary is the CLI (and runs no
    `-m`); otherwise this Python runs the CLI's module."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "serve-artifacts"]
    return [sys.executable, "-m", "coordinator.cli", "serve-artifacts"]


def main() -> None:
    """The child: serve until stdin ends. Ctrl-C in a terminal reaches it too, and is left
    to the coordinator, which then closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    settings = json.loads(sys.stdin.buffer.readline())
    logfmt.configure("info")
    os.nice(NICE)
    sockets = [socket.socket(fileno=fd) for fd in settings["fds"]]
    ArtifactPort(sockets, tls_server_context(Path(settings["cert"]), Path(settings["key"])),
                 Path(settings["store"]),
                 ArtifactLinks(bytes.fromhex(settings["link_key"]), settings["port"]),
                 ConnectionLimits(**settings["limits"]), raise_descriptor_limit()).start()
    sys.stdin.buffer.read()  # until the coordinator closes the pipe, or is gone
    os._exit(0)  # downloads under way end with the process

