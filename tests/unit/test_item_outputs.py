"""Finding an item's line outputs in its output however it arrives, and what a report shows of
its secret ones."""

from __future__ import annotations

from typing import Any

from nodeagent.items.outputs import OutputLines, shown
from nodeagent.wire.protocol import MAX_OUTPUT_BYTES, ItemOutput, StateItem
from nodeagent.wire.redact import MASK

OUTPUTS = [ItemOutput(name="token"), ItemOutput(name="caCertHash", secret=False),
           ItemOutput(name="cert", file="/etc/cert.pem")]


def item(**fields: Any) -> StateItem:
    return StateItem.model_validate({"name": "mint", "phase": "mint", "outputs": OUTPUTS,
                                     "action": {"type": "exec", "argv": ["true"]}, **fields})


def read(*chunks: bytes) -> OutputLines:
    lines = OutputLines(OUTPUTS)
    for chunk in chunks:
        lines.feed(chunk)
    lines.finish()
    return lines


def test_the_last_line_of_each_output_counts_however_the_stream_is_cut() -> None:
    stream = b"token=first\nnoise token=no\r\ncaCertHash=sha256:ab\r\ntoken=second-one\ncert=x\n"
    for size in (1, 3, 7, len(stream)):
        lines = read(*(stream[i:i + size] for i in range(0, len(stream), size)))
        assert lines.values == {"token": "second-one", "caCertHash": "sha256:ab"}, size
        assert lines.secrets == {"first", "second-one"}


def test_a_last_line_without_a_newline_counts_once_the_stream_is_over() -> None:
    lines = read(b"token=one\ntoken=two")
    assert lines.values == {"token": "two"}
    lines.finish()
    assert lines.values == {"token": "two"}


def test_a_line_too_long_for_a_report_is_seen_to_be_too_long_in_bounded_memory() -> None:
    lines = read(b"token=", b"x" * MAX_OUTPUT_BYTES * 4, b"\ncaCertHash=ok\n")
    assert len(lines.values["token"].encode()) > MAX_OUTPUT_BYTES
    assert len(lines.values["token"]) < MAX_OUTPUT_BYTES + 64
    assert lines.values["caCertHash"] == "ok"


def test_an_item_without_line_outputs_reads_nothing() -> None:
    lines = OutputLines([ItemOutput(name="cert", file="/etc/cert.pem")])
    lines.feed(b"cert=x\n")
    lines.finish()
    assert lines.values == {}


def test_secret_output_lines_show_as_redacted_and_secret_values_are_masked() -> None:
    text = "token=abc\n  token=indented\ncaCertHash=sha256:ab\ncert=pem\nsaw value-42 twice\n"
    assert shown(text, item(), ["value-42"]) == (
        f"token={MASK}\n  token={MASK}\ncaCertHash=sha256:ab\ncert={MASK}\n"
        f"saw {MASK} twice\n")
