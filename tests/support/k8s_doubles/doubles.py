"""Test doubles of the host-changing commands the kubeadm profile calls (`doubles.py NAME ARG...`,
run through the `double` links of this directory): they simulate what a test needs of the real
tools, as strictly as the real ones refuse, record every call, and change nothing outside the
caller's working directory (the node's root) and network namespace.

- Every call is appended to $K8S_DOUBLES_LOG as a JSON line: host (the UTS hostname, i.e. the
  machine), command, argv, start, end, exit, what it did (`details`: the token a join used...)
  and the proxy variables it was given.
- Exec items run with the agent's root as working directory, so an absolute path
  (/etc/kubernetes/admin.conf) means that path under the working directory.
- What the cluster keeps (CAs, bootstrap tokens with their expiry, the uploaded certificate
  key, cluster-info, the control plane's version, the etcd members' endpoints, the clock
  offset) lives in $K8S_DOUBLES_STATE/state.json, shared by every node of a test, under a lock.
- kubeadm: kubeadm.py (phases, preflight, expiry, upgrade policy, reset); the kubelet, its
  static pods and crictl: kubelet.py; the real etcd: etcd.py.
- Nodes register in the test Kubernetes API server ($K8S_DOUBLES_API, tests/support/kubeapi.py)
  as a kubelet does.
- kubectl remembers the images set on Deployments (`set image`) to answer `get deployment`,
  and finds kube-public/cluster-info only once init's bootstrap-token phase made it (printed
  as `-o name` or its kubeconfig, `-o jsonpath={.data.kubeconfig}`: the endpoint and the CA); `get secret -l
  owner=helm,name=NAME` lists the Helm release's Secret, as Helm labels it.
- cilium install refuses a release that is there and cilium upgrade one that is not, as Helm
  under the cilium CLI does; both remember the release's version and revision.
- apt-get and dnf remember which version of each package they installed in a root (kubeadm's
  is what `kubeadm upgrade apply` checks its target against; tests read them with
  calls.installed); apt-get refuses a downgrade without --allow-downgrades, dnf makes it, and
  `rpm -q` answers from them.
- `systemctl start|restart|stop kubelet` starts or stops the kubelet double; the services the
  profile writes units for (kube-apiserver-proxy: the real haproxy) run as their units say
  (units.py).
- modprobe and sysctl change the root's /proc/sys as the kernel does (sysfs.py).
- Every other command (apt-mark, swapoff, ...) is recorded and succeeds.

Tests drive and inspect all this through control.py: the phase-boundary hooks (pause, kill),
the clock, etcd's members, and stop_all at teardown.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[3]))  # run as a file: the repository's root

from tests.support.k8s_doubles import units
from tests.support.k8s_doubles.common import Failure, parse, state
from tests.support.k8s_doubles.sysfs import modprobe, sysctl

# kubeadm.py and kubelet.py (cryptography, yaml, urllib) are imported by the calls that need
# them, not by every call: four calls in five (systemctl, apt-get, curl...) need neither, and
# each call is a new Python, whose imports were most of its time (2 s of 2.4 on a loaded
# machine), on the managers' one-at-a-time path of the kubeadm e2e.

Details = dict[str, Any]
PROXY = {"http_proxy", "https_proxy", "no_proxy"}  # recorded as the command got them


def kubectl(args: list[str]) -> Details:
    words, flags = parse(args)
    config = flags.get("--kubeconfig") or os.environ.get("KUBECONFIG")
    from tests.support.k8s_doubles.kubeadm import expired_credentials

    if config and expired_credentials(config):  # the API server refuses the certificate
        raise Failure("error: You must be logged in to the server (Unauthorized)")
    if words[:2] == ["set", "image"]:
        name = words[2].removeprefix("deployment/")
        image = words[3].split("=", 1)[1]
        with state() as data:
            data.setdefault("deployments", {})[name] = image
        return {"deployment": name, "image": image}
    if words[:3] == ["get", "configmap", "cluster-info"]:  # made by init's bootstrap-token phase
        with state() as data:
            info = data.get("cluster_info")
        if info is None or flags.get("-n", flags.get("--namespace")) != "kube-public":
            raise Failure('Error from server (NotFound): configmaps "cluster-info" not found')
        print(cluster_info(info, flags.get("-o", flags.get("--output", ""))))
        return {"configmap": "cluster-info"}
    if words[:2] == ["get", "secret"] and "-l" in flags:  # Helm's release records, by label
        print("\n".join(helm_release_secrets(flags["-l"])))
        return {"selector": flags["-l"]}
    if words[:2] == ["get", "deployment"]:
        with state() as data:
            image = data.get("deployments", {}).get(words[2])
        if image is None:
            raise Failure(f"Error from server (NotFound): deployments.apps \"{words[2]}\" not found")
        print(image)
        return {"deployment": words[2]}
    return {"files": flags.get("-f")} if words[:1] == ["apply"] else {}


def helm_release_secrets(selector: str) -> list[str]:
    """The Secrets Helm keeps a release's revisions in (sh.helm.release.v1.NAME.vN, labelled
    owner=helm, name=NAME, status=deployed for the current one) that selector matches."""
    wanted = dict(term.partition("=")[::2] for term in selector.split(","))
    if wanted.pop("owner", "helm") != "helm":
        return []
    with state() as data:
        releases = data.get("helm_releases", {})
    return [f"secret/sh.helm.release.v1.{name}.v{release['revision']}"
            for name, release in releases.items()
            if wanted.get("name", name) == name and wanted.get("status", "deployed") == "deployed"]


def cilium(args: list[str]) -> Details:
    """The cilium CLI in Helm mode (cilium-cli's install/ and cmd/): `install` is a Helm install
    of the release `cilium`, which Helm refuses while a release of that name exists; `upgrade`
    is a Helm upgrade of it (UpgradeWithHelm), which needs a deployed release."""
    words, flags = parse(args)
    if words[:1] not in (["install"], ["upgrade"]):
        return {}
    with state() as data:
        releases = data.setdefault("helm_releases", {})
        release = releases.get("cilium")
        if words[0] == "install":
            if release is not None:
                raise Failure("Error: Unable to install Cilium: cannot re-use a name that is "
                              "still in use")
            release = releases["cilium"] = {"revision": 1, "version": flags.get("--version", "")}
        else:
            if release is None:
                raise Failure('Error: Unable to upgrade Cilium: "cilium" has no deployed releases')
            release.update(revision=release["revision"] + 1,
                           version=flags.get("--version", release["version"]))
        return {"release": dict(release)}


def cluster_info(info: dict[str, str], output: str) -> str:
    """kube-public/cluster-info as `-o name` or `-o jsonpath={.data.kubeconfig}` print it: its
    kubeconfig names the endpoint init wrote (controlPlaneEndpoint, or the first manager's
    address) and the cluster's CA. Any other output is refused, as kubectl refuses an unknown
    printer, so a profile can only rely on what this double models."""
    if output == "name":
        return "configmap/cluster-info"
    if output in ("jsonpath={.data.kubeconfig}", "jsonpath='{.data.kubeconfig}'"):
        ca = base64.b64encode(info["ca"].encode()).decode()
        return ("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: "
                f"{ca}\n    server: https://{info['endpoint']}\n  name: \"\"\n"
                "contexts: null\ncurrent-context: \"\"\nkind: Config\nusers: null")
    raise Failure(f"error: unable to match a printer suitable for the output format "
                  f"\"{output}\" (this double prints name and jsonpath={{.data.kubeconfig}})")


def kubelet(args: list[str]) -> Details:
    """`kubelet --version`: the version the package manager installed in this root, else the
    cluster's."""
    if "--version" in args:
        with state() as data:
            cluster = data.get("cluster", {}).get("version", "0.0.0")
            print(f"Kubernetes v{data.get('installed', {}).get(str(Path.cwd()), {}).get('kubelet', cluster)}")
    return {}


def systemctl(args: list[str]) -> Details:
    words, flags = parse(args)
    if "kubelet" in words[1:]:
        from tests.support.k8s_doubles import kubelet as kubelet_double

        if words[:1] in (["start"], ["restart"]):
            return {"kubelet": kubelet_double.start_kubelet()}
        if words[:1] == ["stop"]:
            kubelet_double.stop_kubelet()
    return {name: units.act(words[0], name, "--now" in flags)
            for name in words[1:] if units.known(name)}


def installer(command: str) -> Callable[[list[str]], Details]:
    """apt-get/dnf install of packages at a version (kubelet=1.33.4-*, kubelet-1.33.4): the
    version of each now installed in this root. apt-get refuses to put in an older version
    than the one installed unless given --allow-downgrades, as apt does; dnf installs the
    exact version asked for, older or not, as dnf does."""
    def install(args: list[str]) -> Details:
        wanted = {found[1]: found[2] for arg in args if (found := re.fullmatch(
            r"([a-z][a-z0-9-]*?)[=-](\d+\.\d+\.\d+)(?:-.*)?", arg))}
        with state() as data:
            installed = data.setdefault("installed", {}).setdefault(str(Path.cwd()), {})
            older = [f"{name} ({installed[name]} to {version})" for name, version in wanted.items()
                     if name in installed and _newer(installed[name], version)]
            if command == "apt-get" and older and "--allow-downgrades" not in args:
                print("The following packages will be DOWNGRADED:\n  " + " ".join(older))
                raise Failure("E: Packages were downgraded and -y was used without "
                              "--allow-downgrades.")
            installed.update(wanted)
        return {"installed": wanted, "downgraded": older} if wanted else {}

    return install


def _newer(installed: str, version: str) -> bool:
    def numbers(text: str) -> tuple[int, ...]:
        return tuple(int(n) for n in text.split("."))
    return numbers(installed) > numbers(version)


def rpm(args: list[str]) -> Details:
    """`rpm -q --qf %{VERSION} NAME`: the version dnf installed in this root, or rpm's "not
    installed" (exit 1)."""
    name = args[-1]
    with state() as data:
        version = data.get("installed", {}).get(str(Path.cwd()), {}).get(name)
    if version is None:
        raise Failure(f"package {name} is not installed")
    print(version, end="")
    return {name: version}


def kubeadm(args: list[str]) -> Details:
    from tests.support.k8s_doubles.kubeadm import kubeadm as run

    return run(args)


def crictl(args: list[str]) -> Details:
    from tests.support.k8s_doubles.kubelet import crictl as run

    return run(args)


HANDLERS: dict[str, Callable[[list[str]], Details]] = {
    "kubeadm": kubeadm, "kubectl": kubectl, "kubelet": kubelet, "systemctl": systemctl,
    "crictl": crictl, "apt-get": installer("apt-get"), "dnf": installer("dnf"),
    "rpm": rpm, "cilium": cilium,
    "modprobe": modprobe, "sysctl": sysctl}


def record(entry: dict[str, Any]) -> None:
    with Path(os.environ["K8S_DOUBLES_LOG"]).open("a") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        log.write(json.dumps(entry) + "\n")


def main(argv: list[str]) -> int:
    command, args = argv[1], argv[2:]
    start, code, details = time.time(), 0, {}
    try:
        details = HANDLERS.get(command, lambda a: {})(args)
    except Failure as failure:
        sys.stdout.flush()
        print(failure, file=sys.stderr)
        code = 1
    record({"host": socket.gethostname(), "command": command, "argv": args,
            "cwd": str(Path.cwd()), "start": start, "end": time.time(), "exit": code,
            "details": details, "proxy": {k: v for k, v in os.environ.items() if k in PROXY}})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
