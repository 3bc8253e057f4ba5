"""The cipher the stores seal machines' secrets with (outputs, join material, kubeconfigs):
AES-256-GCM under the coordinator's secrets key, so that a copy of the database (a backup, a
dump, a stolen disk) shows none of them without the key file.

No I/O here: the key is read from its file by coordinator/server/secrets_key.py, and the store
that holds the cipher passes it to the codec."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coordinator.store.base import StoreError

KEY_BYTES = 32  # AES-256
_NONCE_BYTES = 12  # GCM's standard nonce, random per seal: 2**32 seals per key stay safe
_VERSION = "v1:"  # before every sealed text, so that another scheme can be told apart later
_FINGERPRINT_LABEL = b"nodeagent coordinator secrets key fingerprint"


class SecretsKeyError(StoreError):
    """The secrets key cannot open what the database holds, or there is no key to seal with:
    secrets are never dropped or stored in the clear instead."""


def key_from_text(text: bytes) -> bytes | None:
    """The key a key file's text holds (KEY_BYTES bytes in base64); None when it holds none."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        return None
    return key if len(key) == KEY_BYTES else None


class Cipher:
    """Seals and opens text under one key. A sealed text is bound to its context ("machine ID"):
    moved into another machine's document, it fails to open instead of lending that machine
    the first one's secrets."""

    def __init__(self, key: bytes, source: str) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a secrets key is {KEY_BYTES} bytes, not {len(key)}")
        self._aead = AESGCM(key)
        self._key = key
        self.source = source  # where the key came from (its file), for error messages
        # Names the key without revealing it: the database keeps it to refuse another key.
        self.fingerprint = hmac.new(key, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:32]

    def derive(self, purpose: bytes) -> bytes:
        """A key of its own for another purpose (signing artifact links), bound to this one:
        replicas sharing the secrets key derive the same."""
        return hmac.new(self._key, purpose, hashlib.sha256).digest()

    @staticmethod
    def new_key() -> bytes:
        return AESGCM.generate_key(bit_length=KEY_BYTES * 8)

    def seal(self, plaintext: str, context: str) -> str:
        return self.seal_bytes(plaintext.encode(), context)

    def seal_bytes(self, plaintext: bytes, context: str) -> str:
        """Bytes (a chunk of an etcd snapshot) sealed as text, as seal() seals text."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, context.encode())
        return _VERSION + base64.b64encode(nonce + sealed).decode("ascii")

    def unseal(self, sealed: str, context: str) -> str:
        """The plaintext; SecretsKeyError naming the key file when this key did not seal it
        (or not for this context)."""
        return self.unseal_bytes(sealed, context).decode()

    def unseal_bytes(self, sealed: str, context: str) -> bytes:
        """What seal_bytes sealed; SecretsKeyError as unseal()."""
        if not sealed.startswith(_VERSION):
            raise SecretsKeyError(f"the secrets of {context} are sealed in an unknown format "
                                  f"({sealed[:3]!r}): written by a newer coordinator?")
        raw = base64.b64decode(sealed[len(_VERSION):])
        try:
            return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode())
        except InvalidTag:
            raise SecretsKeyError(
                f"cannot decrypt the secrets of {context} with the key in {self.source}: it is "
                "not the key they were sealed with (restore the secrets.key backed up with "
                "this database)") from None

    def verify(self, fingerprint: str) -> None:
        """Raises unless fingerprint (what the database recorded of the key that seals its
        secrets) is this key's: a replica with a key of its own would seal what the others
        cannot open."""
        if not hmac.compare_digest(fingerprint, self.fingerprint):
            raise SecretsKeyError(
                f"{self.source} is not the key this database's secrets are sealed with (key "
                f"{self.fingerprint}, the database's {fingerprint}): copy secrets.key from the "
                "data dir of a replica that uses this database, or restore the one backed up "
                "with it, in place of this one")
