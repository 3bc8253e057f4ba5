"""Secrets never travel in item output, events, status or logs: this blanks what looks like
one. Applied where text enters a report (protocol.ItemReport) and to every log line."""

from __future__ import annotations

import logging
import re

MASK = "[REDACTED]"

_PATTERNS = (
    # This project's own secrets: join, machine and admin tokens, join strings.
    re.compile(r"\b(?:join|machine|admin|reader)_[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bna1\.[A-Za-z0-9_-]{20,}"),
    # Private keys in PEM, whole blocks (also a block cut off by the 4 KiB output tail).
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
               re.DOTALL),
    # Bearer tokens in headers or command lines.
    re.compile(r"(?i)(?<=\bbearer )[A-Za-z0-9._~+/=-]{8,}"),
    # kubeadm bootstrap tokens wherever they appear (`kubeadm token create` prints one alone).
    re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b"),
)
# Secrets that follow a name which stays: group 1 is kept, what follows it up to the next
# space, quote or separator is blanked. Each pattern costs a scan of every output and log
# line: one that starts with a literal (://, --) is skipped through fastest.
_SECRET_VALUES = (
    # kubeconfig and similar YAML/JSON fields whose value is a secret.
    re.compile(r"(?im)((?:client-key-data|client-certificate-data|token|password|secret|"
               r"api[_-]?key)\"?\s*[:=]\s*\"?)[^\s\"',}]+"),
    # kubeadm's flags (the CA cert hash is not secret, but with a token it admits a node), and
    # the certificate key `kubeadm init --upload-certs` prints on the line after its name.
    re.compile(r"(--(?:token|certificate-key|discovery-token-ca-cert-hash)(?:=|\s+)(?:sha256:)?)"
               r"[^\s\"']+"),
    re.compile(r"(certificate key:\s*)[0-9a-f]{64}\b"),
    # Environment-style assignments to a name with secret or password in it, in any case (what
    # comes before the word stays as it is: the pattern starts at the word, for speed).
    re.compile(r"(?i)((?:secret|passw(?:or)?d)[a-z0-9_]*=[\"']?)[^\s\"']+"),
    re.compile(r"(?i)(authorization:\s*basic\s+)[A-Za-z0-9+/=]+"),
    # The password of a URL's user: the user stays.
    re.compile(r"(://[^\s:/@]+:)[^\s/@]+(?=@)"),
)


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(MASK, text)
    for pattern in _SECRET_VALUES:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """Blanks secrets in every record's final message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
