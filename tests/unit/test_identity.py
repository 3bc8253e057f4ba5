"""The credential an agent registers with is its own choice, kept before it is ever sent."""

from __future__ import annotations

from pathlib import Path

from nodeagent.identity import registration_credential


def test_a_registration_credential_is_saved_first_and_reused_by_every_retry(tmp_path: Path) -> None:
    path = tmp_path / "registration.json"
    chosen = registration_credential(path)
    assert chosen.startswith("machine_") and len(chosen) >= 40
    assert path.stat().st_mode & 0o777 == 0o600
    assert registration_credential(path) == chosen  # a retry, by this process or the next
    path.write_text("{torn")
    assert registration_credential(path) not in ("", chosen)  # unreadable: a new one
