"""`coordinator serve` never advertises a host its server certificate does not name: on a
machine called vm, `--listen 0.0.0.0:9443` alone advertised https://vm:9443 in every join
string, and no agent could then verify the coordinator it was sent to. Now it advertises the
certificate's first name there, and refuses an --advertise-url the certificate lacks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.harness import COORDINATOR
from tests.support.netns import namespace
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def test_serve_refuses_a_host_the_certificate_lacks_and_serves_with_a_named_one(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    subprocess.run([COORDINATOR, "init", "--data-dir", str(data), "--listen", "0.0.0.0:9443",
                    "--name", "127.0.0.1", "--name", "coord.example"],
                   check=True, capture_output=True, timeout=60)
    serve = [COORDINATOR, "serve", "--data-dir", str(data), "--listen", "0.0.0.0:9443"]
    with namespace(hostname="vm") as node:
        refused = node.run([*serve, "--advertise-url", "https://VM:9443"], timeout=30)
        assert refused.returncode == 2, refused.stderr
        message = refused.stderr
        assert "https://vm:9443" in message.lower() and "127.0.0.1, coord.example" in message
        assert "--advertise-url https://NAME:9443" in message
        assert "coordinator init --name vm" in message.lower()
        assert "Traceback" not in message

        log = tmp_path / "serve.log"
        with log.open("wb") as out:  # no --advertise-url: the certificate's first name, not vm
            node.popen(serve, stdout=out, stderr=subprocess.STDOUT)
        wait_until(lambda: "agents use https://127.0.0.1:9443" in log.read_text(), 30,
                   "the coordinator serving")
        admin = node.run([COORDINATOR, "--url", "https://127.0.0.1:9443", "--ca",
                          str(data / "pki/ca.crt"), "--token-file", str(data / "admin.token"),
                          "machines"], timeout=30)
        assert admin.returncode == 0, admin.stderr  # the advertised URL verifies
