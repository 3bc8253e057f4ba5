"""Which machine an agent request comes from: every agent request starts here, so what was
read of a credential is kept a while and a heartbeat costs no database read. Writes of a
machine, here or (relayed) on another replica, correct the cache at once."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from coordinator.domain.errors import Gone, Unauthorized
from coordinator.domain.machines.tokens import token_hash
from coordinator.domain.model import Machine
from coordinator.domain.records import CredentialOwner
from coordinator.store.base import Store

# How long this process trusts what it read of a credential. Writes of the machine, by this
# replica or (relayed) by another, forget its entry at once; the bound is for writes no
# replica relays (a CLI on the database). Several heartbeat intervals (10 s by default): a
# bound of one interval would find every entry just expired at each heartbeat.
CREDENTIAL_CACHE_SECONDS = 60.0


class CredentialCache:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._owners: dict[str, tuple[float, CredentialOwner]] = {}  # hash -> (read at, owner)
        self._owner_hashes: dict[str, str] = {}  # machine id -> its cached credential hash
        self._forgotten = 0  # grows on every forget: a read that raced one is not cached

    async def authenticate_any(self, credential: str) -> CredentialOwner:
        """The machine the credential belongs to; Gone when that machine was deleted,
        Unauthorized when there is none, or the credential expired."""
        digest, now = token_hash(credential), self.clock()
        cached = self._owners.get(digest)
        if cached is not None and now - cached[0] <= CREDENTIAL_CACHE_SECONDS:
            owner: CredentialOwner | None = cached[1]
        else:
            forgotten = self._forgotten
            owner = await self.store.credential_owner(digest)
            if owner is not None and forgotten == self._forgotten:
                self._owners[digest] = (now, owner)
                self._owner_hashes[owner.machine_id] = digest
        if owner is None:
            removed = await self.store.removed_credential(digest)
            if removed is not None:  # its agent learns why, and that it must register again
                raise Gone(removed.notice())
            raise Unauthorized("unknown or revoked machine credential")
        if owner.expires_at is not None and self.clock() >= owner.expires_at:
            raise Unauthorized(f"the credential of {owner.hostname} expired: delete the "
                               "machine and let it join again")
        return owner

    async def authenticate(self, machine_id: str, credential: str) -> CredentialOwner:
        """The machine the credential belongs to, which must be the one the request names."""
        owner = await self.authenticate_any(credential)
        if owner.machine_id != machine_id:
            raise Unauthorized("this credential belongs to another machine")
        return owner

    def forget(self, machine_ids: Iterable[str], written: Iterable[Machine] = ()) -> None:
        """Drop what was cached of the machines just written (machine_ids), or keep it as
        written here (written): an item report, say, then costs the agent's next request no
        read, and a revoked or replaced credential still takes effect at once."""
        self._forgotten += 1
        written = list(written)
        replaced = [m.id for m in written if self._owner_hashes.get(m.id, m.credential_hash)
                    != m.credential_hash]  # a new or revoked credential
        for machine_id in [*machine_ids, *replaced]:
            digest = self._owner_hashes.pop(machine_id, None)
            if digest is not None:
                self._owners.pop(digest, None)
        for machine in written:  # what is still cached has the credential it was read with
            cached = self._owners.get(self._owner_hashes.get(machine.id, ""))
            if cached is None:
                continue
            self._owners[machine.credential_hash] = (cached[0], CredentialOwner(
                machine_id=machine.id, cluster=machine.cluster, hostname=machine.hostname,
                expires_at=machine.credential_expires_at, responding=machine.responding))

    def forget_all(self) -> None:
        """Another replica wrote machines, unknown which."""
        self.forget(list(self._owner_hashes))
