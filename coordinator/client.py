"""A small synchronous client of the admin API, for the CLI (stdlib only: fast start-up)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any


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

    def request(self, method: str, path: str, body: Any = None, text: str | None = None,
                content_type: str = "application/json") -> Any:
        data = None
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if text is not None:
            data = text.encode()
            headers["Content-Type"] = content_type
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
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

    def get(self, path: str) -> Any:
        return self.request("GET", path)
