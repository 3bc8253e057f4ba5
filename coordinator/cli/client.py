"""A small synchronous client of the admin API, for the CLI (stdlib only: fast start-up)."""

from __future__ import annotations

import http.client
import io
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

STREAM_TIMEOUT = 60.0
DOWNLOAD_TIMEOUT = 600.0  # a backup of a large fleet is taken whole before its first byte
_CHUNK = 1 << 20
PAGE_LIMIT = 1000  # GET /v1/machines' largest page


class ClientError(Exception):
    def __init__(self, status: int, message: str, problems: list[dict[str, Any]] | None = None):
        self.status = status
        self.problems = problems or []
        super().__init__(message)


class AdminClient:
    def __init__(self, url: str, token: str | None, timeout: float = 30.0,
                 ca_file: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        # The coordinator is addressed directly; proxies from the environment do not apply.
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file)))

    def _send(self, method: str, path: str, body: Any, text: str | bytes | None,
              content_type: str, accept: str, timeout: float) -> Any:
        """The open response; HTTP errors and unreachable coordinators become ClientError."""
        data = None
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if text is not None:
            data = text.encode() if isinstance(text, str) else text
            headers["Content-Type"] = content_type
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            return self._opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read())
            except ValueError:
                payload = {"error": exc.reason}
            raise ClientError(exc.code, payload.get("error", str(exc.reason)),
                              payload.get("problems")) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            hint = (" (pass --ca DATA_DIR/pki/ca.crt to trust the coordinator's CA)"
                    if isinstance(reason, ssl.SSLCertVerificationError) else "")
            raise ClientError(0, f"cannot reach the coordinator at {self.url}: {reason}{hint}") \
                from None

    def request(self, method: str, path: str, body: Any = None, text: str | bytes | None = None,
                content_type: str = "application/json") -> Any:
        with self._send(method, path, body, text, content_type, "application/json",
                        self.timeout) as response:
            try:
                return json.loads(response.read() or b"null")
            except OSError as exc:
                raise ClientError(0, f"the coordinator at {self.url} broke off: {exc}") from None

    def stream(self, path: str) -> Iterator[dict[str, Any]]:
        """The JSON data of each server-sent event from path, as it arrives. Ends when the
        server closes the stream; a silent connection fails after STREAM_TIMEOUT seconds
        (the server sends a keepalive comment every 15)."""
        with self._send("GET", path, None, None, "", "text/event-stream",
                        STREAM_TIMEOUT) as response:
            data: list[str] = []
            try:
                for raw in response:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if not line:
                        if data:
                            yield json.loads("\n".join(data))
                        data = []
                    elif line.startswith("data:"):
                        data.append(line[5:].removeprefix(" "))
            except OSError as exc:  # timeouts included
                raise ClientError(0, f"the stream from {self.url} broke off: {exc}") from None

    def download(self, method: str, path: str, accept: str,
                 progress: Callable[[int], None]) -> bytes:
        """The answer's body, whole (download_into)."""
        buffer = io.BytesIO()
        self.download_into(method, path, accept, progress, buffer.write)
        return buffer.getvalue()

    def download_into(self, method: str, path: str, accept: str,
                      progress: Callable[[int], None],
                      write: Callable[[bytes], object]) -> Mapping[str, str]:
        """The answer's body given to write a chunk at a time, each time telling progress the
        bytes received so far; the answer's headers."""
        with self._send(method, path, None, None, "", accept, DOWNLOAD_TIMEOUT) as response:
            received = 0
            try:
                while chunk := response.read(_CHUNK):
                    write(chunk)
                    received += len(chunk)
                    progress(received)
            except (OSError, http.client.HTTPException) as exc:
                raise ClientError(0, f"the coordinator at {self.url} broke off: {exc!r}") from None
            return response.headers

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def machine_page(self, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """One page of GET /v1/machines: {machines, total, offset, limit}."""
        return dict(self.get("/v1/machines" + (f"?{urlencode(query)}" if query else "")))

    def all_machines(self, query: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
        """Every machine the query selects, page after page of the largest size (a machine
        that moves between pages while they are read may show twice or not at all)."""
        found: list[dict[str, Any]] = []
        while True:
            page = self.machine_page([*query, ("limit", str(PAGE_LIMIT)),
                                      ("offset", str(len(found)))])
            found += page["machines"]
            if not page["machines"] or len(found) >= page["total"]:
                return found
