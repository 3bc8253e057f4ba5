"""Whether a join token or an admin token may be used (domain/machines/tokens.py, what service/access.py
asks before a registration or an admin request is read), as tables: what the operator sees in
`join-token list` and what a refused agent or admin client is told."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.machines.tokens import ADMIN, READ_ONLY, admin_refusal, join_refusal, join_token_state
from coordinator.domain.records import AdminToken, JoinToken

TOKEN = JoinToken("jt1", "edge", created_at=0.0, expires_at=100.0, max_uses=3, uses=1)
# The token as stored, when it is presented, its state in `join-token list` and the refusal
# (None: the registration is read).
JOINS = [
    pytest.param(TOKEN, 50.0, "active", None, id="within its time and uses: a join goes ahead"),
    pytest.param(replace(TOKEN, expires_at=None, max_uses=None, uses=99), 1e9, "active", None,
                 id="no expiry and no limit: always"),
    pytest.param(TOKEN, 100.0, "expired", "join token jt1 expired", id="expired: a join held"),
    pytest.param(replace(TOKEN, uses=3), 50.0, "used up",
                 "join token jt1 was used 3 times, its limit", id="used up"),
    pytest.param(replace(TOKEN, revoked=True), 50.0, "revoked", "join token jt1 revoked",
                 id="revoked"),
    pytest.param(replace(TOKEN, revoked=True, uses=3), 200.0, "revoked",
                 "join token jt1 revoked", id="revoked, expired and used up: revoked first"),
    pytest.param(replace(TOKEN, uses=3), 200.0, "expired", "join token jt1 expired",
                 id="expired and used up: expired first"),
    pytest.param(None, 50.0, None, "unknown join token", id="a token never issued"),
]


@pytest.mark.parametrize(("token", "now", "state", "refused"), JOINS)
def test_join_token_table(token: JoinToken | None, now: float, state: str | None,
                          refused: str | None) -> None:
    if token is not None:
        assert join_token_state(token, now) == state
    assert join_refusal(token, now) == refused


WRITER = AdminToken("at1", "ci", ADMIN, created_at=0.0)
READER = AdminToken("at2", "dashboard", READ_ONLY, created_at=0.0)
# The admin token, whether the request may change something (not a read, nor a dry run), and
# the answer (None: it is served).
ADMINS = [
    pytest.param(WRITER, True, None, id="an admin token changes"),
    pytest.param(READER, False, None, id="a read-only token reads"),
    pytest.param(READER, True, (403, "admin token 'dashboard' is read-only: it may only read"),
                 id="a read-only token may not change: 403"),
    pytest.param(replace(WRITER, revoked=True), False, (401, "unknown or revoked admin token"),
                 id="a revoked token: 401, even to read"),
    pytest.param(None, False, (401, "unknown or revoked admin token"), id="an unknown token"),
]


@pytest.mark.parametrize(("token", "changes", "answer"), ADMINS)
def test_admin_token_table(token: AdminToken | None, changes: bool,
                           answer: tuple[int, str] | None) -> None:
    assert admin_refusal(token, changes) == answer
