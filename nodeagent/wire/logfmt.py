"""The agent's log lines: logfmt (key=value pairs, one event per line) on stderr, which systemd
hands to the journal. `journalctl -u nodeagent` reads them as they are; `grep item=join` or any
logfmt parser picks fields out.

When stderr *is* the journal (systemd sets JOURNAL_STREAM to its device:inode), each line starts
with a `<N>` syslog priority, so `journalctl -p warning` shows the agent's warnings, and no
timestamp, which the journal records itself.

Fields beyond level, logger and msg come from `extra=fields(key=value, ...)`; None leaves a
field out.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, TextIO

from nodeagent.wire.redact import RedactingFilter

PRIORITIES = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
              logging.CRITICAL: 2}


def fields(**values: Any) -> dict[str, dict[str, Any]]:
    """extra= for a log call: log.info("item succeeded", extra=fields(item="join"))."""
    return {"fields": values}


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    text = str(value)
    if text and not any(c in text for c in ' ="\\') and text.isprintable():
        return text
    return json.dumps(text)  # quoted, with newlines and quotes escaped: one line per event


class LogfmtFormatter(logging.Formatter):
    def __init__(self, journal: bool = False) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        pairs: dict[str, Any] = {}
        if not self.journal:
            pairs["ts"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + \
                f".{int(record.msecs):03d}Z"
        pairs.update(level=record.levelname.lower(), logger=record.name, msg=record.getMessage())
        pairs.update((k, v) for k, v in getattr(record, "fields", {}).items() if v is not None)
        if record.exc_info:
            pairs["exception"] = self.formatException(record.exc_info)
        line = " ".join(f"{key}={_value(value)}" for key, value in pairs.items())
        if self.journal:
            return f"<{PRIORITIES.get(record.levelno, 6)}>{line}"
        return line


def stream_is_journal(stream: TextIO) -> bool:
    """True when systemd connected this stream to the journal (sd_journal_stream_fd(3))."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return False
    return expected == f"{info.st_dev}:{info.st_ino}"


def configure(level: str, stream: TextIO = sys.stderr) -> None:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogfmtFormatter(journal=stream_is_journal(stream)))
    handler.addFilter(RedactingFilter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
