"""Backup archives tampered with as a test needs: the manifest's fields changed, a member's
content replaced (its manifest entry made to match, or left to lie), or a decompression bomb
put in, the gzip and tar made whole again, so that only the change itself can be what a reader
refuses."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from typing import Any

MANIFEST = "manifest.json"
_ZEROS = bytes(1 << 20)


def members(data: bytes) -> dict[str, bytes]:
    """An archive's members by name, in their order (the manifest first)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def manifest(data: bytes) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(members(data)[MANIFEST])
    return loaded


def rows(data: bytes, table: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in members(data)[f"tables/{table}.jsonl"].splitlines()]


def packed(contents: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in contents.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def repacked(data: bytes, **changes: Any) -> bytes:
    """The archive data with its manifest's fields replaced by changes."""
    contents = members(data)
    contents[MANIFEST] = json.dumps({**json.loads(contents[MANIFEST]), **changes}).encode()
    return packed(contents)


def crafted(data: bytes, member: str, content: bytes) -> bytes:
    """The archive with member's content replaced and its manifest entry (size, sha256) made
    to match: what a reader refuses must be the content itself, not a checksum."""
    contents = members(data)
    listed = json.loads(contents[MANIFEST])
    listed["members"][member] = {"sha256": hashlib.sha256(content).hexdigest(),
                                 "size": len(content)}
    contents[MANIFEST], contents[member] = json.dumps(listed).encode(), content
    return packed(contents)


def crafted_rows(data: bytes, table: str, table_rows: list[Any]) -> bytes:
    """crafted, the table's member holding table_rows (JSON values, one a line)."""
    return crafted(data, f"tables/{table}.jsonl",
                   b"".join(json.dumps(row).encode() + b"\n" for row in table_rows))


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.left, len(_ZEROS))
        buffer[:count] = _ZEROS[:count]
        self.left -= count
        return count


def bomb(data: bytes, member: str, zeros: int, declared: int | None = None) -> bytes:
    """The archive with member replaced by `zeros` zero bytes, compressed as they stream (a
    thousandth of their size). The manifest declares `declared` bytes of it, with their sha256
    (None: the manifest's entry left as it was, lying about it)."""
    contents = members(data)
    listed = json.loads(contents[MANIFEST])
    if declared is not None:
        digest = hashlib.sha256()
        for offset in range(0, declared, len(_ZEROS)):
            digest.update(_ZEROS[:min(len(_ZEROS), declared - offset)])
        listed["members"][member] = {"sha256": digest.hexdigest(), "size": declared}
    contents[MANIFEST] = json.dumps(listed).encode()
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as packed_, \
            tarfile.open(fileobj=packed_, mode="w") as tar:
        for name, content in contents.items():
            info = tarfile.TarInfo(name)
            if name == member:
                info.size = zeros
                tar.addfile(info, io.BufferedReader(_Zeros(zeros), 1 << 20))
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
