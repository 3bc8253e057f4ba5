"""The machine's own credential, kept in the state dir (identity.json). Read by the daemon,
which rotates it, and by a phase's child process, for its artifact downloads.

The agent chooses each credential itself and saves it before it sends it, at registration as
at rotation: an answer lost on the way (a crash on either side) never leaves the machine's
record with a credential that its agent does not have."""

from __future__ import annotations

import dataclasses
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from nodeagent.atomic import atomic_write

IDENTITY_FILE = "identity.json"  # in the state dir
NEXT_IDENTITY_FILE = "identity.next.json"  # a rotation's next credential, saved before it is sent
REGISTRATION_FILE = "registration.json"  # the credential of a registration not answered yet


@dataclass
class Identity:
    """Mutable: a rotation updates it in place for every task that holds it."""

    machine_id: str
    credential: str
    issued_at: float = 0.0
    expires_at: float | None = None

    def due_for_rotation(self, now: float) -> bool:
        """Two thirds into its life, like kubelet's certificate rotation."""
        if self.expires_at is None:
            return False
        return now >= self.issued_at + (self.expires_at - self.issued_at) * 2 / 3


def load_identity(path: Path) -> Identity | None:
    try:
        data = json.loads(path.read_text())
        return Identity(data["machine_id"], data["credential"], data.get("issued_at", 0.0),
                        data.get("expires_at"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_identity(path: Path, identity: Identity) -> None:
    atomic_write(path, json.dumps(dataclasses.asdict(identity)).encode(), mode=0o600)


def new_credential() -> str:
    """256 random bits, prefixed as the coordinator's machine tokens are, so that the
    redaction of logs and item output (nodeagent/wire/redact.py) knows it for a secret."""
    return "machine_" + secrets.token_urlsafe(32)


def registration_credential(path: Path) -> str:
    """The credential to register with: the one saved at path for an earlier attempt (the
    coordinator answers a retry with it with the machine that attempt registered), else a new
    one, saved at path before it is ever sent."""
    try:
        return str(json.loads(path.read_text())["credential"])
    except (OSError, ValueError, KeyError, TypeError):
        credential = new_credential()
        atomic_write(path, json.dumps({"credential": credential}).encode(), mode=0o600)
        return credential
