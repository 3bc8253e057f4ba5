"""Every bench script runs in its quick mode (seconds, small sizes), so that none can rot
unnoticed: it must exit 0 and print its figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.requirements import require_binary

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "bench").glob("*.py"))
# What a script needs besides the venv, by its name.
NEEDS = {"artifacts.py": "nginx", "dashboard.py": "chromium", "drain.py": "kubectl",
         "precheck_wall.py": "chronyd"}
# A figure: a number with its unit ("12.5 ms", "0.6 s", "27.5 MiB", "8/s", "1 %").
FIGURE = re.compile(r"\d[\d,.]* ?(ms|s|MiB|MB|%|/s)(?!\w)")


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_the_bench_script_runs_quickly_and_prints_its_figures(script: Path) -> None:
    if script.name in NEEDS:
        require_binary(NEEDS[script.name])
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    figures = [line for line in done.stdout.splitlines() if FIGURE.search(line)]
    assert figures, f"no figures printed: {done.stdout!r}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
