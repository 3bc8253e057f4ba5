"""Secrets handed to people and agents: generated with the OS's CSPRNG, stored only as hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_token(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())
