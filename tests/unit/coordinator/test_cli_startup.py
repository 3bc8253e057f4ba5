"""What the `coordinator` CLI loads before it runs a command. Every call of it pays for its
start-up: each Tab press of its shell completion, each line of an operator's script, each
poll of the end-to-end tests. pydantic and yaml (the pivot's domain pulled both in, for every
command) took a third of it; the commands that need them import them themselves."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pydantic", "yaml", "aiohttp", "asyncio", "coordinator.service", "coordinator.store")


def test_the_cli_starts_without_the_coordinators_heavy_dependencies() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; import coordinator.cli; print('\\n'.join(sys.modules))"],
        capture_output=True, text=True, check=True).stdout.split()
    assert not [name for name in loaded if name.startswith(HEAVY)], \
        sorted(name for name in loaded if name.startswith(HEAVY))
