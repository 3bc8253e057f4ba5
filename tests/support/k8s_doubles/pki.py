"""The certificates kubeadm's certs phase makes: cluster-wide CAs (kept in the doubles' shared
state, as the kubeadm-certs Secret carries them to joining managers) and each node's leaf
certificates signed by them, real enough for a real etcd to serve and check TLS with; and the
kubeconfig files kubeadm writes, a client certificate embedded. Dates are on the clock the
caller gives (the doubles' cluster clock, which tests move): CAs for 10 years, leaves for one,
as kubeadm signs them."""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Pair = dict[str, str]  # {"cert": PEM, "key": PEM}


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


CA_DAYS, LEAF_DAYS = 3650, 365  # kubeadm's CertificateValidityPeriod and CA's


def _name(common: str, organization: str = "") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] * bool(organization)
                     + [x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _moment(at: float | None) -> datetime.datetime:
    return (datetime.datetime.now(datetime.UTC) if at is None
            else datetime.datetime.fromtimestamp(at, datetime.UTC))


def _valid_from(now: datetime.datetime) -> datetime.datetime:
    """notBefore: 5 minutes before now, and never after the real time, which Debian's real
    etcd checks certificates against whatever the test's clock says."""
    return min(now, datetime.datetime.now(datetime.UTC)) - datetime.timedelta(minutes=5)


def ca(data: dict[str, Any], field: str, common: str, at: float | None = None,
       days: float = CA_DAYS) -> Pair:
    """A cluster-wide CA kept in the shared state under field; made the first time (at: the
    clock's now, real time when None), valid for days."""
    if field not in data:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _moment(at)
        cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(_valid_from(now))
                .not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(True, False, True, False, False, True, True, False,
                                             False), critical=True)
                .sign(key, hashes.SHA256()))
        data[field] = {"cert": cert.public_bytes(serialization.Encoding.PEM).decode(),
                       "key": _key_pem(key)}
    return dict(data[field])


def _signed(authority: Pair, subject: x509.Name, extensions: list[x509.Extension[Any]],
            at: float | None, days: float) -> Pair:
    """A new key and its certificate for subject, signed by authority, valid for days from at."""
    issuer = x509.load_pem_x509_certificate(authority["cert"].encode())
    signer = serialization.load_pem_private_key(authority["key"].encode(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _moment(at)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(_valid_from(now))
               .not_valid_after(now + datetime.timedelta(days=days)))
    for extension in extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    cert = builder.sign(signer, hashes.SHA256())  # type: ignore[arg-type]
    return {"cert": cert.public_bytes(serialization.Encoding.PEM).decode(), "key": _key_pem(key)}


def leaf(authority: Pair, common: str, names: list[str], server: bool, client: bool,
         organization: str = "", at: float | None = None, days: float = LEAF_DAYS) -> Pair:
    """A certificate signed by authority for common (and organization), with names (DNS names
    and IPs) as SANs, valid for days from at (the clock's now, real time when None)."""
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    extensions = [x509.Extension(x509.OID_EXTENDED_KEY_USAGE, False,
                                 x509.ExtendedKeyUsage(usages))]
    if names:
        sans: list[x509.GeneralName] = []
        for name in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        extensions.append(x509.Extension(x509.OID_SUBJECT_ALTERNATIVE_NAME, False,
                                         x509.SubjectAlternativeName(sans)))
    return _signed(authority, _name(common, organization), extensions, at, days)


def public_key_pem(pair: Pair) -> str:
    key = serialization.load_pem_private_key(pair["key"].encode(), None)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def ca_hash(pem: str) -> str:
    """kubeadm's pin: sha256 of the CA's SubjectPublicKeyInfo."""
    spki = x509.load_pem_x509_certificate(pem.encode()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def not_after(pem: str) -> float:
    """When the certificate expires (seconds since the epoch)."""
    return x509.load_pem_x509_certificate(pem.encode()).not_valid_after_utc.timestamp()


def client_kubeconfig(server: str, authority: Pair, pair: Pair, user: str,
                      token: str | None = None) -> str:
    """A kubeconfig as kubeadm writes admin.conf and its siblings: the cluster's CA and the
    user's client certificate and key embedded (base64 PEM); token: a bearer token besides."""
    def data(pem: str) -> str:
        return base64.b64encode(pem.encode()).decode()
    credentials = {"client-certificate-data": data(pair["cert"]),
                   "client-key-data": data(pair["key"]),
                   **({"token": token} if token else {})}
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": f"{user}@kubernetes",
        "clusters": [{"name": "kubernetes", "cluster": {
            "server": server, "certificate-authority-data": data(authority["cert"])}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": f"{user}@kubernetes",
                      "context": {"cluster": "kubernetes", "user": user}}]})


ADMIN = ("kubernetes-admin", "kubeadm:cluster-admins")  # admin.conf's user (kubeadm 1.29 on)


def admin_kubeconfig(server: str, authority: Pair, expires_at: float) -> str:
    """An admin.conf whose client certificate (kubeadm's subject) expires at expires_at."""
    pair = leaf(authority, ADMIN[0], [], server=False, client=True, organization=ADMIN[1],
                at=expires_at - LEAF_DAYS * 86400, days=LEAF_DAYS)
    return client_kubeconfig(server, authority, pair, ADMIN[0])


def renew(authority: Pair, pem: str, at: float | None = None, days: float = LEAF_DAYS) -> Pair:
    """The certificate pem signed anew by authority, as `kubeadm certs renew` does: a new key,
    the same subject and extensions (SANs, usages), valid for days from at."""
    old = x509.load_pem_x509_certificate(pem.encode())
    return _signed(authority, old.subject, list(old.extensions), at, days)
