"""Reading a kubeconfig a manager reported, without ever quoting it: it holds credentials. Its
client certificate is read for its subject and dates alone (the status shows when it
expires; a report never replaces it with one that expires sooner)."""

from __future__ import annotations

import base64
import binascii
import functools
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization


@dataclass(frozen=True)
class ClientCertificate:
    """What may be shown of a kubeconfig's client certificate: never the certificate itself."""

    subject: str  # RFC 4514, e.g. "O=kubeadm:cluster-admins,CN=kubernetes-admin"
    not_before: float
    not_after: float


def parse_kubeconfig(text: str) -> dict[str, Any]:
    """A kubeconfig's YAML (or JSON) as the client library loads it; ValueError saying what is
    wrong, never quoting the document (it holds credentials)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError("not YAML" + (f" (line {mark.line + 1})" if mark else "")) from None
    if not isinstance(document, dict):
        raise ValueError("not a mapping")
    for key in ("clusters", "contexts", "users"):
        if not isinstance(document.get(key), list) or not document[key]:
            raise ValueError(f"no {key}")
    return document


def _named(entries: list[Any], name: object, field: str) -> dict[str, Any]:
    """The `field` mapping of the entry called name (the first entry when name is None)."""
    found = next((e for e in entries if isinstance(e, dict)
                  and (name is None or e.get("name") == name)), None)
    value = found.get(field) if found is not None else None
    return value if isinstance(value, dict) else {}


def _client_certificate(document: dict[str, Any]) -> ClientCertificate | None:
    """The client certificate of the current context's user (the first context when none is
    current), from client-certificate-data; None when that user has none (a token)."""
    context = _named(document["contexts"], document.get("current-context"), "context")
    user = _named(document["users"], context.get("user"), "user")
    data = user.get("client-certificate-data")
    if data is None:
        return None
    try:
        cert = x509.load_pem_x509_certificate(base64.b64decode(str(data), validate=True))
    except (binascii.Error, ValueError):
        raise ValueError("client-certificate-data is not a base64 PEM certificate") from None
    return certificate_dates(cert.public_bytes(serialization.Encoding.DER))


def certificate_dates(der: bytes) -> ClientCertificate:
    """A DER certificate's subject and dates (an API server's, from its handshake)."""
    cert = x509.load_der_x509_certificate(der)
    return ClientCertificate(cert.subject.rfc4514_string(), cert.not_valid_before_utc.timestamp(),
                             cert.not_valid_after_utc.timestamp())


def server_of(text: str) -> str | None:
    """The API server's URL the kubeconfig's current context names (None: none, or unusable)."""
    try:
        document = parse_kubeconfig(text)
    except ValueError:
        return None
    context = _named(document["contexts"], document.get("current-context"), "context")
    server = _named(document["clusters"], context.get("cluster"), "cluster").get("server")
    return server if isinstance(server, str) else None


@functools.lru_cache(maxsize=64)
def client_certificate(text: str) -> ClientCertificate | None:
    """The kubeconfig's client certificate (None: it authenticates otherwise); ValueError when
    it is unusable. Cached: a watched status asks for it every second."""
    return _client_certificate(parse_kubeconfig(text))


def kubeconfig_problem(text: str) -> str | None:
    """What makes the kubeconfig unusable, or None."""
    try:
        client_certificate(text)
    except ValueError as exc:
        return str(exc)
    return None


def expires_sooner(reported: str, held: str) -> ClientCertificate | None:
    """The held kubeconfig's client certificate when the reported one's expires before it (a
    copy older than the one held: kept out); None when the reported one may replace it."""
    if not held:
        return None
    try:
        new, old = client_certificate(reported), client_certificate(held)
    except ValueError:
        return None
    return old if new is not None and old is not None and new.not_after < old.not_after else None
