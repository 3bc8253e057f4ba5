"""How tests drive and inspect the doubles' cluster (the doubles themselves: doubles.py).

Phase boundaries. After each phase of `kubeadm init` or `kubeadm join` (and after a phase run
alone, `kubeadm init phase NAME`) the kubeadm double looks for a hook named
`<host>:<init|join>:<phase>` (host: the node's UTS hostname; phase: kubeadm's name, e.g.
`m1:init:kubeconfig`, `w1:join:kubelet-start`):
- pause: it writes a marker (its pid) under $K8S_DOUBLES_STATE/paused/ and waits until the
  test removes it: `pid = wait_paused(state, spec)`, then kill the agent or `os.kill(pid, 9)`
  (the kubeadm process) right there, or `resume(state, spec)`;
- kill: it SIGKILLs itself, as a crash would.
Arm hooks with `arm(state, pause=[...], kill=[...])` (read at every boundary, so while agents
run) or with the environment variables K8S_DOUBLES_PAUSE / K8S_DOUBLES_KILL (comma-separated
specs, fixed when the agent starts). Each hook fires once: the retry it provokes runs through.

The clock. Bootstrap tokens, the uploaded certificates and kubeadm's certificates expire
against the shared state's clock: `advance(state, seconds)` moves it on.

Packages. `installed(state, root)`: the kubeadm, kubelet and kubectl versions apt-get or dnf
installed on the node whose root is root (what an upgrade left each kubelet at).

etcd. `etcd_members(root, prefix)`: the member list as the node whose root is root sees it
(prefix: `ip netns exec NS` of its network namespace). `pods(state, root)`: the node's running
static pods and their pids. `power_off(state, root)`: the node's
kubelet and static pods (its etcd) stopped, as a machine that went down.

Teardown. The kubelet doubles, static pods and etcd processes are detached (they outlive the
command that started them, as systemd services and containers do): `stop_all(state)` stops
every one a test's doubles started; the fixtures call it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support.k8s_doubles import etcd
from tests.support.k8s_doubles.calls import agent_env
from tests.support.k8s_doubles.common import marker, procs_dir, running, state, stop
from tests.support.kubeapi import KubeApiServer, kube_api_server
from tests.support.lan import HUB_IP, Lan, lan
from tests.support.requirements import require_binary


def arm(directory: Path, pause: Iterable[str] = (), kill: Iterable[str] = ()) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hooks.json").write_text(json.dumps({"pause": list(pause), "kill": list(kill)}))


def wait_paused(directory: Path, spec: str, timeout: float = 60) -> int:
    """Once the double stopped at spec: its pid (the kubeadm process)."""
    mark = marker(directory, spec)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if mark.exists() and mark.read_text():
            return int(mark.read_text())
        time.sleep(0.05)
    raise AssertionError(f"kubeadm did not stop at {spec} within {timeout} s")


def resume(directory: Path, spec: str, again: bool = False) -> None:
    """kubeadm goes on from spec (or it was killed there); again: the hook fires once more, at
    the next run that reaches spec."""
    if again:
        with state(directory) as data:
            data["fired"] = [s for s in data.get("fired", []) if s != spec]
    marker(directory, spec).unlink(missing_ok=True)


def advance(directory: Path, seconds: float) -> None:
    """The cluster's clock moved on by seconds (tokens, uploaded certificates and kubeadm's
    certificates expire)."""
    with state(directory) as data:
        data["clock"] = float(data.get("clock", 0.0)) + seconds


def installed(directory: Path, root: Path) -> dict[str, str]:
    """The versions of kubeadm, kubelet and kubectl apt-get or dnf installed in the node whose
    root is root, by package ({} before any)."""
    with state(directory) as data:
        return dict(data.get("installed", {}).get(str(root), {}))


def etcd_members(root: Path, prefix: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The etcd members as this node's etcd (https://127.0.0.1:2379) sees them."""
    return etcd.members(root, [etcd.client_url("127.0.0.1")], prefix=prefix)


def _stop(directory: Path, root: Path | None) -> None:
    """The kubelets first (else one starts again the pods stopped), then the pods."""
    started = sorted(procs_dir(directory).glob("*.json"), key=lambda p: "-pod-" in p.stem)
    for path in started:
        with contextlib.suppress(FileNotFoundError):
            if root is None or json.loads(path.read_text()).get("root") == str(root):
                stop(path.stem, directory)


def pods(directory: Path, root: Path) -> dict[str, int]:
    """The static pods running on the node whose root is root, by name: their pids (a pod
    started again has another)."""
    found = {}
    for path in procs_dir(directory).glob("*-pod-*.json"):
        with contextlib.suppress(FileNotFoundError):
            started = json.loads(path.read_text())
            if started.get("root") == str(root) and running(path.stem, directory) is not None:
                found[path.stem.split("-pod-", 1)[1]] = int(started["pid"])
    return found


def power_off(directory: Path, root: Path) -> None:
    """The node whose root is root down: its kubelet and static pods (etcd) stopped."""
    _stop(directory, root)


def stop_all(directory: Path) -> None:
    """Every kubelet double, static pod and etcd the test's doubles started, stopped."""
    _stop(directory, None)


@contextlib.contextmanager
def doubled_lan(hostnames: list[str],
                tmp: Path) -> Iterator[tuple[Lan, dict[str, str], KubeApiServer]]:
    """Nodes on a LAN (network namespaces) with the doubles' environment: the test API server
    on the hub, the doubles' log and state under tmp; every process they start stopped after."""
    require_binary("etcd")
    require_binary("etcdctl")
    require_binary("haproxy")  # the profile's local API proxy (units.py)
    with lan(hostnames) as network, contextlib.ExitStack() as stack:
        api = stack.enter_context(kube_api_server(netns=network.hub.name, host=HUB_IP))
        stack.callback(stop_all, tmp / "state")
        yield network, agent_env(tmp / "log", tmp / "state", api.url), api
