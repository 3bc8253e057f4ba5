"""`nodeagent check-config`: what the package's post-install script starts the service on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeagent.children import DaemonSettings
from nodeagent.cli import main
from nodeagent.wire import joinstring
from nodeagent.wire.endpoint import Endpoint

JOIN = joinstring.make("http://coordinator.test:8080", "join_x", None)


@pytest.mark.parametrize(("text", "code", "says"), [
    (f"join: {JOIN}\n", 0, "ready"),
    ("coordinator: {url: 'http://c.test:8080'}\njoinToken: join_x\n", 0, "ready"),
    ("# everything commented out, as shipped\n", 1, "missing coordinator.url (or join); "
     "joinToken (or join)"),
    ("coordinator: {url: 'http://c.test:8080'}\n", 1, "missing joinToken"),
    ("coordinator: {url: 'ftp://c.test'}\n", 2, "coordinator.url: must start with http://"),
    (f"join: {JOIN}\nnode: {{interface: eth1, address: 10.0.0.5}}\n", 2,
     "config.yaml:2: node: give interface or address, not both"),
    (f"join: {JOIN}\nnode: {{address: 10.0.0.500}}\n", 2,
     "config.yaml:2: node.address: '10.0.0.500' does not appear to be an IPv4 or IPv6 address"),
])
def test_check_config_says_whether_the_agent_can_start(
    tmp_path: Path, text: str, code: int, says: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text + f"stateDir: {tmp_path}/state\n")
    result = CliRunner().invoke(main, ["check-config", "--config", str(config)])
    assert result.exit_code == code, result.output
    assert says in result.output


def test_a_registered_machine_needs_no_join_token(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state/identity.json").write_text('{"machine_id": "m1", "credential": "c"}')
    config = tmp_path / "config.yaml"
    config.write_text(f"coordinator: {{url: 'http://c.test:8080'}}\nstateDir: {tmp_path}/state\n")
    result = CliRunner().invoke(main, ["check-config", "--config", str(config), "--quiet"])
    assert (result.exit_code, result.output) == (0, "")


def test_a_missing_file_is_not_configured_yet(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["check-config", "--config", str(tmp_path / "none")])
    assert result.exit_code == 1 and "missing the config file itself" in result.output


def test_json_output_is_the_config_as_the_daemon_takes_it(tmp_path: Path) -> None:
    """`nodeagent run` reads its config through `check-config --output json` (in a child, to
    stay without pydantic): every replica with its proxy, the pin, the defaults."""
    pin = "sha256:" + "ab" * 32
    pinned = joinstring.JoinString("https://c1.test:8443", "join_x", pin).encode()
    config = tmp_path / "config.yaml"
    config.write_text(f"join: {pinned}\ncoordinator: {{urls: ['https://c2.internal:8443']}}\n"
                      f"stateDir: {tmp_path}/state\nproxy: {{https: 'http://proxy.test:3128', "
                      "noProxy: [.internal]}\nntp: {servers: [ntp.test]}\nrole: manager\n"
                      "node: {interface: eth1}\n")
    result = CliRunner().invoke(main, ["check-config", "--config", str(config),
                                       "--output", "json"])
    assert result.exit_code == 0, result.output
    settings = DaemonSettings.from_document(json.loads(result.stdout))
    assert settings.endpoints == [Endpoint("https://c1.test:8443", "http://proxy.test:3128"),
                                  Endpoint("https://c2.internal:8443", None)]
    assert settings.ca_hash == pin
    assert (settings.join_token, settings.role, settings.own_ntp_servers) == \
        ("join_x", "manager", True)
    assert (settings.state_dir, settings.heartbeat_seconds, settings.timeout) == \
        (tmp_path / "state", 10.0, 2.0)
    assert (settings.node_interface, settings.node_address) == ("eth1", None)


def test_json_output_when_not_ready_says_why_on_stderr(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"coordinator: {{url: 'http://c.test:8080'}}\nstateDir: {tmp_path}/s\n")
    result = CliRunner().invoke(main, ["check-config", "--config", str(config),
                                       "--output", "json"])
    assert (result.exit_code, result.stdout) == (1, "")
    assert "not configured yet: missing joinToken" in result.stderr
