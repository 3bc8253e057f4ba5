"""The coordinator's own small CA: it signs the server certificate agents verify. Made with
the `cryptography` library; keys never leave DATA_DIR/pki (mode 0700, every file 0600)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVER_DAYS = 825


class PkiError(Exception):
    pass


@dataclass(frozen=True)
class Pki:
    """Where the files live."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    def exists(self) -> bool:
        return self.server_cert.exists() and self.server_key.exists() and self.ca_cert.exists()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def subject_alt_names(names: list[str]) -> list[x509.GeneralName]:
    """IP addresses become IP SANs, everything else DNS SANs."""
    found: list[x509.GeneralName] = []
    for name in names:
        try:
            found.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            found.append(x509.DNSName(name))
    return found


def certificate_names(cert: Path) -> list[str]:
    """The names and addresses a certificate is valid for (its SANs), as written."""
    loaded = x509.load_pem_x509_certificate(cert.read_bytes())
    try:
        sans = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(name.value) for name in sans
            if isinstance(name, (x509.DNSName, x509.IPAddress))]


def names_host(names: list[str], host: str) -> bool:
    """Whether a client verifying the certificate would accept host: an address equal to an
    IP SAN (2001:db8::1 is 2001:DB8:0::1), else a DNS SAN, case-insensitive, a `*.` one
    standing for exactly one leftmost label (RFC 6125)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    wanted = host.lower().rstrip(".")
    for name in names:
        try:
            if ipaddress.ip_address(name) == address:
                return True
            continue
        except ValueError:
            pass
        pattern = name.lower().rstrip(".")
        if address is None and (pattern == wanted or (
                pattern.startswith("*.") and "." in wanted
                and wanted.split(".", 1)[1] == pattern[2:])):
            return True
    return False


def create(pki: Pki, names: list[str], now: datetime.datetime | None = None) -> None:
    """A new CA and a server certificate for `names` (host names and addresses agents and
    admins use to reach the coordinator). Refuses to replace an existing CA: every agent
    pinned it."""
    if pki.ca_cert.exists() or pki.ca_key.exists():
        raise PkiError(f"{pki.directory} already holds a CA; agents trust it, so it is kept")
    if not names:
        raise PkiError("give at least one name or address for the server certificate")
    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder()
          .subject_name(_name("nodeagent coordinator CA")).issuer_name(_name("nodeagent coordinator CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder()
              .subject_name(_name(names[0])).issuer_name(ca.subject)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
              .add_extension(x509.SubjectAlternativeName(subject_alt_names(names)), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    pki.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(pki.ca_key, _key_pem(ca_key), 0o600)
    _write(pki.ca_cert, ca.public_bytes(serialization.Encoding.PEM), 0o600)
    _write(pki.server_key, _key_pem(server_key), 0o600)
    _write(pki.server_cert, server.public_bytes(serialization.Encoding.PEM), 0o600)
