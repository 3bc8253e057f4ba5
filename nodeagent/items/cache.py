"""The node's download cache, in the agent's state dir (0700, files 0600, root's alone):

- cache/sha256/HEX: whole files by their sha256, so a re-run, retried or re-applied item, or
  another item wanting the same bytes, copies them instead of fetching them again;
- cache/partial/HEX: the bytes of a download of HEX cut short (connection dropped, agent
  killed), which the next attempt continues with a Range request; HEX.json says which source
  they came from and that version's validator (ETag or Last-Modified), for If-Range.

An entry is verified each time it is used (its bytes are hashed while they are copied to the
target, which reads them anyway, so verifying costs no extra read): a corrupt entry (a bad
disk, a hand edit) is removed and fetched again, never written to a target. Entries are
copied, never hard-linked, so a later chmod or edit of a target cannot change the cache. The
whole is bounded: least recently used files go first once it holds more than its limit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from nodeagent.atomic import atomic_file_in, atomic_write, fsync_dir

_CHUNK = 1 << 20


class Corrupt(Exception):
    """A cache entry whose bytes no longer have their sha256."""


class NodeCache:
    """Cache files under directory (the state dir's cache/), at most max_bytes in all."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.entries = directory / "sha256"
        self.partials = directory / "partial"
        self.max_bytes = max_bytes

    def prepare(self) -> None:
        for place in (self.entries.parent, self.entries, self.partials):
            place.mkdir(mode=0o700, parents=True, exist_ok=True)

    def entry(self, sha256: str) -> Path:
        return self.entries / sha256

    def partial(self, sha256: str) -> Path:
        return self.partials / sha256

    def _meta(self, sha256: str) -> Path:
        return self.partials / f"{sha256}.json"

    def validator(self, sha256: str, source: str) -> str | None:
        """The validator of the version the partial bytes of sha256 came from, when they came
        from source (another source's would mean nothing to this one)."""
        try:
            meta = json.loads(self._meta(sha256).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("source") != source:
            return None
        validator = meta.get("validator")
        return validator if isinstance(validator, str) else None

    def remember(self, sha256: str, source: str, validator: str | None) -> None:
        """Where the partial bytes of sha256 now come from, before any is written."""
        atomic_write(self._meta(sha256), json.dumps({"source": source,
                                                     "validator": validator}).encode(), 0o600)

    def forget_partial(self, sha256: str) -> None:
        for path in (self.partial(sha256), self._meta(sha256)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def keep(self, sha256: str) -> None:
        """The verified, synced partial of sha256 becomes its entry."""
        os.replace(self.partial(sha256), self.entry(sha256))
        fsync_dir(self.entries)
        fsync_dir(self.partials)
        with contextlib.suppress(FileNotFoundError):
            self._meta(sha256).unlink()

    def copy_to(self, sha256: str, directory: int, name: str, mode: int) -> int | None:
        """Copy the entry of sha256 as the entry name of directory (atomically, with mode),
        verifying it on the way; its size, or None when there is no such entry. Corrupt
        when its bytes have another sha256: it is removed and the target left as it was."""
        try:
            fd = os.open(self.entry(sha256), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        digest = hashlib.sha256()
        size = 0
        try:
            with open(fd, "rb") as source, atomic_file_in(directory, name, mode) as handle:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    handle.write(chunk)
                if digest.hexdigest() != sha256:
                    raise Corrupt(f"the node's cache held {size} bytes of sha256 "
                                  f"{digest.hexdigest()} as {sha256}: removed")
        except Corrupt:
            self.entry(sha256).unlink(missing_ok=True)
            raise
        os.utime(self.entry(sha256))  # used now: the last to be evicted
        return size

    def evict(self) -> None:
        """Remove the least recently used files (entries and stale partials alike) until the
        cache holds at most max_bytes."""
        files = []
        for place in (self.entries, self.partials):
            for entry in os.scandir(place):
                with contextlib.suppress(FileNotFoundError):
                    info = entry.stat(follow_symlinks=False)
                    files.append((info.st_mtime, info.st_size, Path(entry.path)))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                return
            path.unlink(missing_ok=True)
            total -= size
