from __future__ import annotations

import socket

import pytest

from nodeagent.prechecks import hostname
from nodeagent.prechecks.hostname import evaluate, problems
from nodeagent.wire.protocol import Status
from tests.support.roots import MakeContext, RootTree


@pytest.mark.parametrize(
    "name", ["node-1", "n", "node-1.example.com", "10-0-0-1", "a" * 63, ".".join(["a" * 63] * 3)]
)
def test_valid_names_have_no_problems(name: str) -> None:
    assert problems(name) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("", ["it is empty"]),
        ("Node-1", ["it has uppercase letters"]),
        ("localhost", ["it is localhost"]),
        ("localhost.localdomain", ["it is localhost"]),
        ("node_1", ["label 'node_1' must be letters, digits and '-', "
                    "starting and ending with a letter or digit"]),
        ("-node", ["label '-node' must be letters, digits and '-', "
                   "starting and ending with a letter or digit"]),
        ("node-", ["label 'node-' must be letters, digits and '-', "
                   "starting and ending with a letter or digit"]),
        ("a..b", ["label '' must be letters, digits and '-', "
                  "starting and ending with a letter or digit"]),
        ("a" * 64, [f"label {'a' * 20}... is 64 characters long (at most 63)"]),
    ],
)
def test_invalid_names_say_why(name: str, expected: list[str]) -> None:
    assert problems(name) == expected


def test_too_long_name_reports_its_length() -> None:
    name = ".".join(["a" * 63] * 4)  # 255 characters
    assert problems(name) == ["it is 255 characters long (at most 253)"]


def test_several_problems_are_all_reported() -> None:
    outcome = evaluate("My_Host", "My_Host")
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "hostname 'My_Host' is not a valid node name: it has uppercase letters; "
        "label 'my_host' must be letters, digits and '-', starting and ending with a letter or digit"
    )
    assert "hostnamectl set-hostname" in outcome.remedy


def test_valid_name_matching_etc_hostname_passes() -> None:
    outcome = evaluate("node-1", "node-1")
    assert outcome.status is Status.PASS
    assert outcome.message == "hostname 'node-1' is a valid node name"


def test_without_etc_hostname_the_kernel_name_decides() -> None:
    assert evaluate("node-1", None).status is Status.PASS


def test_etc_hostname_mismatch_fails_with_the_command_that_fixes_it() -> None:
    outcome = evaluate("node-1", "old-name")
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "hostname 'node-1' differs from /etc/hostname ('old-name'); "
        "the node would be renamed on reboot"
    )
    assert outcome.remedy == "make them agree: `hostnamectl set-hostname node-1`"


async def test_run_reads_etc_hostname_stripped(root_tree: RootTree, make_ctx: MakeContext) -> None:
    live = socket.gethostname()
    root_tree.write("/etc/hostname", f"  {live}\n\n")
    outcome = await hostname.run(make_ctx())
    assert outcome.data == {"hostname": live, "etc_hostname": live}
    assert "differs from /etc/hostname" not in outcome.message


async def test_run_treats_a_blank_etc_hostname_as_absent(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/hostname", "\n")
    outcome = await hostname.run(make_ctx())
    assert outcome.data == {"hostname": socket.gethostname(), "etc_hostname": None}


async def test_run_fails_when_etc_hostname_names_another_machine(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/hostname", "surely-not-this-machine-7f3a\n")
    outcome = await hostname.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.data["etc_hostname"] == "surely-not-this-machine-7f3a"
