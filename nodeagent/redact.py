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
)
# kubeconfig and similar YAML/JSON fields whose value is a secret: keep the key, blank the value.
_SECRET_FIELDS = re.compile(
    r"(?im)((?:client-key-data|client-certificate-data|token|password|secret)\"?\s*[:=]\s*\"?)"
    r"[^\s\"',}]+")


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(MASK, text)
    return _SECRET_FIELDS.sub(lambda m: m.group(1) + MASK, text)


class RedactingFilter(logging.Filter):
    """Blanks secrets in every record's final message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
