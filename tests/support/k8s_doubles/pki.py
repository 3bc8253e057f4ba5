"""The certificates kubeadm's certs phase makes: cluster-wide CAs (kept in the doubles' shared
state, as the kubeadm-certs Secret carries them to joining managers) and each node's leaf
certificates signed by them, real enough for a real etcd to serve and check TLS with."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Pair = dict[str, str]  # {"cert": PEM, "key": PEM}


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def ca(data: dict[str, Any], field: str, common: str) -> Pair:
    """A cluster-wide CA kept in the shared state under field; made the first time."""
    if field not in data:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(True, False, True, False, False, True, True, False,
                                             False), critical=True)
                .sign(key, hashes.SHA256()))
        data[field] = {"cert": cert.public_bytes(serialization.Encoding.PEM).decode(),
                       "key": _key_pem(key)}
    return dict(data[field])


def leaf(authority: Pair, common: str, names: list[str], server: bool, client: bool) -> Pair:
    """A certificate signed by authority for common, with names (DNS names and IPs) as SANs."""
    issuer = x509.load_pem_x509_certificate(authority["cert"].encode())
    signer = serialization.load_pem_private_key(authority["key"].encode(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    builder = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(issuer.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=365))
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if names:
        sans: list[x509.GeneralName] = []
        for name in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(signer, hashes.SHA256())  # type: ignore[arg-type]
    return {"cert": cert.public_bytes(serialization.Encoding.PEM).decode(), "key": _key_pem(key)}


def public_key_pem(pair: Pair) -> str:
    key = serialization.load_pem_private_key(pair["key"].encode(), None)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def ca_hash(pem: str) -> str:
    """kubeadm's pin: sha256 of the CA's SubjectPublicKeyInfo."""
    spki = x509.load_pem_x509_certificate(pem.encode()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()
