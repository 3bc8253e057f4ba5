"""An item's outputs (StateItem.outputs): values it produces for later items, which its
succeeded report carries. A line output is the value of the last `NAME=value` line the item
printed, looked for in its whole output as it is read (a report keeps only the tail); a file
output is what the item left in that file. What a report shows of the item's output masks the
secret ones."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from nodeagent.items import read_left_file
from nodeagent.items.outcome import ItemFailed
from nodeagent.wire.protocol import MAX_OUTPUT_BYTES, DownloadAction, FileAction, ItemOutput, StateItem
from nodeagent.wire.redact import MASK, mask_values


class OutputLines:
    """The `NAME=value` lines of an item's line outputs in a stream fed in chunks: the last
    value of each, and every value a secret one was given (what shown output must mask). A
    line is kept up to just past the longest value a report takes, so memory stays bounded
    and a longer value is still seen to be too long."""

    def __init__(self, outputs: Iterable[ItemOutput]) -> None:
        self._wanted = {output.name: output for output in outputs if output.file is None}
        longest_name = max((len(name) for name in self._wanted), default=0)
        self._limit = longest_name + len("=") + MAX_OUTPUT_BYTES + 1
        self._line = bytearray()
        self._cut = False  # the line being read went past the limit
        self.values: dict[str, str] = {}
        self.secrets: set[str] = set()

    def feed(self, chunk: bytes) -> None:
        if not self._wanted:
            return
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            self._add(piece)
            self._end_line()
        self._add(rest)

    def finish(self) -> None:
        """The stream is over: a last line without a newline counts too. Idempotent."""
        if self._line or self._cut:
            self._end_line()

    def _add(self, piece: bytes) -> None:
        room = self._limit - len(self._line)
        self._line += piece[:room]
        self._cut = self._cut or len(piece) > room

    def _end_line(self) -> None:
        name, equals, value = self._line.decode(errors="replace").removesuffix("\r").partition("=")
        output = self._wanted.get(name) if equals else None
        if output is not None:
            self.values[name] = value
            if output.secret:
                self.secrets.add(value)
        self._line.clear()
        self._cut = False


def refuse_line_outputs(item: StateItem) -> None:
    """A file or download item prints nothing: each of its outputs must name a file."""
    if isinstance(item.action, FileAction | DownloadAction):
        for output in item.outputs:
            if output.file is None:
                raise ItemFailed(f"output {output.name}: a {item.action.type} item prints no "
                                 "lines; give the output a file: to read it from")


def collect(item: StateItem, lines: Mapping[str, str], root: Path) -> dict[str, str]:
    """Each declared output of the item, which succeeded: from lines (NAME: the value of its
    last NAME=value line) or read from its file. ItemFailed names the first one it did not
    produce and how it would have."""
    found = {}
    for output in item.outputs:
        if output.file is not None:
            value = read_left_file(root, output.file, MAX_OUTPUT_BYTES,
                                   f"output {output.name} ({output.file})").removesuffix("\n")
        elif output.name in lines:
            value = lines[output.name]
        else:
            raise ItemFailed(f'output {output.name}: the item printed no line "{output.name}=..."')
        if len(value.encode()) > MAX_OUTPUT_BYTES:
            raise ItemFailed(f"output {output.name}: more than the {MAX_OUTPUT_BYTES} bytes a "
                             "report carries")
        found[output.name] = value
    return found


def secret_values(item: StateItem, outputs: Mapping[str, str] | None) -> set[str]:
    """The values of the item's secret outputs among outputs."""
    return {outputs[o.name] for o in item.outputs if o.secret and outputs and o.name in outputs}


def shown(text: str, item: StateItem, secrets: Iterable[str]) -> str:
    """text (an item's output or error) as a report may show it: each `NAME=value` line of the
    item's secret outputs as `NAME=[REDACTED]`, whatever its value's length, and each of
    secrets (values) masked wherever it appears (see redact.mask_values)."""
    names = [re.escape(o.name) for o in item.outputs if o.secret]
    if names:
        pattern = rf"(?m)^([ \t]*(?:{'|'.join(names)}))=.*$"  # indented too: mask generously
        text = re.sub(pattern, lambda m: f"{m.group(1)}={MASK}", text)
    return mask_values(text, secrets)
