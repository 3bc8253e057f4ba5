"""Who may talk to the coordinator: join tokens (scoped to a cluster, with a TTL and a use
limit) and admin API tokens (admin or read-only). Secrets are shown once and stored only as
hashes; the rules deciding whether one is good are the pure functions in domain/machines/tokens.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from coordinator.domain.errors import Forbidden, NotFound, Unauthorized
from coordinator.domain.machines.reissue import issued_to
from coordinator.domain.machines.tokens import (
    ADMIN,
    ADMIN_ROLES,
    admin_refusal,
    join_refusal,
    new_token,
    token_hash,
)
from coordinator.domain.records import AdminToken, JoinToken
from coordinator.store.base import Store
from nodeagent.wire.joinstring import reissued_machine


class Access:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    # -- join tokens ----------------------------------------------------------------
    async def create_join_token(self, cluster: str, ttl: float | None,
                                max_uses: int | None,
                                auto_approve: bool = False) -> tuple[str, JoinToken]:
        """ttl None or 0: never expires; max_uses None: unlimited; cluster POOL: a token into
        the pool, whose machines auto_approve approves once their prechecks pass."""
        if max_uses is not None and max_uses < 1:
            raise ValueError("maxUses must be at least 1")
        secret = new_token("join")
        now = self.clock()
        token = await self.store.add_join_token(
            cluster, token_hash(secret), now, now + ttl if ttl else None, max_uses,
            auto_approve)
        return secret, token

    async def revoke_join_token(self, token_id: str) -> JoinToken:
        token = await self.store.revoke_join_token(token_id)
        if token is None:
            raise NotFound(f"no join token {token_id}")
        return token

    async def usable_join_token(self, secret: str) -> JoinToken:
        """The token, to admit to its cluster (or the pool), counting no use (a registration
        refused for another reason must not cost one); Unauthorized saying why not."""
        token = await self.store.join_token(token_hash(secret))
        refusal = join_refusal(token, self.clock())
        if refusal is not None or token is None:
            raise Unauthorized(refusal or "join token not usable")
        return token

    async def join_refused(self, secret: str) -> Unauthorized:
        """Why the token's use did not count with its registration (Change.token_use, one
        conditional update in the registration's transaction: two registrations never share
        a token's last use), as the token is now."""
        token = await self.store.join_token(token_hash(secret))
        return Unauthorized(join_refusal(token, self.clock()) or "join token not usable")

    async def known_join_token(self, secret: str) -> None:
        """Unauthorized unless secret is a join token this coordinator issued: checked before a
        registration's body is read, so a stranger's costs no parsing. Whatever the token's
        state: a retry whose first attempt used it up still gets its machine (the
        registration itself checks the token)."""
        rejoining = reissued_machine(secret)
        if rejoining is not None:  # a reissue string's: issued to the machine it names
            if not issued_to(await self.store.get_machine(rejoining), token_hash(secret)):
                raise Unauthorized("this reissue string is not the one last issued to its "
                                   "machine: replaced by a newer one, or its machine is gone")
        elif await self.store.join_token(token_hash(secret)) is None:
            raise Unauthorized("unknown join token")

    # -- admin tokens ---------------------------------------------------------------
    async def create_admin_token(self, name: str, role: str) -> tuple[str, AdminToken]:
        if role not in ADMIN_ROLES:
            raise ValueError(f"role must be one of {', '.join(ADMIN_ROLES)}")
        secret = new_token("admin" if role == ADMIN else "reader")
        return secret, await self.store.add_admin_token(token_hash(secret), name, role,
                                                        self.clock())

    async def revoke_admin_token(self, token_id: str) -> AdminToken:
        token = await self.store.revoke_admin_token(token_id)
        if token is None:
            raise NotFound(f"no admin token {token_id}")
        return token

    async def authorize_admin(self, secret: str, changes: bool) -> AdminToken:
        token = await self.store.admin_token(token_hash(secret))
        refusal = admin_refusal(token, changes)
        if refusal is not None:
            status, reason = refusal
            raise (Unauthorized if status == 401 else Forbidden)(reason)
        assert token is not None
        return token

    async def ensure_admin_token(self, path: Path) -> None:
        """On a store without any usable admin token, create one and write it to path (0600),
        so a fresh coordinator can be administered at once and never without a token."""
        if any(not t.revoked for t in await self.store.list_admin_tokens()):
            return
        secret, _ = await self.create_admin_token("initial", ADMIN)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secret + "\n")
