"""Secrets never travel in item output, events, status or logs: this blanks what looks like
one. Applied where text enters a report (protocol.ItemReport) and to every log line."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

MASK = "[REDACTED]"

_PATTERNS = (
    # This project's own secrets: join, reissue, machine and admin tokens, join strings.
    re.compile(r"\b(?:join|rejoin|machine|admin|reader)_[A-Za-z0-9_-]{20,}"),
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


# Values shorter than this are not masked by value: a short secret would blank unrelated
# text wherever it happens to appear ("admin", "1.30"), and so short a fragment gives little away.
MIN_MASKED_CHARS = 6


def mask_values(text: str, values: Iterable[str]) -> str:
    """Blank each of values (secrets the agent was handed or an item produced) wherever it
    appears in text, the longest first so that one containing another goes whole; also the end
    of one that text starts with, as an output tail cut in the middle of a value does."""
    kept = sorted({v for v in values if len(v) >= MIN_MASKED_CHARS}, key=len, reverse=True)
    if not kept:
        return text
    text = re.sub("|".join(re.escape(v) for v in kept), MASK, text)
    cut = max((len(value) - start for value in kept
               for start in range(1, len(value) - MIN_MASKED_CHARS + 1)
               if text.startswith(value[start:])), default=0)
    return MASK + text[cut:] if cut else text


class RedactingFilter(logging.Filter):
    """Blanks secrets in every record's final message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
