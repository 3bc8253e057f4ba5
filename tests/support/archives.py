"""Backup archives tampered with as a test needs: the manifest's fields changed, the gzip and
tar made whole again, so that only the change itself can be what a reader refuses."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any


def repacked(data: bytes, **changes: Any) -> bytes:
    """The archive data with its manifest's fields replaced by changes."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    members["manifest.json"] = json.dumps(
        {**json.loads(members["manifest.json"]), **changes}).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
