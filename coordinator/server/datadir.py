"""DATA_DIR kept private, whatever the umask: the directory 0700 and every file the
coordinator writes in it (the SQLite database and its -wal and -shm, the admin token, the PKI)
readable by its owner only. Each file is also created so; this catches a data dir that an
older coordinator filled under a 022 umask, tightening what it finds and saying so.

The secrets key is the exception: the coordinator always made it 0600, so a looser key was
loosened by someone, and whether it leaked is for the operator to judge: it is refused
(coordinator/server/secrets_key.py) rather than quietly repaired."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from coordinator.server.pki import Pki

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077  # what `coordinator serve` and `init` run under: files 0600, dirs 0700
DATABASE = "coordinator.db"
ADMIN_TOKEN = "admin.token"
# What the coordinator writes in DATA_DIR, besides the secrets key; nothing else there is
# touched (a data dir given by mistake, a home say, keeps its other files' modes).
SQLITE_FILES = (DATABASE, *(f"{DATABASE}-{suffix}" for suffix in ("wal", "shm", "journal")))
_WRITTEN = (*SQLITE_FILES, ADMIN_TOKEN)


class DataDirError(Exception):
    """A file of the data dir that others may read cannot be made private."""


def make_private(data_dir: Path) -> None:
    """DATA_DIR created 0700 if missing; it and what the coordinator writes there (the PKI
    included) tightened to their owner's bits where others could read or write them, each
    logged. The artifacts directory holds the operator's files: left as they are."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki = Pki(data_dir / "pki")
    for path in (data_dir, *(data_dir / name for name in _WRITTEN), pki.directory,
                 pki.ca_key, pki.ca_cert, pki.server_key, pki.server_cert):
        _tighten(path)


def _tighten(path: Path) -> None:
    """path without its group's and others' bits; a link or a missing path is left alone."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(found.st_mode)
    if stat.S_ISLNK(found.st_mode) or not mode & 0o077:
        return
    try:
        path.chmod(mode & ~0o077)
    except OSError as exc:
        raise DataDirError(f"{path} has mode {mode:04o}, open to others, and cannot be made "
                           f"private: {exc.strerror} (chmod go= {path})") from None
    log.warning("%s had mode %04o, open to others: tightened to %04o", path, mode,
                mode & ~0o077)
