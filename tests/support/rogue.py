"""A rogue coordinator on the loopback: whoever answers at a URL that a pivot or a move target
names, instead of the coordinator meant. Over TLS it presents a certificate of a CA of its own
(made here, pinned by no one); or it speaks plain HTTP. It answers as a coordinator would (its
CA at /v1/ca.crt, the canned JSON it is given per path, 204 to a heartbeat) and records every
connection and every request with its Authorization header, so that a test can tell that it
was reached and yet never given a token or a credential."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from coordinator.server.pki import Pki, create


@dataclass
class Rogue:
    url: str
    ca_pem: str | None  # the CA its certificate chains to (None: plain HTTP)
    connections: int = 0  # TCP connections accepted (a TLS one may never send a request)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, auth

    @property
    def authorizations(self) -> list[str]:
        """The Authorization headers it was sent: a token or a credential given away."""
        return [auth for _, _, auth in self.requests if auth]


@contextlib.contextmanager
def rogue_server(pki_dir: Path | None, answers: Mapping[str, Any] | None = None,
                 port: int = 0) -> Iterator[Rogue]:
    """A rogue on 127.0.0.1:port (0: the kernel's pick), over TLS with a CA made in pki_dir
    (None: plain HTTP); answers: the JSON for a GET of each path (query ignored)."""
    context = None
    if pki_dir is not None:
        pki = Pki(pki_dir)
        create(pki, ["127.0.0.1"])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.server_cert, pki.server_key)
    canned = dict(answers or {})

    class Handler(http.server.BaseHTTPRequestHandler):
        def setup(self) -> None:
            rogue.connections += 1
            super().setup()

        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            path = urlsplit(self.path).path
            rogue.requests.append((self.command, path, self.headers.get("Authorization")))
            if path == "/v1/ca.crt" and rogue.ca_pem is not None:
                self._send(200, rogue.ca_pem.encode(), "application/x-pem-file")
            elif path.endswith("/heartbeat"):
                self._send(204, b"", "application/json")
            elif path in canned:
                self._send(200, json.dumps(canned[path]).encode(), "application/json")
            else:
                self._send(404, b'{"error": "not found"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = _answer

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> tuple[socket.socket, Any]:
            connection, address = super().get_request()
            if context is None:
                return connection, address
            # The handshake in the handler's thread, on its first read: a client that
            # refuses the certificate fails only its own connection.
            return context.wrap_socket(connection, server_side=True,
                                       do_handshake_on_connect=False), address

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a refused handshake or a dropped connection: what a rogue gets

    server = Server(("127.0.0.1", port), Handler)
    scheme = "http" if context is None else "https"
    rogue = Rogue(f"{scheme}://127.0.0.1:{server.server_address[1]}",
                  None if pki_dir is None else Pki(pki_dir).ca_cert.read_text())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield rogue
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
