"""`nodeagent check-config`: what the package's post-install script starts the service on."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeagent import joinstring
from nodeagent.cli import main

JOIN = joinstring.make("http://coordinator.test:8080", "join_x", None)


@pytest.mark.parametrize(("text", "code", "says"), [
    (f"join: {JOIN}\n", 0, "ready"),
    ("coordinator: {url: 'http://c.test:8080'}\njoinToken: join_x\n", 0, "ready"),
    ("# everything commented out, as shipped\n", 1, "missing coordinator.url (or join); "
     "joinToken (or join)"),
    ("coordinator: {url: 'http://c.test:8080'}\n", 1, "missing joinToken"),
    ("coordinator: {url: 'ftp://c.test'}\n", 2, "coordinator.url: must start with http://"),
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
