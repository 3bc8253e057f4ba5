"""An HTTP server on 127.0.0.1 serving one ~3 MB blob at /blob, in a thread of its own so
that blocking tests and the agent's own event loop alike can use it. It also answers
absolute-form requests (GET http://any.name/blob), as a forward proxy would, and records the
host each request asked for: a test can tell whether a download went through a proxy."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

BLOB = bytes(range(256)) * 12_000  # ~3 MB: many chunks
BLOB_SHA = hashlib.sha256(BLOB).hexdigest()


@dataclass
class BlobServer:
    url: str
    requests: list[str] = field(default_factory=list)  # the paths asked for
    targets: list[str] = field(default_factory=list)  # the host each request asked for


@contextlib.contextmanager
def blob_server() -> Iterator[BlobServer]:
    state = BlobServer("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            target = urlsplit(self.path)
            host = target.hostname or self.headers.get("Host", "").rsplit(":", 1)[0]
            if target.path != "/blob":
                self.send_error(404)
                return
            state.requests.append(target.path)
            state.targets.append(host)
            self.send_response(200)
            self.send_header("Content-Length", str(len(BLOB)))
            self.end_headers()
            for start in range(0, len(BLOB), 100_000):
                self.wfile.write(BLOB[start:start + 100_000])

    with serving_in_thread(Handler) as port:
        state.url = f"http://127.0.0.1:{port}"
        yield state


@contextlib.contextmanager
def serving_in_thread(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """handler served on a free 127.0.0.1 port (yielded) by a thread of its own."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
