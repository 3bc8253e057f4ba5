"""The one string a node needs to join safely: the coordinator's URL, a join token and the
hash of the coordinator's CA certificate (as kubeadm's discovery-token-ca-cert-hash), so the
agent can tell the real coordinator from anyone else before it trusts anything it says."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import ssl
from dataclasses import dataclass

PREFIX = "na1."
_PIN = re.compile(r"^sha256:[0-9a-f]{64}$")
# A reissue string's token names the machine it is bound to: `rejoin_<machine id>_<hex>`. The
# id is no secret; the hex part (no `_` in it) is, and only the whole token's hash is kept.
# Here, not in the coordinator: the agent too tells one from a join token (a refused one has
# another remedy).
REISSUE_PREFIX = "rejoin_"


class BadJoinString(ValueError):
    pass


@dataclass(frozen=True)
class JoinString:
    url: str
    token: str
    ca_hash: str | None  # "sha256:<hex>" of the CA certificate (DER); None for plain HTTP

    def encode(self) -> str:
        document = {"url": self.url, "token": self.token, "caHash": self.ca_hash}
        raw = json.dumps(document, separators=(",", ":")).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def reissued_machine(token: str) -> str | None:
    """The id of the machine a reissue token is bound to; None for any other token."""
    if not token.startswith(REISSUE_PREFIX):
        return None
    machine_id, _, secret = token[len(REISSUE_PREFIX):].rpartition("_")
    return machine_id if machine_id and secret else None


def ca_hash(pem: str) -> str:
    """The pin of a CA certificate: sha256 of its DER encoding."""
    return "sha256:" + hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def make(url: str, token: str, ca_pem: str | None) -> str:
    """The join string for a coordinator at url with this CA (None: plain HTTP)."""
    return JoinString(url, token, ca_hash(ca_pem) if ca_pem else None).encode()


def decode(text: str) -> JoinString:
    text = text.strip()
    if not text.startswith(PREFIX):
        raise BadJoinString(f"a join string starts with {PREFIX!r} (get one with "
                            "`coordinator join-token create`)")
    body = text[len(PREFIX):]
    try:
        document = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise BadJoinString("the join string is damaged (not base64url JSON): copy it again") \
            from None
    if not isinstance(document, dict):
        raise BadJoinString("the join string is damaged: copy it again")
    url, token, pin = document.get("url"), document.get("token"), document.get("caHash")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise BadJoinString("the join string has no coordinator URL")
    if not isinstance(token, str) or not token:
        raise BadJoinString("the join string has no token")
    if pin is not None and (not isinstance(pin, str) or not _PIN.match(pin)):
        raise BadJoinString("the join string's CA hash is not sha256:<64 hex digits>")
    if url.startswith("https://") and pin is None:
        raise BadJoinString("the join string names an https coordinator but no CA hash")
    return JoinString(url, token, pin)
