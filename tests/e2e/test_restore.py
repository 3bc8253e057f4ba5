"""A restore of an older backup, then a new release, on a real agent in a network namespace.

The issue's scenario: a machine Ready, a backup taken, further generations (two label
changes, which its agent receives), the coordinator restored from the backup, and a new
release applied while the machine's link is down (its agent comes back once the machine sits
in Upgrade, at exactly the generation the agent held before the restore, with other content).
The agent gets its upgrade and the machine ends Ready at the new release, with no hand edit:
its tag names the old store's epoch, so the restored coordinator answers it at once instead of
with 304 (docs/agent.md, step 2; docs/coordinator.md, "Reconcile loop")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.e2e.test_pivot import UPGRADE_ITEM
from tests.support.harness import ServedCoordinator, restore
from tests.support.rollout import Fleet, fleet, item_log, spec

HOST = "m1"
ASSIGNED = re.compile(r"assignment (\d+): (\w+), phase")


def release(version: str, items: str = "") -> str:
    """No drain (no Kubernetes here), and a heartbeat timeout long enough for the machine to
    stay responding while its link is down: the planner upgrades only machines that answer."""
    return spec(items).replace('release: "1.0"', f'release: "{version}"').replace(
        "heartbeatTimeoutSeconds: 20", "heartbeatTimeoutSeconds: 300").replace(
        "settings:\n", "settings:\n  drain: {enabled: false}\n", 1)


def held(f: Fleet) -> tuple[int, str]:
    """The generation and state of the last assignment the agent took, as it logged them."""
    found = ASSIGNED.findall((f.tmp / f"{HOST}.log").read_text())
    return (int(found[-1][0]), found[-1][1]) if found else (0, "")


def link(f: Fleet, up: bool) -> None:
    """The machine's port on the hub's bridge, up or down."""
    index = f.hostnames.index(HOST)
    subprocess.run(["ip", "-n", f.lan.hub.name, "link", "set", f"v{index}",
                    "up" if up else "down"], check=True, capture_output=True)


def test_a_restored_older_backup_then_a_release_upgrades_the_machine_with_no_hand_edit(
        tmp_path: Path) -> None:
    with fleet(tmp_path, managers=[HOST], workers=[], cluster_spec=release("1.0")) as f:
        f.wait_for("Ready", lambda: held(f)[1] == "Ready"
                   and f.admin_json("machines", "get", HOST)["state"] == "Ready")
        backed_up = held(f)[0]
        archive = tmp_path / "backup.tgz"
        f.admin("backup", "--out", str(archive))
        for zone in ("a", "b"):  # two generations the backup does not hold
            f.admin("machines", "label", HOST, f"zone={zone}")
        f.wait_for("the agent two generations on", lambda: held(f)[0] == backed_up + 2)

        old = f.replicas[0]
        old.stop()
        link(f, up=False)
        data = tmp_path / "restored"
        done = restore(archive, data)
        assert done.returncode == 0, done.stderr
        (data / "admin.token").write_text(old.token_file.read_text())
        restored = ServedCoordinator(old.url, data, tmp_path / "restored.log", old.serve_args,
                                     old.prefix, listen=old.listen)
        f.replicas[0] = restored
        restored.start()
        try:
            (tmp_path / "v2.yaml").write_text(release("2.0", UPGRADE_ITEM))
            f.admin("cluster", "apply", "-f", str(tmp_path / "v2.yaml"))
            f.wait_for("the machine in Upgrade", lambda: f.admin_json(
                "machines", "get", HOST)["state"] == "Upgrade")
            link(f, up=True)
            f.wait_for("the machine upgraded", lambda: (
                m := f.admin_json("machines", "get", HOST))["state"] == "Ready"
                and m["release"] == "2.0", timeout=60)
            assert item_log(f, HOST) == ["prepare-manager", "deploy-manager", "upgrade-manager"]
            # The restored coordinator gave the upgrade the very generation the agent held.
            assert (backed_up + 2, "Upgrade") in [
                (int(g), s) for g, s in ASSIGNED.findall((tmp_path / f"{HOST}.log").read_text())]
        finally:
            restored.stop()
