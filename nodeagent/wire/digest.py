"""RFC 9530's Content-Digest with a SHA-256: how an etcd snapshot's checksum travels, up from
the agent and down to the CLI, spelt in one place for both ends."""

from __future__ import annotations

import base64
import binascii
import re

_SHA256 = re.compile(r"(?:^|,)\s*sha-256=:([A-Za-z0-9+/=]+):\s*(?:,|$)")


def content_digest(sha256: bytes) -> str:
    """The header's value for a SHA-256 (its 32 raw bytes)."""
    return f"sha-256=:{base64.b64encode(sha256).decode()}:"


def sha256_in(header: str | None) -> bytes | None:
    """The bytes a header's sha-256 holds (other algorithms beside it are passed over); None
    when it names none or they are not base64. The caller checks there are 32 of them."""
    found = _SHA256.search(header or "")
    if found is None:
        return None
    try:
        return base64.b64decode(found.group(1), validate=True)
    except binascii.Error:
        return None
