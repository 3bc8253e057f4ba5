"""`coordinator --help` as an operator reads it: every environment variable the CLI reads is
there, each beside the option it stands for."""

from __future__ import annotations

import re

from click.testing import CliRunner

from coordinator.cli import main

READ = {  # what the commands read from the environment, and the options each stands for
    "COORDINATOR_URL": "--url", "COORDINATOR_TOKEN": "--token",
    "COORDINATOR_TOKEN_FILE": "--token-file", "COORDINATOR_CA": "--ca",
    "COORDINATOR_STORE": "init --store, restore --store, serve --store",
    "COORDINATOR_AGENT_PACKAGES": "machines add --packages",
}


def test_the_top_level_help_lists_every_environment_variable_and_its_option() -> None:
    shown = CliRunner().invoke(main, ["--help"], terminal_width=100).output
    section = shown.split("\nEnvironment:\n", 1)[1]
    listed = dict(re.findall(r"^  (COORDINATOR_\w+) +(.+)$", section, re.MULTILINE))
    assert listed == READ


def test_each_option_read_from_the_environment_says_which_variable() -> None:
    shown = " ".join(CliRunner().invoke(main, ["--help"], terminal_width=100).output.split())
    assert ("--token-file FILE File holding the admin token, e.g. DATA_DIR/admin.token. "
            "[env var: COORDINATOR_TOKEN_FILE]") in shown
    serve = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    assert "[env var: COORDINATOR_STORE]" in serve


def test_init_promises_a_join_string_only_with_a_cluster() -> None:
    """It prints one only with --cluster: the help must not promise it for every init."""
    shown = " ".join(CliRunner().invoke(main, ["init", "--help"], terminal_width=100)
                     .output.split())
    assert "a first join string." not in shown
    assert "with --cluster, also apply that first cluster and print a join string" in shown
    assert "Lifetime of that join token (with --cluster)." in shown
