"""DATA_DIR/secrets.key: the key that seals machines' secrets in the database (see
coordinator/store/cipher.py). Made when a coordinator first starts on a data dir without one;
replicas sharing a PostgreSQL database each get a copy, as they do of the PKI. Refused when
others may read it or it is not a key: a coordinator never starts on a key it cannot trust."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from coordinator.store.cipher import KEY_BYTES, Cipher, key_from_text

FILE_NAME = "secrets.key"


class KeyFileError(Exception):
    """The key file is unusable; the message says what to do."""


def load_or_create(path: Path) -> Cipher:
    """The cipher of the key in path, made first (mode 0600) when there is no such file."""
    if not path.exists():
        _create(path)
    return load(path)


def load(path: Path) -> Cipher:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise KeyFileError(f"{path} has mode {mode:04o}: only its owner may read the secrets "
                               f"key (chmod 600 {path})")
        text = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read the secrets key {path}: {exc.strerror}") from None
    key = key_from_text(text)
    if key is None:
        raise KeyFileError(f"{path} is not a secrets key ({KEY_BYTES} random bytes in base64): "
                           "restore the one backed up with the database")
    return Cipher(key, str(path))


def _create(path: Path) -> None:
    """Written whole under another name, then linked into place (never over an existing key,
    which another process may have made meanwhile): a crash leaves no half-written key, and
    the directory is synced so that the key outlives a power cut the database's secrets do."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(base64.b64encode(Cipher.new_key()) + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(partial, path)
        except FileExistsError:
            return
    finally:
        partial.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
