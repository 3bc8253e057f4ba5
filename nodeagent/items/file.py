"""The file action: content or a rendered template, written atomically with mode and owner,
so a service reading it (or a crash mid-write) never sees half a file."""

from __future__ import annotations

import grp
import pwd
from collections.abc import Mapping
from pathlib import Path

from nodeagent.atomic import atomic_file_in
from nodeagent.items import directory_of, machine_path
from nodeagent.items.outcome import ItemFailed, ItemOutcome
from nodeagent.wire.protocol import FileAction
from nodeagent.wire.templates import render


def resolve_owner(owner: str) -> tuple[int, int]:
    """`user` or `user:group` (names or numeric ids) -> (uid, gid); the user's own group
    when none is given."""
    user, _, group = owner.partition(":")
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise ItemFailed(f"unknown user {user!r} in owner {owner!r}") from None
    if not group:
        return entry.pw_uid, entry.pw_gid
    try:
        gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise ItemFailed(f"unknown group {group!r} in owner {owner!r}") from None
    return entry.pw_uid, gid


def apply_file(action: FileAction, values: Mapping[str, str], root: Path) -> ItemOutcome:
    text = action.content if action.content is not None else render(action.template or "", values)
    data = text.encode()
    owner = resolve_owner(action.owner) if action.owner else None
    target = machine_path(root, action.path)
    with directory_of(root, action.path, target, create=True) as directory, \
            atomic_file_in(directory, target.name, int(action.mode, 8), owner) as handle:
        handle.write(data)
    return ItemOutcome(True, output=f"wrote {len(data)} bytes to {action.path}")
