"""The key that seals machines' secrets at rest is made by `coordinator init` and refused when
it cannot be trusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.server.init import initialize
from coordinator.server.secrets_key import FILE_NAME
from coordinator.server.serve import ServeOptions, SetupError, open_coordinator


@pytest.fixture
async def initialized(tmp_path: Path) -> ServeOptions:
    """A data dir `coordinator init` made."""
    options = ServeOptions(tmp_path / "data")
    await initialize(options, ["127.0.0.1"], None, None, None)
    return options


async def test_init_makes_a_key_only_its_owner_may_read(initialized: ServeOptions) -> None:
    key = initialized.data_dir / FILE_NAME
    assert key.stat().st_mode & 0o777 == 0o600
    before = key.read_bytes()
    coordinator = await open_coordinator(initialized)  # as serve does: the key is kept
    await coordinator.store.close()
    assert key.read_bytes() == before


async def test_the_coordinator_refuses_to_start_on_a_key_others_may_read(
        initialized: ServeOptions) -> None:
    key = initialized.data_dir / FILE_NAME
    key.chmod(0o640)
    with pytest.raises(SetupError, match=f"{key} has mode 0640: only its owner may read"):
        await open_coordinator(initialized)


async def test_the_coordinator_refuses_to_start_on_another_key_than_its_databases(
        initialized: ServeOptions) -> None:
    """As a replica would, given a key of its own rather than a copy of the others'."""
    key = initialized.data_dir / FILE_NAME
    key.unlink()
    with pytest.raises(SetupError, match=f"cannot open the store: {key} is not the key this "
                                         "database's secrets are sealed with"):
        await open_coordinator(initialized)
