"""Which bytes of a file one GET asks for: HTTP's single byte range (`Range: bytes=A-B`, `A-`,
`-N`) under `If-Range`, answered as aiohttp's FileResponse answers it on the API's port (a
malformed or past-the-end range: 416), so that a download resumes the same way on either
port. Unlike aiohttp (which reads only dates there), an `If-Range` naming a strong ETag is
compared too: a resumed download of a file replaced meanwhile gets the new file whole."""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$", re.ASCII | re.IGNORECASE)


@dataclass(frozen=True)
class Selection:
    """The answer's status (200, 206 or 416) and its bytes [start, stop) of the file."""

    status: int
    start: int
    stop: int


def etag_of(mtime_ns: int, size: int) -> str:
    """A file version's strong ETag, as aiohttp's FileResponse makes it."""
    return f'"{mtime_ns:x}-{size:x}"'


def select(size: int, range_header: str | None, if_range: str | None, etag: str,
           last_modified: str) -> Selection:
    """What to send of a file of `size` bytes whose version is `etag` / `last_modified` (an
    HTTP date): the Range when there is one and If-Range, if any, names this version."""
    whole = Selection(200, 0, size)
    if range_header is None or (if_range is not None and if_range not in (etag, last_modified)):
        return whole
    unsatisfiable = Selection(416, 0, 0)
    match = _RANGE.match(range_header)
    if match is None or match.group(1) == match.group(2) == "":
        return unsatisfiable
    first, last = match.group(1), match.group(2)
    if not first:  # the last N bytes
        start, stop = max(0, size - int(last)), size
    else:
        start = int(first)
        stop = min(size, int(last) + 1) if last else size
        if last and int(last) < start:
            return unsatisfiable
    if start >= size:
        return unsatisfiable
    return Selection(206, start, stop)
