"""Secrets handed to people and agents: generated with the OS's CSPRNG, stored only as hashes,
and the rules that say whether a presented one is good now (no I/O: the clock is an argument;
only new_token draws randomness)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import TYPE_CHECKING

from nodeagent.wire.joinstring import REISSUE_PREFIX

if TYPE_CHECKING:
    from coordinator.domain.records import AdminToken, JoinToken

ADMIN = "admin"
READ_ONLY = "read-only"
ADMIN_ROLES = (ADMIN, READ_ONLY)
DEFAULT_JOIN_TTL_SECONDS = 24 * 3600.0
DEFAULT_CREDENTIAL_TTL_SECONDS = 365 * 24 * 3600.0

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_DAYS = 36500  # a century: longer ones are typos, and 400 nines overflow to infinity


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def new_reissue_token(machine_id: str) -> str:
    """A reissue string's token (its format: nodeagent/wire/joinstring.py)."""
    return f"{REISSUE_PREFIX}{machine_id}_{secrets.token_hex(32)}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id(hashed: str) -> str:
    """The public name of a stored token: a prefix of its hash, useless for authenticating."""
    return hashed[:12]


def same_token(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def parse_duration(text: str) -> float:
    """'90s', '15m', '24h', '365d' or plain seconds; 0 means 'never expires' to callers."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 15m, 24h, 365d)")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION_DAYS * 86400:
        raise ValueError(f"{text!r} is longer than {MAX_DURATION_DAYS}d; 0 never expires")
    return seconds


def join_token_state(token: JoinToken, now: float) -> str:
    """active, or in a word why it cannot be used at `now`: revoked, expired or used up (in
    that order: what an operator would have to undo first)."""
    if token.revoked:
        return "revoked"
    if token.expires_at is not None and now >= token.expires_at:
        return "expired"
    if token.max_uses is not None and token.uses >= token.max_uses:
        return "used up"
    return "active"


def join_refusal(token: JoinToken | None, now: float) -> str | None:
    """Why a join token cannot be used at `now`, or None when it can."""
    if token is None:
        return "unknown join token"
    state = join_token_state(token, now)
    if state == "used up":
        return f"join token {token.id} was used {token.uses} times, its limit"
    return None if state == "active" else f"join token {token.id} {state}"


def admin_refusal(token: AdminToken | None, changes: bool) -> tuple[int, str] | None:
    """(HTTP status, reason) when this admin token may not make the request; `changes`: it
    may change something (not a read, nor a dry run)."""
    if token is None or token.revoked:
        return 401, "unknown or revoked admin token"
    if token.role != ADMIN and changes:
        return 403, f"admin token {token.name!r} is {token.role}: it may only read"
    return None
