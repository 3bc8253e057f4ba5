"""A real `coordinator serve` (HTTPS, its own CA) on 127.0.0.1, and its admin CLI, for tests
outside e2e/."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.ports import free_port
from tests.support.process import serving

COORDINATOR = str(Path(sys.executable).with_name("coordinator"))


@dataclass
class RunningCoordinator:
    url: str
    data_dir: Path
    prefix: Sequence[str] = ()  # e.g. nsenter into the network namespace it serves in

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, COORDINATOR, "--url", self.url, "--token-file",
                               str(self.data_dir / "admin.token"), "--ca",
                               str(self.data_dir / "pki/ca.crt"), *args],
                              capture_output=True, text=True, timeout=120, check=False)

    def admin(self, *args: str) -> str:
        result = self.cli(*args)
        assert result.returncode == 0, f"coordinator {args}: {result.stderr}"
        return result.stdout

    def admin_json(self, *args: str) -> Any:
        return json.loads(self.admin(*args, "--output", "json"))


@contextlib.contextmanager
def coordinator(data_dir: Path, prefix: Sequence[str] = ()) -> Iterator[RunningCoordinator]:
    """Serve from data_dir, made with `coordinator init` unless it exists (a copy carries
    the machines and the CA over); stop on exit. prefix runs it, and its CLI, through e.g.
    nsenter."""
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    if not (data_dir / "pki").exists():
        made = subprocess.run([COORDINATOR, "init", "--data-dir", str(data_dir), "--name",
                               "127.0.0.1"], capture_output=True, text=True, check=False)
        assert made.returncode == 0, made.stderr
    running = RunningCoordinator(url, data_dir, prefix)
    argv = [*prefix, COORDINATOR, "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}",
            "--advertise-url", url]
    with serving(argv, data_dir.with_suffix(".log"),
                 lambda: running.cli("cluster", "get").returncode == 0,
                 f"coordinator on port {port}", timeout=30, interval=0.2):
        yield running
