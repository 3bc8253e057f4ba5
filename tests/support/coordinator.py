"""A real `coordinator serve` on 127.0.0.1, and its admin CLI, for tests outside e2e/."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
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

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([COORDINATOR, "--url", self.url, "--token-file",
                               str(self.data_dir / "admin.token"), *args],
                              capture_output=True, text=True, timeout=120, check=False)

    def admin(self, *args: str) -> str:
        result = self.cli(*args)
        assert result.returncode == 0, f"coordinator {args}: {result.stderr}"
        return result.stdout

    def admin_json(self, *args: str) -> Any:
        return json.loads(self.admin(*args, "--output", "json"))


@contextlib.contextmanager
def coordinator(data_dir: Path) -> Iterator[RunningCoordinator]:
    """Serve from data_dir (an existing one carries its machines over); stop on exit."""
    port = free_port()
    running = RunningCoordinator(f"http://127.0.0.1:{port}", data_dir)
    argv = [COORDINATOR, "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}"]
    with serving(argv, data_dir.with_suffix(".log"), lambda: (data_dir / "admin.token").exists()
                 and running.cli("cluster", "get").returncode == 0,
                 f"coordinator on port {port}", timeout=30, interval=0.2):
        yield running
