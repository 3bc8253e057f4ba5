from __future__ import annotations

import pytest

from nodeagent.prechecks import os_release
from nodeagent.prechecks.os_release import parse_os_release
from nodeagent.protocol import Status
from tests.support.roots import MakeContext, RootTree


def os_release_text(os_id: str, version: str | None, pretty: str | None = None) -> str:
    lines = [f"ID={os_id}"]
    if version is not None:
        lines.append(f'VERSION_ID="{version}"')
    if pretty is not None:
        lines.append(f'PRETTY_NAME="{pretty}"')
    return "\n".join(lines) + "\n"


def test_parse_follows_shell_quoting_and_skips_comments() -> None:
    text = (
        "# a comment\n"
        "\n"
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"\n'
        "ID=ubuntu\n"
        "VERSION_ID='22.04'\n"
        'NAME="Quoted \\"name\\""\n'
        "EMPTY=\n"
        "not a key value line\n"
    )
    assert parse_os_release(text) == {
        "PRETTY_NAME": "Ubuntu 22.04.4 LTS",
        "ID": "ubuntu",
        "VERSION_ID": "22.04",
        "NAME": 'Quoted "name"',
        "EMPTY": "",
    }


def test_parse_survives_an_unbalanced_quote() -> None:
    assert parse_os_release('PRETTY_NAME="Broken\nID=debian\n') == {
        "PRETTY_NAME": "Broken",
        "ID": "debian",
    }


@pytest.mark.parametrize(
    ("os_id", "version"),
    [("ubuntu", "20.04"), ("ubuntu", "22.04"), ("ubuntu", "24.04"), ("debian", "12"),
     ("debian", "11"), ("rhel", "9.3"), ("rocky", "8.9"), ("almalinux", "9")],
)
async def test_supported_systems_pass(
    os_id: str, version: str, root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/os-release", os_release_text(os_id, version, f"{os_id} pretty {version}"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == f"{os_id} pretty {version} is supported"
    assert outcome.data == {"id": os_id, "version_id": version,
                            "pretty_name": f"{os_id} pretty {version}"}


async def test_ubuntu_support_is_per_point_release(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/os-release", os_release_text("ubuntu", "22.10", "Ubuntu 22.10"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "Ubuntu 22.10: version 22.10 is not supported (supported: 20.04, 22.04, 24.04)"
    )


async def test_unsupported_version_names_the_supported_ones(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/os-release", os_release_text("debian", "10", "Debian GNU/Linux 10"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "Debian GNU/Linux 10: version 10 is not supported (supported: 11, 12)"
    )
    assert outcome.remedy.startswith("install a supported operating system: ubuntu 20.04")
    assert "debian 11, 12" in outcome.remedy


async def test_unsupported_family_fails(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/etc/os-release", os_release_text("centos", "7", "CentOS Linux 7 (Core)"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "CentOS Linux 7 (Core) is not a supported operating system"
    assert "rocky 8, 9" in outcome.remedy


async def test_missing_version_and_pretty_name(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/etc/os-release", "ID=Debian\n")
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "debian: version (none) is not supported (supported: 11, 12)"


async def test_falls_back_to_usr_lib_os_release(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/usr/lib/os-release", os_release_text("rocky", "9.4", "Rocky Linux 9.4"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == "Rocky Linux 9.4 is supported"


async def test_etc_os_release_wins_over_usr_lib(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/etc/os-release", os_release_text("centos", "7", "CentOS 7"))
    root_tree.write("/usr/lib/os-release", os_release_text("rocky", "9", "Rocky 9"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.data["id"] == "centos"


async def test_no_os_release_at_all_fails(make_ctx: MakeContext) -> None:
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "no /etc/os-release or /usr/lib/os-release"
    assert outcome.remedy.startswith("install a supported operating system")
