"""A test Kubernetes API server: nodes, pods, ReplicaSets, DaemonSets, PodDisruptionBudgets and
Deployments (listed with a status tests set) held in memory, served over HTTP the way
kube-apiserver serves them, so that both our drain (kubernetes_asyncio) and the real
`kubectl cordon`/`kubectl drain` can run against it.

What it implements is what a drain touches: discovery, node get/list/patch (with the Ready
condition a test sets, as a kubelet posts it), pod list (by the spec.nodeName field
selector), pod get/delete, the policy/v1 eviction subresource with the
disruption controller's arithmetic (minAvailable and maxUnavailable, integers and percentages,
429 with a DisruptionBudget cause), DaemonSet and ReplicaSet get; and what the coordinator
reads of kube-system (Deployments and DaemonSets listed with their status). Two controllers run: a
ReplicaSet controller that replaces removed pods on schedulable nodes (they turn Ready after
`ready_delay`), and the kubelet's part of deletion (a deleted pod goes after
min(grace period, `termination_delay`)). It records, for every budget, the least number of
healthy pods it ever had, the most nodes ever cordoned at once and every uncordon, so tests
can assert that no budget was violated, and no node uncordoned early, at any moment.

Run it in a thread of the test process (`KubeApiServer.start()`), on loopback or on a socket
bound inside a network namespace (`socket_in_netns`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ctypes
import json
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from coordinator.cli.client import ClientError
from tests.support.driver import Call, SyncDriver
from tests.support.waiting import wait_until

CLONE_NEWNET = 0x40000000
Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for nodes


def _meta(name: str, namespace: str | None, labels: dict[str, str] | None = None,
          owner: Obj | None = None, **extra: Any) -> Obj:
    meta: Obj = {"name": name, "uid": str(uuid.uuid4()), "labels": dict(labels or {}),
                 "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
    if namespace is not None:
        meta["namespace"] = namespace
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": "apps/v1", "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return meta


def _selected(selector: Obj, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _merge(target: Obj, patch: Obj) -> Obj:
    """JSON merge patch (RFC 7386), which is what a strategic merge patch of scalars is."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _json_patch(target: Obj, ops: list[Obj]) -> Obj:
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = target
        for part in parents:
            node = node.setdefault(part, {})
        if op["op"] in ("add", "replace"):
            node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            node.pop(last, None)
        else:
            raise ValueError(f"unsupported json-patch op {op['op']}")
    return target


def _status(code: int, reason: str, message: str, causes: list[Obj] | None = None,
            details: Obj | None = None) -> web.Response:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                 "status": "Failure" if code >= 400 else "Success",
                 "message": message, "reason": reason, "code": code}
    if causes or details:
        body["details"] = {**(details or {}), **({"causes": causes} if causes else {})}
    return web.json_response(body, status=code)


def _resource(name: str, kind: str, namespaced: bool, verbs: list[str],
              group: str | None = None, version: str | None = None) -> Obj:
    res: Obj = {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
                "verbs": verbs}
    if group is not None:
        res["group"], res["version"] = group, version
    return res


DISCOVERY: dict[str, Obj] = {
    "v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
        _resource("nodes", "Node", False, ["create", "delete", "get", "list", "patch", "update"]),
        _resource("pods", "Pod", True, ["delete", "get", "list"]),
        _resource("pods/eviction", "Eviction", True, ["create"], "policy", "v1"),
        _resource("namespaces", "Namespace", False, ["get", "list"]),
    ]},
    "apps/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                "resources": [_resource("daemonsets", "DaemonSet", True, ["get", "list"]),
                              _resource("replicasets", "ReplicaSet", True, ["get", "list"]),
                              _resource("deployments", "Deployment", True, ["list"])]},
    "policy/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "policy/v1",
                  "resources": [_resource("poddisruptionbudgets", "PodDisruptionBudget", True,
                                          ["get", "list"])]},
}


@dataclass
class Cluster:
    """The objects, and the records tests assert on. Every access holds `lock`."""

    termination_delay: float = 0.0
    ready_delay: float = 0.0
    nodes: dict[str, Obj] = field(default_factory=dict)
    pods: dict[Key, Obj] = field(default_factory=dict)
    replicasets: dict[Key, Obj] = field(default_factory=dict)
    daemonsets: dict[Key, Obj] = field(default_factory=dict)
    pdbs: dict[Key, Obj] = field(default_factory=dict)
    deployments: dict[Key, Obj] = field(default_factory=dict)  # listed with the status tests set
    min_healthy: dict[str, int] = field(default_factory=dict)  # budget name -> least healthy seen
    max_cordoned: int = 0
    evictions: list[str] = field(default_factory=list)  # namespace/name, in order granted
    refusals: int = 0  # evictions answered 429
    uncordons: list[str] = field(default_factory=list)  # nodes made schedulable again, in order
    deleted_nodes: list[str] = field(default_factory=list)  # in order deleted
    requests: int = 0
    calls: list[str] = field(default_factory=list)  # "GET /api/v1/nodes?...", in order
    lock: threading.RLock = field(default_factory=threading.RLock)
    later: Callable[[float, Callable[[], None]], None] = lambda delay, fn: None
    _rv: int = 1
    _pod_count: int = 0

    def rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # -- building the workload ---------------------------------------------------------------
    def add_node(self, name: str, labels: dict[str, str] | None = None,
                 provider_id: str | None = None) -> None:
        """A node as a kubelet registers it: its hostname label, the labels and providerID
        of its flags, Ready."""
        self.nodes[name] = {
            "kind": "Node", "apiVersion": "v1",
            "metadata": _meta(name, None, {"kubernetes.io/hostname": name, **(labels or {})},
                              resourceVersion=self.rv()),
            "spec": {"providerID": provider_id} if provider_id else {},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
        }
        for ds in self.daemonsets.values():
            self._daemon_pod(ds, name)
        self._reconcile()

    def add_replicaset(self, namespace: str, name: str, replicas: int, labels: dict[str, str],
                       nodes: list[str] | None = None, empty_dir: bool = False) -> None:
        """A ReplicaSet; its first pods go round-robin onto nodes (default: all), Ready."""
        rs = {"kind": "ReplicaSet", "apiVersion": "apps/v1",
              "metadata": _meta(name, namespace, labels, resourceVersion=self.rv()),
              "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                       "template": {"metadata": {"labels": labels}, "spec": self._pod_spec(empty_dir)}}}
        self.replicasets[(namespace, name)] = rs
        targets = nodes or sorted(self.nodes)
        for i in range(replicas):
            self._new_pod(rs, targets[i % len(targets)], ready=True)
        self._record()

    def add_daemonset(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        ds = {"kind": "DaemonSet", "apiVersion": "apps/v1",
              "metadata": _meta(name, namespace, labels, resourceVersion=self.rv()),
              "spec": {"selector": {"matchLabels": labels},
                       "template": {"metadata": {"labels": labels}, "spec": self._pod_spec(False)}}}
        self.daemonsets[(namespace, name)] = ds
        for node in self.nodes:
            self._daemon_pod(ds, node)

    def add_pod(self, namespace: str, name: str, node: str, labels: dict[str, str] | None = None,
                mirror: bool = False, empty_dir: bool = False) -> None:
        """A pod no controller manages (or, with mirror, a static pod's mirror)."""
        annotations = {"kubernetes.io/config.mirror": "hash"} if mirror else {}
        pod = {"kind": "Pod", "apiVersion": "v1",
               "metadata": _meta(name, namespace, labels, annotations=annotations,
                                 resourceVersion=self.rv()),
               "spec": {**self._pod_spec(empty_dir), "nodeName": node},
               "status": self._pod_status(True)}
        self.pods[(namespace, name)] = pod
        self._record()

    def add_pdb(self, namespace: str, name: str, selector: dict[str, str],
                min_available: int | str | None = None,
                max_unavailable: int | str | None = None) -> None:
        spec: Obj = {"selector": {"matchLabels": selector}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        self.pdbs[(namespace, name)] = {
            "kind": "PodDisruptionBudget", "apiVersion": "policy/v1",
            "metadata": _meta(name, namespace, resourceVersion=self.rv(), generation=1),
            "spec": spec}
        self._record()

    def set_node_ready(self, name: str, ready: bool, reason: str = "KubeletNotReady",
                       message: str = "") -> None:
        """The node's Ready condition as its kubelet posts it (False while the kubelet
        restarts, say); a NotReady node still takes pods here (no taint manager)."""
        node = self.nodes[name]
        node["status"]["conditions"] = [{
            "type": "Ready", "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else reason,
            "message": "kubelet is posting ready status" if ready else message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
        node["metadata"]["resourceVersion"] = self.rv()

    def mark_node(self, name: str, machine_id: str) -> None:
        """Label the node with the machine's id, as the kubelet flags of its items do
        (coordinator/domain/nodes/nodes.py): the coordinator finds the machine's node by it."""
        self.nodes[name]["metadata"]["labels"]["nodeagent.io/machine-id"] = machine_id
        self.nodes[name]["metadata"]["resourceVersion"] = self.rv()

    def add_deployment(self, namespace: str, name: str, replicas: int, available: int) -> None:
        """A Deployment as the API lists it, its status saying how many replicas are
        available (no pods behind it: only its status is read)."""
        self.deployments[(namespace, name)] = {
            "kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": _meta(name, namespace, resourceVersion=self.rv()),
            "spec": {"replicas": replicas},
            "status": {"replicas": replicas, "availableReplicas": available}}

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> None:
        self.pods[(namespace, name)]["status"] = self._pod_status(ready)
        self._record()

    def daemonset_status(self, ds: Obj) -> Obj:
        """The DaemonSet controller's counts: one pod wanted per node, available when Ready."""
        uid = ds["metadata"]["uid"]
        pods = [p for p in self.pods.values()
                if any(r["uid"] == uid for r in p["metadata"].get("ownerReferences", []))]
        return {"desiredNumberScheduled": len(self.nodes), "currentNumberScheduled": len(pods),
                "numberReady": sum(map(self._healthy, pods)),
                "numberAvailable": sum(map(self._healthy, pods))}

    def replicaset_status(self, rs: Obj) -> Obj:
        """The ReplicaSet controller's counts, as the API server serves them: its live pods,
        those Ready (available: this double has no minReadySeconds)."""
        uid = rs["metadata"]["uid"]
        pods = [p for p in self.pods.values() if "deletionTimestamp" not in p["metadata"]
                and any(r["uid"] == uid for r in p["metadata"].get("ownerReferences", []))]
        ready = sum(map(self._healthy, pods))
        return {"replicas": len(pods), "readyReplicas": ready, "availableReplicas": ready,
                "observedGeneration": 1}

    # -- reading ---------------------------------------------------------------------------------
    def pods_on(self, node: str) -> list[str]:
        return sorted(f"{ns}/{name}" for (ns, name), p in self.pods.items()
                      if p["spec"].get("nodeName") == node)

    def cordon(self, name: str) -> None:
        """`kubectl cordon`, by someone other than the coordinator: a new resourceVersion."""
        self.nodes[name]["spec"]["unschedulable"] = True
        self.nodes[name]["metadata"]["resourceVersion"] = self.rv()

    def cordoned(self) -> list[str]:
        return sorted(n for n, node in self.nodes.items() if node["spec"].get("unschedulable"))

    def budget_status(self, pdb: Obj) -> Obj:
        """The disruption controller's status: expected, healthy, desired, allowed."""
        namespace = pdb["metadata"]["namespace"]
        matched = [p for (ns, _), p in self.pods.items() if ns == namespace
                   and _selected(pdb["spec"]["selector"], p["metadata"]["labels"])]
        healthy = sum(1 for p in matched if self._healthy(p))
        spec = pdb["spec"]
        if isinstance(spec.get("minAvailable"), int):
            expected, desired = len(matched), spec["minAvailable"]
        else:
            scale = self._expected_scale(matched)
            if scale is None:  # a pod without a controller: the budget cannot be computed
                return {"expectedPods": len(matched), "currentHealthy": healthy,
                        "desiredHealthy": 0, "disruptionsAllowed": 0, "observedGeneration": 1}
            expected = scale
            if "minAvailable" in spec:
                desired = _scaled(spec["minAvailable"], expected)
            else:
                desired = expected - _scaled(spec.get("maxUnavailable", 0), expected)
        return {"expectedPods": expected, "currentHealthy": healthy, "desiredHealthy": desired,
                "disruptionsAllowed": max(0, healthy - desired), "observedGeneration": 1}

    # -- what a pod is ---------------------------------------------------------------------------
    @staticmethod
    def _pod_spec(empty_dir: bool) -> Obj:
        spec: Obj = {"containers": [{"name": "main", "image": "registry.test/app:1"}],
                     "terminationGracePeriodSeconds": 30}
        if empty_dir:
            spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
            spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
        return spec

    @staticmethod
    def _pod_status(ready: bool) -> Obj:
        return {"phase": "Running" if ready else "Pending",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}

    @staticmethod
    def _healthy(pod: Obj) -> bool:
        return "deletionTimestamp" not in pod["metadata"] and any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])

    def _expected_scale(self, pods: list[Obj]) -> int | None:
        owners: dict[Key, int] = {}
        for pod in pods:
            refs = [r for r in pod["metadata"].get("ownerReferences", []) if r.get("controller")]
            if not refs or refs[0]["kind"] != "ReplicaSet":
                return None
            key = (pod["metadata"]["namespace"], refs[0]["name"])
            owners[key] = self.replicasets[key]["spec"]["replicas"] if key in self.replicasets else 0
        return sum(owners.values())

    def _new_pod(self, owner: Obj, node: str | None, ready: bool) -> Obj:
        namespace = owner["metadata"]["namespace"]
        self._pod_count += 1  # names in creation order: two servers built alike name alike
        name = f"{owner['metadata']['name']}-{self._pod_count:05d}"
        spec = copy.deepcopy(owner["spec"]["template"]["spec"])
        if node is not None:
            spec["nodeName"] = node
        pod = {"kind": "Pod", "apiVersion": "v1",
               "metadata": _meta(name, namespace, owner["spec"]["template"]["metadata"]["labels"],
                                 owner=owner, resourceVersion=self.rv()),
               "spec": spec, "status": self._pod_status(ready)}
        self.pods[(namespace, name)] = pod
        return pod

    def _daemon_pod(self, ds: Obj, node: str) -> None:
        self._new_pod(ds, node, ready=True)

    # -- controllers -----------------------------------------------------------------------------
    def remove_pod(self, key: Key, grace: int | None) -> None:
        """Deletion as the kubelet finishes it: at once, or after the (bounded) grace period."""
        pod = self.pods.get(key)
        if pod is None or "deletionTimestamp" in pod["metadata"]:
            return
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
        delay = min(grace, self.termination_delay)
        if delay <= 0:
            del self.pods[key]
        else:
            pod["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
            uid = pod["metadata"]["uid"]
            self.later(delay, lambda: self._finish_deletion(key, uid))
        self._reconcile()

    def _finish_deletion(self, key: Key, uid: str) -> None:
        with self.lock:
            if key in self.pods and self.pods[key]["metadata"]["uid"] == uid:
                del self.pods[key]
            self._reconcile()

    def _reconcile(self) -> None:
        """The ReplicaSet controller: every set keeps its replica count of live pods, placed on
        the schedulable node with the fewest of its pods; they turn Ready after ready_delay."""
        schedulable = [n for n, node in sorted(self.nodes.items())
                       if not node["spec"].get("unschedulable")]
        for (namespace, name), rs in self.replicasets.items():
            live = [p for p in self.pods.values() if "deletionTimestamp" not in p["metadata"]
                    and any(r["name"] == name and r["kind"] == "ReplicaSet"
                            for r in p["metadata"].get("ownerReferences", []))
                    and p["metadata"]["namespace"] == namespace]
            for pod in live:  # placed pods wait in Pending until a node can take them
                if "nodeName" not in pod["spec"] and schedulable:
                    pod["spec"]["nodeName"] = self._least_loaded(schedulable, live)
                    self._turn_ready_later(pod)
            for _ in range(rs["spec"]["replicas"] - len(live)):
                node = self._least_loaded(schedulable, live) if schedulable else None
                pod = self._new_pod(rs, node, ready=self.ready_delay <= 0 and node is not None)
                live.append(pod)
                if node is not None and self.ready_delay > 0:
                    self._turn_ready_later(pod)
        self._record()

    @staticmethod
    def _least_loaded(nodes: list[str], pods: list[Obj]) -> str:
        return min(nodes, key=lambda n: (sum(p["spec"].get("nodeName") == n for p in pods), n))

    def _turn_ready_later(self, pod: Obj) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])

        def ready() -> None:
            with self.lock:
                if key in self.pods:
                    self.pods[key]["status"] = self._pod_status(True)
                self._record()

        self.later(self.ready_delay, ready)

    def _record(self) -> None:
        for (namespace, name), pdb in self.pdbs.items():
            healthy = self.budget_status(pdb)["currentHealthy"]
            label = f"{namespace}/{name}"
            self.min_healthy[label] = min(self.min_healthy.get(label, healthy), healthy)
        self.max_cordoned = max(self.max_cordoned, len(self.cordoned()))

    # -- the eviction subresource ---------------------------------------------------------------
    def evict(self, key: Key, grace: int | None) -> web.Response:
        pod = self.pods.get(key)
        if pod is None:
            return _status(404, "NotFound", f'pods "{key[1]}" not found',
                           details={"name": key[1], "kind": "pods"})
        terminal = pod["status"]["phase"] in ("Succeeded", "Failed", "Pending")
        budgets = [b for (ns, _), b in self.pdbs.items() if ns == key[0]
                   and _selected(b["spec"]["selector"], pod["metadata"]["labels"])]
        if not terminal and "deletionTimestamp" not in pod["metadata"]:
            if len(budgets) > 1:
                return _status(500, "InternalError", "This pod has more than one "
                               "PodDisruptionBudget, which the eviction subresource does not support.")
            if budgets:
                status = self.budget_status(budgets[0])
                blocked = status["disruptionsAllowed"] <= 0
                if not self._healthy(pod):  # unhealthyPodEvictionPolicy IfHealthyBudget
                    blocked = status["currentHealthy"] < status["desiredHealthy"]
                if blocked:
                    self.refusals += 1
                    cause = (f"The disruption budget {budgets[0]['metadata']['name']} needs "
                             f"{status['desiredHealthy']} healthy pods and has "
                             f"{status['currentHealthy']} currently")
                    return _status(429, "TooManyRequests", "Cannot evict pod as it would violate "
                                   "the pod's disruption budget.",
                                   causes=[{"reason": "DisruptionBudget", "message": cause}])
        self.evictions.append(f"{key[0]}/{key[1]}")
        self.remove_pod(key, grace)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                  "status": "Success", "code": 201}, status=201)


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(int(value.rstrip("%")) * total / 100)


def _field_selector(text: str) -> dict[str, str]:
    wanted = {}
    for part in filter(None, text.split(",")):
        key, _, value = re.split(r"(==|=)", part, maxsplit=1)
        wanted[key] = value
    return wanted


def _path_value(obj: Obj, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)


def _label_selector(text: str) -> dict[str, str | None]:
    """key=value terms, and bare keys (the label exists: None), as kube-apiserver reads them."""
    return {key: value[0] if value else None
            for key, *value in (part.split("=", 1) for part in filter(None, text.split(",")))}


def _labelled(labels: dict[str, str], selector: dict[str, str | None]) -> bool:
    return all(k in labels if v is None else labels.get(k) == v for k, v in selector.items())


def _page(request: web.Request, items: list[Obj]) -> tuple[list[Obj], str]:
    """The page a list's limit and continue token ask for (items in name order), and the token
    for the next one ("" after the last), as kube-apiserver pages: the token is opaque to
    clients; here, the last name sent."""
    limit = int(request.query.get("limit") or 0)
    after = request.query.get("continue", "")
    rest = [i for i in items if i["metadata"]["name"] > after] if after else items
    if not limit or len(rest) <= limit:
        return rest, ""
    return rest[:limit], rest[limit - 1]["metadata"]["name"]


def _list(kind: str, items: list[Obj], rv: str, more: str = "") -> web.Response:
    return web.json_response({"kind": kind, "apiVersion": "v1" if kind in ("PodList", "NodeList")
                              else "apps/v1",
                              "metadata": {"resourceVersion": rv, **({"continue": more} if more
                                                                     else {})},
                              "items": items})


def create_app(cluster: Cluster) -> web.Application:
    routes = web.RouteTableDef()

    @web.middleware
    async def locked(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        await request.read()  # the body is cached: handlers never wait while holding the lock
        with cluster.lock:
            cluster.requests += 1
            cluster.calls.append(f"{request.method} {request.path_qs}")
            response: web.StreamResponse = await handler(request)
            return response

    @routes.get("/version")
    async def version(request: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "32", "gitVersion": "v1.32.0-test",
                                  "platform": "linux/amd64"})

    @routes.get("/api")
    async def api(request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIVersions", "versions": ["v1"],
                                  "serverAddressByClientCIDRs": [
                                      {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]})

    @routes.get("/apis")
    async def apis(request: web.Request) -> web.Response:
        groups = [{"name": g, "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
                   "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"}}
                  for g in ("apps", "policy")]
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    @routes.get("/api/v1")
    async def core(request: web.Request) -> web.Response:
        return web.json_response(DISCOVERY["v1"])

    @routes.get("/apis/{group}/v1")
    async def group(request: web.Request) -> web.Response:
        found = DISCOVERY.get(f"{request.match_info['group']}/v1")
        if found is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        return web.json_response(found)

    @routes.get("/api/v1/nodes")
    async def list_nodes(request: web.Request) -> web.Response:
        labels = _label_selector(request.query.get("labelSelector", ""))
        items, more = _page(request, [n for _, n in sorted(cluster.nodes.items())
                                      if _labelled(n["metadata"]["labels"], labels)])
        return _list("NodeList", items, str(cluster._rv), more)

    @routes.post("/api/v1/nodes")
    async def create_node(request: web.Request) -> web.Response:
        """A kubelet registering its node: the object as sent, with server-set metadata."""
        body = await request.json()
        name = body.get("metadata", {}).get("name", "")
        if name in cluster.nodes:
            return _status(409, "AlreadyExists", f'nodes "{name}" already exists')
        metadata = body.get("metadata", {})
        body["metadata"] = _meta(name, None, {"kubernetes.io/hostname": name,
                                              **metadata.get("labels", {})},
                                 resourceVersion=cluster.rv(),
                                 annotations=metadata.get("annotations", {}))
        body.setdefault("spec", {})
        body.setdefault("status", {"conditions": []})
        body.update(kind="Node", apiVersion="v1")
        cluster.nodes[name] = body
        for ds in cluster.daemonsets.values():
            cluster._daemon_pod(ds, name)
        cluster._reconcile()
        return web.json_response(body, status=201)

    @routes.delete("/api/v1/nodes/{name}")
    async def delete_node(request: web.Request) -> web.Response:
        """The node goes, and with it its pods (as the pod garbage collector removes pods
        bound to a node that no longer exists)."""
        name = request.match_info["name"]
        node = cluster.nodes.pop(name, None)
        if node is None:
            return _status(404, "NotFound", f'nodes "{name}" not found')
        for key in [k for k, p in cluster.pods.items() if p["spec"].get("nodeName") == name]:
            del cluster.pods[key]
        cluster.deleted_nodes.append(name)
        cluster._reconcile()
        return web.json_response(node)

    @routes.get("/api/v1/nodes/{name}")
    async def get_node(request: web.Request) -> web.Response:
        node = cluster.nodes.get(request.match_info["name"])
        if node is None:
            return _status(404, "NotFound", f'nodes "{request.match_info["name"]}" not found')
        return web.json_response(node)

    @routes.patch("/api/v1/nodes/{name}")
    @routes.patch("/api/v1/nodes/{name}/status")  # a kubelet posting its conditions
    async def patch_node(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        node = cluster.nodes.get(name)
        if node is None:
            return _status(404, "NotFound", f'nodes "{name}" not found')
        body = await request.json()
        kind = request.content_type
        cordoned = bool(node["spec"].get("unschedulable"))
        precondition = ((body.get("metadata") or {}).get("resourceVersion")
                        if isinstance(body, dict) else None)
        if precondition is not None and precondition != node["metadata"]["resourceVersion"]:
            # A merge patch naming a resourceVersion is a precondition, as the API server takes it.
            return _status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": '
                           "the object has been modified; please apply your changes to the "
                           "latest version and try again")
        if kind == "application/json-patch+json":
            _json_patch(node, body)
        elif kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            _merge(node, body)
        else:
            return _status(415, "UnsupportedMediaType", f"unsupported patch type {kind}")
        if cordoned and not node["spec"].get("unschedulable"):
            cluster.uncordons.append(name)
        node["metadata"]["resourceVersion"] = cluster.rv()
        cluster._reconcile()  # a node uncordoned may take pods that waited
        return web.json_response(node)

    @routes.get("/api/v1/pods")
    @routes.get("/api/v1/namespaces/{namespace}/pods")
    async def list_pods(request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace")
        fields = _field_selector(request.query.get("fieldSelector", ""))
        labels = _label_selector(request.query.get("labelSelector", ""))
        items = [p for (ns, _), p in sorted(cluster.pods.items())
                 if (namespace is None or ns == namespace)
                 and all(_path_value(p, k) == v for k, v in fields.items())
                 and _labelled(p["metadata"]["labels"], labels)]
        return _list("PodList", items, str(cluster._rv))

    @routes.get("/api/v1/namespaces/{namespace}/pods/{name}")
    async def get_pod(request: web.Request) -> web.Response:
        pod = cluster.pods.get((request.match_info["namespace"], request.match_info["name"]))
        if pod is None:
            return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found',
                           details={"name": request.match_info["name"], "kind": "pods"})
        return web.json_response(pod)

    @routes.delete("/api/v1/namespaces/{namespace}/pods/{name}")
    async def delete_pod(request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        pod = cluster.pods.get(key)
        if pod is None:
            return _status(404, "NotFound", f'pods "{key[1]}" not found',
                           details={"name": key[1], "kind": "pods"})
        options = await request.json() if request.can_read_body else {}
        cluster.remove_pod(key, (options or {}).get("gracePeriodSeconds"))
        return web.json_response(pod)

    @routes.post("/api/v1/namespaces/{namespace}/pods/{name}/eviction")
    async def evict(request: web.Request) -> web.Response:
        body = await request.json()
        grace = (body.get("deleteOptions") or {}).get("gracePeriodSeconds")
        return cluster.evict((request.match_info["namespace"], request.match_info["name"]), grace)

    @routes.get("/apis/apps/v1/namespaces/{namespace}/{kind:daemonsets|replicasets}/{name}")
    async def get_controller(request: web.Request) -> web.Response:
        daemonsets = request.match_info["kind"] == "daemonsets"
        store = cluster.daemonsets if daemonsets else cluster.replicasets
        found = store.get((request.match_info["namespace"], request.match_info["name"]))
        if found is None:
            return _status(404, "NotFound", f'{request.match_info["kind"]} '
                           f'"{request.match_info["name"]}" not found')
        status = cluster.daemonset_status(found) if daemonsets else cluster.replicaset_status(found)
        return web.json_response({**found, "status": status})

    @routes.get("/apis/policy/v1/poddisruptionbudgets")
    @routes.get("/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")
    async def list_pdbs(request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace")
        items = [{**b, "status": cluster.budget_status(b)} for (ns, _), b in cluster.pdbs.items()
                 if namespace is None or ns == namespace]
        return web.json_response({"kind": "PodDisruptionBudgetList", "apiVersion": "policy/v1",
                                  "metadata": {"resourceVersion": str(cluster._rv)}, "items": items})

    @routes.get("/apis/apps/v1/namespaces/{namespace}/deployments")
    async def list_deployments(request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        return _list("DeploymentList", [d for (ns, _), d in sorted(cluster.deployments.items())
                                        if ns == namespace], str(cluster._rv))

    @routes.get("/apis/apps/v1/namespaces/{namespace}/daemonsets")
    async def list_daemonsets(request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        return _list("DaemonSetList", [{**ds, "status": cluster.daemonset_status(ds)}
                                       for (ns, _), ds in sorted(cluster.daemonsets.items())
                                       if ns == namespace], str(cluster._rv))

    app = web.Application(middlewares=[locked])
    app.add_routes(routes)
    return app


def socket_in_netns(netns: str | None, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on host, created inside the named network namespace: a socket
    stays in the namespace it was made in, whichever thread later serves it."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def bind() -> None:
        try:
            if netns is not None:  # this thread only: the test's own threads stay put
                fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
                try:
                    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
                finally:
                    os.close(fd)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, 0))
            sock.listen(512)
            made.append(sock)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=bind)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


class KubeApiServer:
    """The server on its own event loop in a thread; tests read and build `cluster` under
    `cluster.lock` (the `locked()` context manager)."""

    def __init__(self, cluster: Cluster | None = None, sock: socket.socket | None = None) -> None:
        self.cluster = cluster or Cluster()
        self._sock = sock or socket_in_netns(None)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://{self._sock.getsockname()[0]}:{self.port}"
        self.token = f"kube-token-{uuid.uuid4().hex}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def start(self) -> KubeApiServer:
        loop = self._loop
        self.cluster.later = lambda delay, fn: loop.call_soon_threadsafe(loop.call_later, delay, fn)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        return self

    async def _serve(self) -> None:
        self._runner = web.AppRunner(create_app(self.cluster), access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._sock.close()

    @contextlib.contextmanager
    def locked(self) -> Iterator[Cluster]:
        with self.cluster.lock:
            yield self.cluster

    def kubeconfig(self) -> str:
        """A kubeconfig for this server, with a bearer token unique to it (the server accepts
        any): tests look for the token where a kubeconfig must never show."""
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        })

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(self.kubeconfig())
        return path


@contextlib.contextmanager
def kube_api_server(cluster: Cluster | None = None, netns: str | None = None,
                    host: str = "127.0.0.1") -> Iterator[KubeApiServer]:
    """The server on host (an address of netns, e.g. a LAN's hub for its nodes to reach)."""
    server = KubeApiServer(cluster, socket_in_netns(netns, host)).start()
    try:
        yield server
    finally:
        server.stop()


def rolled_out_marked(c: SyncDriver, kube: KubeApiServer, roles: dict[str, str]) -> None:
    """Simulated agents of these hostnames registered, each one's Node marked as its kubelet
    would mark it, approved as its role, and their items reported until all are Ready."""
    for hostname, role in roles.items():
        with kube.locked() as cluster:
            cluster.mark_node(hostname, c.register(hostname)["machine_id"])
        c.send(Call("POST", f"/v1/machines/{hostname}/approve", body={"role": role}))

    def rolled_out() -> bool:
        for hostname, agent in c.agents.items():
            if c.machine(hostname)["state"] == "Ready":
                continue
            try:
                c.report_all(agent)
            except ClientError as refused:  # went Ready between poll and report: as an
                if refused.status != 409:  # agent would, poll again next round
                    raise
        return all(c.machine(h)["state"] == "Ready" for h in c.agents)

    wait_until(rolled_out, 30, "the rollout", interval=0.2)
