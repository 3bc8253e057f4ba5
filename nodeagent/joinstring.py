"""Join strings: everything a node needs to join, in one string an operator can paste.

`nodeagent-join-v1:` followed by base64url(JSON) of {"url": ..., "token": ...}. The JSON
form leaves room for what the TLS issue adds (a CA pin, e.g. "caSha256"): a field this
agent does not know is refused, never ignored, so an older agent can never silently drop a
pin it was given and trust any certificate.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

PREFIX = "nodeagent-join-v1:"
KNOWN_FIELDS = frozenset({"url", "token"})


def check_coordinator_url(value: str) -> str:
    """The URL rules for a coordinator address; ValueError saying what is wrong."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    parts = urlsplit(value)
    if not parts.hostname:
        raise ValueError("must name a host, e.g. https://coordinator.example:8443")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError("port must be a number from 1 to 65535")
    return value


@dataclass(frozen=True)
class JoinString:
    url: str
    token: str

    def __str__(self) -> str:
        payload = json.dumps({"url": self.url, "token": self.token}, separators=(",", ":"))
        return PREFIX + base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def parse_join_string(text: str) -> JoinString:
    """The join string's fields; ValueError naming what is wrong with it."""
    text = text.strip()
    if not text.startswith(PREFIX):
        raise ValueError(f"a join string starts with {PREFIX!r}")
    encoded = text[len(PREFIX):]
    try:
        fields = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (binascii.Error, ValueError):
        raise ValueError("the join string is damaged (not base64url-encoded JSON)") from None
    if not isinstance(fields, dict):
        raise ValueError("the join string is damaged (not a JSON object)")
    unknown = sorted(set(fields) - KNOWN_FIELDS)
    if unknown:
        raise ValueError(f"the join string carries {', '.join(unknown)}, which this agent "
                         "does not support: upgrade the agent")
    missing = sorted(name for name in KNOWN_FIELDS if not isinstance(fields.get(name), str)
                     or not fields[name])
    if missing:
        raise ValueError(f"the join string has no {', '.join(missing)}")
    try:
        check_coordinator_url(fields["url"])
    except ValueError as exc:
        raise ValueError(f"the join string's url {exc}") from None
    return JoinString(fields["url"], fields["token"])
