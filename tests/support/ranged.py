"""An HTTP server on 127.0.0.1 serving one file at /file the way a download's server may:
with or without Range support, with an ETag that If-Range is checked against (or ignored),
and cutting the connection after a number of bytes of an answer, as a network drop does. It
counts the bytes it sent and records each request's Range and If-Range, so a test can tell
what a download fetched again."""

from __future__ import annotations

import contextlib
import http.server
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.support.blob import serving_in_thread


@dataclass
class Asked:
    range: str | None
    if_range: str | None
    status: int


@dataclass
class RangedServer:
    content: bytes
    etag: str | None = '"v1"'
    ranges: bool = True  # honours Range (206), else answers 200 with the whole
    if_range: bool = True  # checks If-Range (a strong ETag) before honouring Range
    cut_after: int | None = None  # the next answer stops after this many bytes of its body
    url: str = ""
    sent: int = 0  # bytes of bodies sent, in all
    asked: list[Asked] = field(default_factory=list)

    def answer(self, range_header: str | None, if_range: str | None) -> tuple[int, int]:
        """The status and the first byte's offset of the answer to these headers."""
        if not (self.ranges and range_header and range_header.startswith("bytes=")):
            return 200, 0
        if self.if_range and if_range is not None and if_range != self.etag:
            return 200, 0  # another version than the one the client holds: the whole
        start = int(range_header[len("bytes="):].split("-")[0])
        return (416, start) if start >= len(self.content) else (206, start)


@contextlib.contextmanager
def ranged_server(content: bytes, **options: object) -> Iterator[RangedServer]:
    state = RangedServer(content, **options)  # type: ignore[arg-type]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path != "/file":
                self.send_error(404)
                return
            status, start = state.answer(self.headers.get("Range"), self.headers.get("If-Range"))
            state.asked.append(Asked(self.headers.get("Range"), self.headers.get("If-Range"),
                                     status))
            content = state.content
            if status == 416:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(content)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(status)
            if status == 206:
                self.send_header("Content-Range",
                                 f"bytes {start}-{len(content) - 1}/{len(content)}")
            if state.etag:
                self.send_header("ETag", state.etag)
            self.send_header("Content-Length", str(len(content) - start))
            self.end_headers()
            body = content[start:]
            if state.cut_after is not None:
                body, state.cut_after = body[:state.cut_after], None
                self.close_connection = True
            for offset in range(0, len(body), 65536):
                self.wfile.write(body[offset:offset + 65536])
                state.sent += len(body[offset:offset + 65536])

    with serving_in_thread(Handler) as port:
        state.url = f"http://127.0.0.1:{port}/file"
        yield state
