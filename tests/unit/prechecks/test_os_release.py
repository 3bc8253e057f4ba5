from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.prechecks import os_release
from nodeagent.prechecks.os_release import parse_os_release
from nodeagent.wire.protocol import Status
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


OS_RELEASES = Path(__file__).parents[2] / "data/os-release"
# Each file as its distribution ships it, and the name the check gives it.
SHIPPED = {
    "debian-12": "Debian GNU/Linux 12 (bookworm)",
    "ubuntu-22.04": "Ubuntu 22.04.4 LTS",
    "ubuntu-24.04": "Ubuntu 24.04.1 LTS",
    "rhel-9": "Red Hat Enterprise Linux 9.4 (Plow)",
    "rocky-9": "Rocky Linux 9.4 (Blue Onyx)",
    "almalinux-9": "AlmaLinux 9.4 (Seafoam Ocelot)",
    "centos-stream-9": "CentOS Stream 9",
    "fedora-42": "Fedora Linux 42 (Server Edition)",
}


@pytest.mark.parametrize(("file", "name"), sorted(SHIPPED.items()))
async def test_each_supported_system_passes_with_its_own_os_release(
    file: str, name: str, root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/os-release", (OS_RELEASES / file).read_text())
    outcome = await os_release.run(make_ctx())
    assert (outcome.status, outcome.message) == (Status.PASS, f"{name} is supported")


async def test_the_readme_lists_the_systems_the_check_accepts() -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    table = readme.split("## Supported systems", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("| ").split(" | ") for line in table.splitlines()
            if line.startswith("| ") and not line.startswith(("| distribution", "| ---"))]
    assert {name: releases for name, releases in rows} == {
        d.name: d.releases for d in os_release.SUPPORTED}
    shipped = {parse_os_release((OS_RELEASES / f).read_text())["ID"] for f in SHIPPED}
    assert shipped == {d.id for d in os_release.SUPPORTED}  # an os-release file of each


@pytest.mark.parametrize(("file", "why"), [
    ("opensuse-leap-15.6", "openSUSE Leap 15.6 is not a supported operating system"),
    ("rhel-8", "Red Hat Enterprise Linux 8.10 (Ootpa): version 8.10 is not supported "
               "(supported: Red Hat Enterprise Linux 9)"),
])
async def test_systems_off_the_matrix_are_refused(
    file: str, why: str, root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/os-release", (OS_RELEASES / file).read_text())
    outcome = await os_release.run(make_ctx())
    assert (outcome.status, outcome.message) == (Status.FAIL, why)
    assert "Fedora 42 and later" in outcome.remedy and "CentOS Stream 9" in outcome.remedy


async def test_ubuntu_support_is_per_point_release(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/os-release", os_release_text("ubuntu", "22.10", "Ubuntu 22.10"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "Ubuntu 22.10: version 22.10 is not supported (supported: Ubuntu 22.04, 24.04)"
    )


async def test_unsupported_version_names_the_supported_ones(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/etc/os-release", os_release_text("debian", "10", "Debian GNU/Linux 10"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "Debian GNU/Linux 10: version 10 is not supported (supported: Debian 12)"
    )
    assert outcome.remedy.startswith("install a supported operating system: Debian 12; ")


async def test_unsupported_family_fails(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/etc/os-release", os_release_text("sles", "15.6", "SUSE Linux Enterprise "
                                                       "Server 15 SP6"))
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == ("SUSE Linux Enterprise Server 15 SP6 is not a supported "
                               "operating system")
    assert "Rocky Linux 9" in outcome.remedy


async def test_missing_version_and_pretty_name(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/etc/os-release", "ID=Debian\n")
    outcome = await os_release.run(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "debian: version (none) is not supported (supported: Debian 12)"


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
