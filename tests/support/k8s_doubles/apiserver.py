"""The kube-apiserver static pod of the doubles' control planes, as strict as the real one about
how it is reached: TLS on its secure port with the certs phase's apiserver certificate, so a
client that names an address the certificate's SANs lack, or trusts another CA, fails as it
would against kube-apiserver. It answers /readyz, /healthz and /livez (anonymous, as the real
one does: the health check of the nodes' local proxy), kube-public/cluster-info from the
doubles' shared state (what a join's discovery reads), and forwards every other request to the
test API server ($K8S_DOUBLES_API, tests/support/kubeapi.py), which holds the cluster's objects.

`python apiserver.py --advertise-address=IP --secure-port=N --tls-cert-file=F
--tls-private-key-file=F` (paths under the node's root, as the kubelet double maps them)."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import ssl
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

if __name__ == "__main__":  # run as a file: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).parents[3]))

from tests.support.k8s_doubles.common import kubeconfig, state

HEALTH = ("/readyz", "/healthz", "/livez")
CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy


def cluster_info() -> dict[str, object] | None:
    """kube-public/cluster-info as the bootstrap-token phase made it: a kubeconfig naming the
    control plane's endpoint and its CA."""
    with state() as data:
        info = data.get("cluster_info")
    if info is None:
        return None
    return {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": kubeconfig("", f"https://{info['endpoint']}", info["ca"])}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    def answer(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_one(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in HEALTH:
            self.answer(200, b"ok", "text/plain")
            return
        if path == CLUSTER_INFO and self.command == "GET":
            found = cluster_info()
            self.answer(404 if found is None else 200, json.dumps(found or {
                "kind": "Status", "code": 404, "reason": "NotFound",
                "message": 'configmaps "cluster-info" not found'}).encode())
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        request = urllib.request.Request(
            os.environ["K8S_DOUBLES_API"] + self.path, body, method=self.command,
            headers={k: v for k, v in self.headers.items() if k.lower() == "content-type"})
        try:
            with DIRECT.open(request, timeout=10) as answer:
                self.answer(answer.status, answer.read(), answer.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as error:
            self.answer(error.code, error.read(), error.headers.get("Content-Type", ""))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_one


def serve(address: str, port: int, cert: str, key: str) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        daemon_threads = True

        def server_bind(self) -> None:  # HTTPServer's looks its name up in DNS: none here
            socketserver.TCPServer.server_bind(self)

    server = Server((address, port), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"{time.strftime('%H:%M:%S')} serving https on {address}:{port}", flush=True)
    server.serve_forever()


def main(argv: list[str]) -> None:
    flags = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    advertise = flags["--advertise-address"]
    serve("::" if ":" in advertise else "0.0.0.0", int(flags.get("--secure-port", "6443")),
          flags["--tls-cert-file"], flags["--tls-private-key-file"])


if __name__ == "__main__":
    main(sys.argv[1:])
