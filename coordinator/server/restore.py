"""`coordinator restore`: a coordinator rebuilt offline from a backup (service/snapshot.py),
into a data dir that holds no coordinator and a store that holds no state, either the SQLite
file in the data dir or a PostgreSQL database. Refused, with nothing left behind, otherwise."""

from __future__ import annotations

import shutil
from pathlib import Path

from coordinator.server import datadir
from coordinator.server.serve import SetupError, make_store
from coordinator.service import snapshot
from coordinator.store.base import StoreError


async def restore_archive(archive: Path, data_dir: Path, store: str | None,
                          max_unpacked: int) -> snapshot.Snapshot:
    """The snapshot restored (the archive checked whole first, unpacking at most max_unpacked
    bytes); SetupError saying why not, the data dir and the store as they were (a data dir
    this attempt made is removed again)."""
    made = not data_dir.exists()
    try:
        taken = snapshot.read_archive(archive, max_unpacked)
        snapshot.check_free(data_dir)
        datadir.make_private(data_dir)
    except (snapshot.ArchiveError, snapshot.RestoreError, datadir.DataDirError) as exc:
        raise SetupError(str(exc)) from None
    database = [data_dir / name for name in datadir.SQLITE_FILES]
    created = store is None and not database[0].exists()
    target = make_store(store, data_dir, None)
    try:
        try:
            await target.open()
            await snapshot.restore(target, data_dir, taken)
        finally:
            await target.close()
    except (StoreError, snapshot.RestoreError) as exc:
        if made:  # the data dir this attempt made, and what it wrote there
            shutil.rmtree(data_dir, ignore_errors=True)
        elif created:  # the empty SQLite file this attempt made goes too
            for path in database:
                path.unlink(missing_ok=True)
        raise SetupError(f"cannot restore {archive}: {exc}") from None
    return taken
