"""Short-lived signed links to one artifact: the API's route authenticates the machine and
answers with one (307), and the artifact port serves its bytes to whoever holds it until it
expires, without a credential or the store (see docs/architecture.md, "Artifact bytes").
The key is derived from the secrets key, which replicas share: a link made by one replica is
honoured by another behind the same load balancer."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

LINK_SECONDS = 60  # time to follow the redirect; a download under way is never cut


@dataclass(frozen=True)
class ArtifactLinks:
    key: bytes
    port: int  # the artifact port's

    def sign(self, name: str, expires: int) -> str:
        message = f"{expires}\n{name}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def query(self, name: str, now: float) -> dict[str, str]:
        """The query that lets its holder download `name` until LINK_SECONDS from now."""
        expires = int(now) + LINK_SECONDS
        return {"expires": str(expires), "signature": self.sign(name, expires)}

    def valid(self, name: str, expires: str, signature: str, now: float) -> bool:
        """Whether a link's query, as received, still opens `name`."""
        if not (expires.isascii() and expires.isdigit()) or int(expires) < now:
            return False
        return hmac.compare_digest(self.sign(name, int(expires)).encode(), signature.encode())
