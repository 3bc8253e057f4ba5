"""The network plugin's part, for the doubles' cluster: a kubelet double registers its Node
NotReady (no CNI yet), and once the CNI's manifest was applied (`kubectl apply` in the doubles'
log) each Node turns Ready `delay` seconds after it registered, as a CNI DaemonSet's pod
starting on it would make it. Records when each Node turned Ready, so a test can check that
no machine was Ready before its Node."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType

from tests.support.k8s_doubles.calls import calls
from tests.support.kubeapi import KubeApiServer


class NetworkPlugin:
    def __init__(self, server: KubeApiServer, log: Path, delay: float = 1.5) -> None:
        self.server = server
        self.log = log
        self.delay = delay
        self.ready_at: dict[str, float] = {}  # node name -> when it turned Ready
        self._seen: dict[str, float] = {}  # node name -> when this plugin first saw it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="network-plugin", daemon=True)

    def __enter__(self) -> NetworkPlugin:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _applied(self) -> bool:
        try:
            return any(c.is_("kubectl", "apply") for c in calls(self.log))
        except ValueError:  # a line being written: look again at the next tick
            return False

    def _run(self) -> None:
        applied = False
        while not self._stop.wait(0.2):
            applied = applied or self._applied()
            now = time.time()
            with self.server.locked() as cluster:
                for name in list(cluster.nodes):
                    self._seen.setdefault(name, now)
                    if applied and name not in self.ready_at and now - self._seen[name] >= self.delay:
                        cluster.set_node_ready(name, True)
                        self.ready_at[name] = time.time()
