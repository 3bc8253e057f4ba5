"""Agent log lines: one logfmt line per event, priorities when stderr is the journal."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import pytest

from nodeagent.wire.logfmt import LogfmtFormatter, configure, fields, stream_is_journal


def record(message: str, level: int = logging.INFO, **values: object) -> logging.LogRecord:
    made = logging.LogRecord("nodeagent", level, __file__, 1, message, (), None)
    made.fields = values  # type: ignore[attr-defined]
    made.created, made.msecs = 1_700_000_000.25, 250
    return made


def test_fields_are_key_value_pairs_quoted_only_when_needed() -> None:
    line = LogfmtFormatter().format(record(
        "item failed", logging.WARNING, item="join", attempt=3, duration=1.5, exit_code=None,
        ok=False, error='exit status 1: "kubeadm"\nsecond line'))
    assert line == ('ts=2023-11-14T22:13:20.250Z level=warning logger=nodeagent msg="item failed" '
                    'item=join attempt=3 duration=1.5 ok=false '
                    'error="exit status 1: \\"kubeadm\\"\\nsecond line"')
    assert "\n" not in line


def test_in_the_journal_lines_carry_the_syslog_priority_and_no_timestamp() -> None:
    journal = LogfmtFormatter(journal=True)
    assert journal.format(record("registered")) == '<6>level=info logger=nodeagent msg=registered'
    assert journal.format(record("x", logging.ERROR)).startswith("<3>level=error ")
    assert journal.format(record("x", logging.WARNING)).startswith("<4>")


def test_the_journal_is_recognised_by_the_device_and_inode_systemd_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with (tmp_path / "stream").open("w") as stream, (tmp_path / "other").open("w") as other:
        info = os.fstat(stream.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{info.st_dev}:{info.st_ino}")
        assert stream_is_journal(stream)
        assert not stream_is_journal(other)
        monkeypatch.delenv("JOURNAL_STREAM")
        assert not stream_is_journal(stream)
    assert not stream_is_journal(io.StringIO())


def test_configure_sends_structured_lines_from_any_agent_logger() -> None:
    out = io.StringIO()
    configure("info", out)
    try:
        logging.getLogger("nodeagent").info("item %s", "succeeded", extra=fields(item="base"))
        logging.getLogger("nodeagent").debug("hidden")
    finally:
        logging.basicConfig(force=True)
    (line,) = out.getvalue().splitlines()
    assert line.endswith('level=info logger=nodeagent msg="item succeeded" item=base')
