"""What a node keeps of a machine the coordinator deleted, and what systemd does then."""

from __future__ import annotations

import configparser
from pathlib import Path

from nodeagent.cli import EXIT_REMOVED
from nodeagent.removal import forget_machine

UNIT = Path(__file__).parents[2] / "systemd/nodeagent.service"


def test_a_deleted_machine_is_forgotten_and_its_journal_kept_under_its_id(tmp_path: Path) -> None:
    for name in ("identity.json", "identity.next.json", "journal.json", "ca.crt"):
        (tmp_path / name).write_text(name)
    kept = forget_machine(tmp_path, "../3f2a")
    assert kept == tmp_path / "journal.___3f2a.json" and kept.read_text() == "journal.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "journal.___3f2a.json"]
    assert forget_machine(tmp_path, "3f2a") is None  # nothing left to forget


def test_systemd_leaves_the_agent_of_a_deleted_machine_stopped() -> None:
    """Restarted, it would register the node again at once: the operator took it out."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(UNIT)
    service = unit["Service"]
    assert service["Restart"] == "always"
    assert str(EXIT_REMOVED) in service["RestartPreventExitStatus"].split()
    assert str(EXIT_REMOVED) in service["SuccessExitStatus"].split()
