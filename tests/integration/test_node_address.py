"""A real `nodeagent run` on a node with two interfaces (a network namespace): its default
route goes out of eth0, the cluster network is eth1. With `node: {interface: eth1}` in its
config the agent registers with eth1's address, which becomes the machine's ${machine.ip};
an interface the node lacks stops the agent, naming the setting and what the node has."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.wire import joinstring
from tests.support.agent import NODEAGENT
from tests.support.builders import NOOP_CLUSTER
from tests.support.harness import running_coordinator
from tests.support.netns import Namespace, namespace
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

DEFAULT_ROUTE, CLUSTER_NETWORK = "192.0.2.10", "10.10.0.5"


@pytest.fixture
def node() -> Iterator[Namespace]:
    """A namespace whose default route leaves through eth0; eth1 is the cluster network.
    Each is one end of a veth pair whose other end stays in the namespace, down (the
    kernel under test may lack the dummy driver)."""
    with namespace("two-nics") as ns:
        for name, address in (("eth0", DEFAULT_ROUTE), ("eth1", CLUSTER_NETWORK)):
            for args in (("link", "add", name, "type", "veth", "peer", "name", f"peer-{name}"),
                         ("addr", "add", f"{address}/24", "dev", name),
                         ("link", "set", name, "up")):
                subprocess.run(["ip", "-n", ns.name, *args], check=True)
        subprocess.run(["ip", "-n", ns.name, "route", "add", "default", "via", "192.0.2.1"],
                       check=True)
        yield ns


def agent_argv(tmp: Path, join: str, node: str) -> list[str]:
    root = tmp / "root"
    root.mkdir(exist_ok=True)
    config = tmp / "agent.yaml"
    config.write_text(f"join: {join}\nstateDir: {root}/var/lib/nodeagent\nheartbeatSeconds: 1\n"
                      f"ignorePrechecks: [all]\nnode: {node}\n")
    return [NODEAGENT, "run", "--config", str(config), "--root", str(root)]


def test_the_agent_registers_with_the_address_of_the_interface_its_config_names(
        node: Namespace, tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(NOOP_CLUSTER)
    with running_coordinator(tmp_path, cluster=None,
                             prefix=("ip", "netns", "exec", node.name)) as coordinator:
        coordinator.cli("cluster", "apply", "-f", str(spec))
        join = coordinator.cli("join-token", "create", "lab").stdout.strip()
        with (tmp_path / "agent.log").open("wb") as log:
            node.popen(agent_argv(tmp_path, join, "{interface: eth1}"), stdout=log,
                       stderr=subprocess.STDOUT)
        wait_until(lambda: coordinator.cli_json("machines"), 60, "the agent's registration",
                   interval=0.5)
        (machine,) = coordinator.cli_json("machines")
        assert (machine["hostname"], machine["ip"], machine["interface"]) == (
            "two-nics", CLUSTER_NETWORK, "eth1")
        facts = coordinator.cli_json("machines", "get", "two-nics")["facts"]
        assert (facts["primary_ip"], facts["default_interface"]) == (DEFAULT_ROUTE, "eth0")


def test_an_interface_the_node_lacks_stops_the_agent_naming_the_setting(
        node: Namespace, tmp_path: Path) -> None:
    join = joinstring.make("http://127.0.0.1:9", "join_x", None)  # never reached
    result = node.run(agent_argv(tmp_path, join, "{interface: eth9}"), timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.endswith(
        f"error: {tmp_path}/agent.yaml: node.interface: eth9 is not an interface of this node "
        "(its interfaces: lo, peer-eth0, eth0, peer-eth1, eth1)\n"), result.stderr
