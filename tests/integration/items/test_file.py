"""The file action on a real temp root: atomic replacement, mode, owner, templates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.wire.protocol import StateItem
from tests.support.items import apply, leftovers, make_item
from tests.support.requirements import require_root

pytestmark = pytest.mark.integration


def file_item(**action: str) -> StateItem:
    return make_item("f", {"type": "file", "path": "/etc/edge/app.conf", **action})


async def test_content_is_written_with_its_mode_creating_parents(root: Path) -> None:
    outcome = await apply(file_item(content="a = 1\n", mode="0600"), root)
    assert outcome.succeeded, outcome.error
    assert outcome.output == "wrote 6 bytes to /etc/edge/app.conf"
    target = root / "etc/edge/app.conf"
    assert target.read_text() == "a = 1\n"
    assert target.stat().st_mode & 0o7777 == 0o600


async def test_a_template_is_rendered(root: Path) -> None:
    await apply(file_item(template="name=${cluster.name}\nip=${machine.ip}\ncost=$$1\n"), root)
    assert (root / "etc/edge/app.conf").read_text() == "name=edge-1\nip=10.0.0.5\ncost=$1\n"


async def test_a_change_replaces_the_file_atomically(root: Path) -> None:
    await apply(file_item(content="old\n", mode="0644"), root)
    target = root / "etc/edge/app.conf"
    with target.open() as reader:  # a service that has the old file open
        await apply(file_item(content="new\n", mode="0640"), root)
        assert reader.read() == "old\n"  # its inode was replaced, never rewritten in place
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o7777 == 0o640
    assert leftovers(target.parent) == []


async def test_owner_user_and_group_are_set(root: Path) -> None:
    require_root()
    await apply(file_item(content="x", owner="nobody:nogroup"), root)
    stat = (root / "etc/edge/app.conf").stat()
    assert (stat.st_uid, stat.st_gid) == (65534, 65534)
    await apply(file_item(content="y", owner="nobody"), root)  # the user's own group
    assert (root / "etc/edge/app.conf").stat().st_gid == 65534


@pytest.mark.parametrize(("owner", "error"), [
    ("no-such-user", "unknown user 'no-such-user' in owner 'no-such-user'"),
    ("root:no-such-group", "unknown group 'no-such-group' in owner 'root:no-such-group'"),
])
async def test_an_unknown_owner_fails_clearly_and_writes_nothing(
    root: Path, owner: str, error: str
) -> None:
    outcome = await apply(file_item(content="x", owner=owner), root)
    assert not outcome.succeeded
    assert outcome.error == error
    assert not (root / "etc/edge/app.conf").exists()


async def test_an_unwritable_target_is_a_failure_not_a_crash(root: Path) -> None:
    (root / "etc").write_text("a file where a directory should be")
    outcome = await apply(file_item(content="x"), root)
    assert not outcome.succeeded
    assert "Not a directory" in outcome.error
    assert os.listdir(root) == ["etc"]
