"""The README's main command: the embedded coordinator and local agents roll the sample cluster
out to Ready. Run as a user would, so a change that breaks it breaks the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.requirements import require_root

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_rolls_the_sample_cluster_out_to_ready() -> None:
    require_root()
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "demo.py")],
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "all 5 machines Ready" in result.stdout
    assert "Traceback" not in result.stderr
    # The last word on its directory comes after it is removed: no path is printed to look at
    # after it is gone, and the one it names is gone.
    last = result.stdout.splitlines()[-1]
    assert last.startswith("== removed /") and last.endswith(
        " (--keep keeps it: the logs, the node roots, the data)"), result.stdout[-2000:]
    base = Path(last.split()[2])
    assert base.name.startswith("nodeagent-demo-") and not base.exists()
    assert result.stdout.count(str(base)) == 2  # where the data goes, at the start; removed
