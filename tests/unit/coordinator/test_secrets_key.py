"""The secrets key's file: made once, readable by its owner only, and refused when it is not
a key the coordinator can trust."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from coordinator.server.secrets_key import KeyFileError, load, load_or_create


def test_a_key_is_made_once_for_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    made = load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create(path).fingerprint == made.fingerprint  # kept, not replaced
    assert [p.name for p in tmp_path.iterdir()] == ["secrets.key"]  # nothing left beside it
    assert made.source == str(path)


def test_a_key_others_may_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    load_or_create(path)
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match=rf"{path} has mode 0644: only its owner may read the "
                                           rf"secrets key \(chmod 600 {path}\)"):
        load_or_create(path)


@pytest.mark.parametrize("text", [b"", b"not base64 at all!\n", b"c2hvcnQ=\n"])
def test_a_file_that_is_not_a_key_is_refused(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "secrets.key"
    path.write_bytes(text)
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match=rf"{path} is not a secrets key"):
        load_or_create(path)


def test_a_key_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    path.mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match=rf"cannot read the secrets key {path}: Is a directory"):
        load(path)
