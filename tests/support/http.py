"""Small HTTP servers run as their own processes inside a network namespace: a coordinator
stand-in whose /healthz answers a chosen status, and a forwarding HTTP proxy. Both record
the request line of every request they get, so a test can tell which way a request went."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.netns import Namespace

# argv: serve STATUS BIND LOG | proxy UPSTREAM_ADDRESS BIND LOG. Binds the address BIND on a
# port of the kernel's choice and prints "ready PORT". The proxy takes absolute-form requests
# (GET http://name:port/path) and forwards them to UPSTREAM_ADDRESS at that port, so it
# needs no name resolution of its own; 502 when the upstream does not answer.
SERVER = r"""
import http.client, http.server, sys, urllib.parse

mode, arg, bind, log = sys.argv[1:5]


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        with open(log, "a") as out:
            out.write(self.requestline + "\n")
        if mode == "serve":
            status = int(arg) if self.path == "/healthz" else 404
            body = b"ok\n" if status == 200 else b"not ok\n"
        else:
            url = urllib.parse.urlsplit(self.path)
            if not url.scheme:
                status, body = 400, b"not a proxy request\n"
            else:
                try:
                    upstream = http.client.HTTPConnection(arg, url.port or 80, timeout=2)
                    upstream.request("GET", url.path or "/", headers={"Host": url.netloc})
                    answer = upstream.getresponse()
                    status, body = answer.status, answer.read()
                    upstream.close()
                except OSError:
                    status, body = 502, b"upstream unreachable\n"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


server = http.server.ThreadingHTTPServer((bind, 0), Handler)
print("ready", server.server_address[1], flush=True)
server.serve_forever()
"""


@dataclass
class HttpServer:
    address: str
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def requests(self) -> list[str]:
        """Request lines received since the last clear(), e.g. 'GET /healthz HTTP/1.1'."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def clear(self) -> None:
        self.log.write_text("")


def _start(ns: Namespace, log: Path, bind: str, *args: str) -> HttpServer:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    proc = ns.popen([sys.executable, "-c", SERVER, *args, bind, str(log)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()  # EOF, so "", if it dies before binding
    assert line.startswith("ready "), f"HTTP server {args} did not start: {line!r}"
    return HttpServer(bind, int(line.split()[1]), log)


def start_health_server(ns: Namespace, log: Path, status: int = 200,
                        bind: str = "127.0.0.1") -> HttpServer:
    """A coordinator stand-in on bind in ns: GET /healthz answers status."""
    return _start(ns, log, bind, "serve", str(status))


def start_proxy(ns: Namespace, log: Path, upstream: str = "127.0.0.1",
                bind: str = "127.0.0.1") -> HttpServer:
    """A forwarding HTTP proxy on bind in ns that sends every request to upstream."""
    return _start(ns, log, bind, "proxy", upstream)
