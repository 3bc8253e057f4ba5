"""Doubles of the commands that change kernel settings, as the kubeadm profile's `kernel` item
calls them (`modprobe -a overlay br_netfilter && sysctl --system`), acting on the /proc/sys of
the agent's root (its working directory), where the prechecks read them:

- `modprobe br_netfilter` creates net/bridge/bridge-nf-call-ip{,6}tables (1, the module's
  default); before it, those keys do not exist, as on a stock host.
- `sysctl --system` applies the `key = value` lines of /etc/sysctl.d/*.conf, /run/sysctl.d,
  /usr/lib/sysctl.d and /etc/sysctl.conf; a key with no /proc/sys file fails as procps's
  "cannot stat" does, so a profile that sets bridge keys before loading br_netfilter fails."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.support.k8s_doubles.common import Failure

PROC_SYS = Path("proc/sys")
BRIDGE_KEYS = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables")
SYSCTL_DIRS = ("etc/sysctl.d", "run/sysctl.d", "usr/lib/sysctl.d")


def modprobe(args: list[str]) -> dict[str, Any]:
    modules = [a for a in args if not a.startswith("-")]
    if "br_netfilter" in modules:
        bridge = PROC_SYS / "net/bridge"
        bridge.mkdir(parents=True, exist_ok=True)
        for key in BRIDGE_KEYS:
            if not (bridge / key).exists():
                (bridge / key).write_text("1\n")
    return {"modules": modules}


def sysctl(args: list[str]) -> dict[str, Any]:
    if "--system" not in args:
        return {}
    files = sorted(f for d in SYSCTL_DIRS if Path(d).is_dir() for f in Path(d).glob("*.conf"))
    files += [Path("etc/sysctl.conf")] if Path("etc/sysctl.conf").is_file() else []
    applied, missing = {}, []
    for file in files:
        for line in file.read_text().splitlines():
            key, eq, value = line.partition("=")
            if not eq or line.lstrip().startswith(("#", ";")):
                continue
            target = PROC_SYS / key.strip().replace(".", "/")
            if not target.exists():
                missing.append(key.strip())
                print(f"sysctl: cannot stat /{target}: No such file or directory",
                      file=sys.stderr)
                continue
            target.write_text(value.strip() + "\n")
            applied[key.strip()] = value.strip()
    if missing:
        raise Failure(f"{len(missing)} key(s) could not be set: {', '.join(missing)}")
    return {"applied": applied}
