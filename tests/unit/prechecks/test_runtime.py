from __future__ import annotations

import os
import stat

from nodeagent.prechecks import runtime
from nodeagent.prechecks.runtime import RECOMMENDED_BINARIES, REQUIRED_BINARIES
from nodeagent.wire.protocol import Status
from tests.support.roots import BindSocket, MakeContext, RootTree


def install(root_tree: RootTree, names: tuple[str, ...], directory: str = "/usr/bin") -> None:
    for name in names:
        root_tree.write(f"{directory}/{name}", "#!/bin/sh\nexit 0\n", mode=0o755)


async def test_all_binaries_present(root_tree: RootTree, make_ctx: MakeContext) -> None:
    install(root_tree, REQUIRED_BINARIES, "/usr/sbin")
    install(root_tree, RECOMMENDED_BINARIES, "/usr/local/bin")
    outcome = await runtime.run_binaries(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == "all required and recommended binaries found"
    assert outcome.data == {"missing_required": [], "missing_recommended": []}


async def test_missing_required_binaries_fail(root_tree: RootTree, make_ctx: MakeContext) -> None:
    install(root_tree, ("ip", "mount", *RECOMMENDED_BINARIES))
    outcome = await runtime.run_binaries(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "required binaries not found: iptables, nsenter"
    assert outcome.remedy.startswith("install them (iproute2, iptables, mount, util-linux")


async def test_missing_recommended_binaries_only_warn(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    install(root_tree, (*REQUIRED_BINARIES, "socat", "tc", "touch", "ethtool"), "/bin")
    outcome = await runtime.run_binaries(make_ctx())
    assert outcome.status is Status.WARN
    assert outcome.message == "recommended binaries not found: conntrack, ebtables"
    assert outcome.data == {"missing_required": [], "missing_recommended": ["conntrack", "ebtables"]}


async def test_a_binary_needs_its_exec_bit_and_must_be_a_file(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    install(root_tree, ("ip", "mount", *RECOMMENDED_BINARIES))
    root_tree.write("/usr/bin/iptables", "#!/bin/sh\n", mode=0o644)
    root_tree.mkdir("/usr/sbin/nsenter")
    outcome = await runtime.run_binaries(make_ctx())
    assert outcome.data["missing_required"] == ["iptables", "nsenter"]


async def test_binaries_outside_the_search_dirs_do_not_count(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    install(root_tree, (*REQUIRED_BINARIES, *RECOMMENDED_BINARIES), "/opt/bin")
    outcome = await runtime.run_binaries(make_ctx())
    assert outcome.data["missing_required"] == list(REQUIRED_BINARIES)


async def test_runtime_socket_found(
    root_tree: RootTree, make_ctx: MakeContext, bind_socket: BindSocket
) -> None:
    bind_socket(root_tree.path / "run/containerd/containerd.sock")
    outcome = await runtime.run_runtime(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == (
        "container runtime found: containerd at /run/containerd/containerd.sock"
    )
    assert outcome.data == {"sockets": {"/run/containerd/containerd.sock": "containerd"}}


async def test_every_runtime_socket_is_reported(
    root_tree: RootTree, make_ctx: MakeContext, bind_socket: BindSocket
) -> None:
    bind_socket(root_tree.path / "run/containerd/containerd.sock")
    bind_socket(root_tree.path / "var/run/cri-dockerd.sock")
    outcome = await runtime.run_runtime(make_ctx())
    assert outcome.message == (
        "container runtime found: containerd at /run/containerd/containerd.sock, "
        "cri-dockerd at /var/run/cri-dockerd.sock"
    )


async def test_a_regular_file_is_not_a_runtime_socket(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/run/containerd/containerd.sock", "")
    outcome = await runtime.run_runtime(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "no container runtime socket found (containerd, cri-o or cri-dockerd)"
    assert outcome.remedy == (
        "the cluster's prepare items install one; if they do not, install containerd"
    )
    assert outcome.data["searched"] == sorted(runtime.RUNTIME_SOCKETS)


async def test_containerds_version_is_measured_for_the_coordinator(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    """What `containerd --version` prints, upstream's, Debian's and the Docker repository's
    containerd.io (the kubeadm profile's), reported as `containerd`."""
    assert runtime.containerd_version(
        "containerd containerd.io v2.1.5 fcd43222d6b07379a4be9786bda52438f0dd16a1") == "2.1.5"
    assert runtime.containerd_version(
        "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da") == "1.7.27"
    assert runtime.containerd_version(
        "containerd github.com/containerd/containerd/v2 v2.0.4 1a43cb6a1035441f9aca8f5666a9b3ef9e70ab20"
    ) == "2.0.4"
    assert runtime.containerd_version(
        "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1") == "1.6.20"
    root_tree.write("/usr/bin/containerd", "#!/bin/sh\necho 'containerd github.com/containerd/"
                    "containerd 1.6.20~ds1 1.6.20~ds1-1+b1'\n", mode=0o755)
    root_tree.mkdir("/run/containerd")
    os.mknod(root_tree.path / "run/containerd/containerd.sock", stat.S_IFSOCK | 0o660)
    outcome = await runtime.run_runtime(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.data["containerd"] == "1.6.20"
