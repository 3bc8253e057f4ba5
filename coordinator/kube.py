"""The one seam to a workload cluster's Kubernetes API: a Node held and cordoned, drained and
given back (domain/nodes/maintenance.py); a machine's Node found, read, labelled, tainted and
deleted; kube-system's workloads.

Through kubernetes_asyncio (the asyncio client generated from Kubernetes' own API), never
hand-written HTTP. A drain is kubectl's, with two differences that matter at scale: every
pod's eviction runs at once (bounded by the connection pool) and the wait for evicted pods
lists the node's pods once per poll instead of polling each pod. A 429 from a
PodDisruptionBudget is retried with capped exponential backoff until the drain's deadline;
budgets are bypassed (the pod deleted) only when the operator forced this drain, or at the
deadline when the cluster's drain.onTimeout says force. Those rules, and how a drain ended,
are domain/nodes/draining.py's: here the answers are read and its steps done.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from coordinator.domain.model import DrainSettings
from coordinator.domain.nodes.drain import PodRef, classify, ref
from coordinator.domain.nodes.draining import (
    DrainResult,
    blocked_at_once,
    drain_outcome,
    eviction_step,
    waiting,
)
from coordinator.domain.nodes.forecast import NodeForecast, forecast
from coordinator.domain.nodes.kubeconfig import ClientCertificate, certificate_dates, parse_kubeconfig
from coordinator.domain.nodes.maintenance import (
    KURED_DAEMONSET,
    Release,
    kured_locked_node,
    other_holder,
    release,
    take,
)
from coordinator.domain.nodes.nodes import (
    MACHINE_ID_LABEL,
    Marked,
    condition_text,
    marked_nodes,
    node_of,
    provider_id,
    ready_condition,
)
from coordinator.domain.nodes.recovery import evicted_workloads, not_back, workload_name
from coordinator.domain.nodes.workloads import NAMESPACE, SystemWorkloads, short_of_available

MAX_POLL_SECONDS = 1.0
CONCURRENT_REQUESTS = 64
CONFLICT_TRIES = 5  # reads and patches of a Node that other writers keep changing
NODE_PAGE = 500  # Nodes a list asks for at once: 10,000 Nodes come in 20 answers, not one
_BUDGET = re.compile(r"The disruption budget (\S+) needs")

Clock = Callable[[], float]


class KubeError(Exception):
    """The API could not be reached or refused a request: the message says which and why."""


async def serving_certificate(server: str, timeout: float) -> ClientCertificate:
    """The subject and dates of the certificate the API server at server (an https URL) serves,
    read from a TLS handshake and not verified (an expired one is what must be seen); nothing
    is sent. KubeError saying why when it cannot be read."""
    url = urllib.parse.urlsplit(server)
    if url.scheme != "https" or not url.hostname:
        raise KubeError(f"{server} is not an https URL: no serving certificate")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(url.hostname, url.port or 443, ssl=context)
    except (OSError, TimeoutError) as exc:
        raise KubeError(f"cannot reach {server}: {exc or 'timed out'}") from None
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    if not der:
        raise KubeError(f"{server} served no certificate")
    return certificate_dates(der)


OnProgress = Callable[[DrainResult], Awaitable[None]]


def _describe(exc: ApiException) -> str:
    try:
        message = json.loads(exc.body).get("message", "")
    except (TypeError, ValueError):
        message = ""
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


def _budget_of(exc: ApiException, namespace: str) -> str | None:
    """The budget a 429 names in its DisruptionBudget cause (kube-apiserver's own wording)."""
    try:
        causes = json.loads(exc.body).get("details", {}).get("causes", [])
    except (TypeError, ValueError):
        return None
    for cause in causes:
        if cause.get("reason") == "DisruptionBudget":
            found = _BUDGET.search(cause.get("message", ""))
            return f"{namespace}/{found.group(1)}" if found else f"{namespace}/(unnamed budget)"
    return None


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._policy = client.PolicyV1Api(api)
        self._limit = asyncio.Semaphore(CONCURRENT_REQUESTS)

    @classmethod
    async def connect(cls, path: str | None = None, text: str | None = None) -> Kube:
        """Through the kubeconfig file at path, or the kubeconfig text (as a manager's item
        reported it): exactly one of them."""
        configuration = client.Configuration()
        try:
            if text is not None:
                await config.load_kube_config_from_dict(parse_kubeconfig(text),
                                                        client_configuration=configuration)
            else:
                await config.load_kube_config(config_file=path, client_configuration=configuration)
        except (OSError, ConfigException, ValueError) as exc:
            what = path if text is None else "reported by a manager"
            raise KubeError(f"cannot load the kubeconfig {what}: {exc}") from None
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, what: str, request: Callable[[], Awaitable[Any]]) -> Any:
        try:
            async with self._limit:
                return await request()
        except ApiException as exc:
            raise KubeError(f"{what}: {_describe(exc)}") from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise KubeError(f"{what}: the API server does not answer ({exc})") from None

    async def hold(self, node: str, since: str) -> str | None:
        """Take the Node for maintenance and cordon it (domain/nodes/maintenance.py): None once
        the coordinator holds it, else who else does (it is left alone). since: now, RFC 3339."""
        for _ in range(CONFLICT_TRIES):
            found = await self.node(node)
            other = other_holder(found, kured_locked_node(await self._kured_daemonset()))
            if other is not None:
                return other
            if await self._patch_unless_changed(f"hold and cordon node {node}", node,
                                                take(found, since)):
                return None
        raise KubeError(f"hold node {node}: it changed under each of {CONFLICT_TRIES} tries")

    async def give_back(self, node: str) -> Release:
        """Give the Node back: the hold removed, and the cordon only when the coordinator made
        it (a Node cordoned by someone else stays cordoned)."""
        for _ in range(CONFLICT_TRIES):
            given = release(await self.node(node))
            if given.patch is None or await self._patch_unless_changed(
                    f"release node {node}", node, given.patch):
                return given
        raise KubeError(f"release node {node}: it changed under each of {CONFLICT_TRIES} tries")

    async def _patch_unless_changed(self, what: str, node: str, patch: dict[str, Any]) -> bool:
        """A patch carrying the resourceVersion it was computed from: False when the Node
        changed since (409), to be read again."""
        async def request() -> bool:
            try:
                await self._core.patch_node(node, patch)
            except ApiException as exc:
                if exc.status == 409:
                    return False
                raise
            return True

        changed: bool = await self._call(what, request)
        return changed

    async def _kured_daemonset(self) -> dict[str, Any] | None:
        """kured's DaemonSet, where its lock is (None: there is none, or the coordinator may
        not read it, so no lock of kured's can be seen)."""
        namespace, name = KURED_DAEMONSET
        return await self._found(f"get daemonset {namespace}/{name}", partial(
            self._apps.read_namespaced_daemon_set, name, namespace, _preload_content=False),
            absent=(403, 404))

    async def _found(self, what: str, request: Callable[[], Awaitable[Any]],
                     absent: tuple[int, ...] = (404,)) -> dict[str, Any] | None:
        """An object as JSON, None where the API answers one of the `absent` statuses."""
        async def fetch() -> dict[str, Any] | None:
            try:
                response = await request()
            except ApiException as exc:
                if exc.status in absent:
                    return None
                raise
            async with response:
                found: dict[str, Any] = await response.json()
                return found

        found: dict[str, Any] | None = await self._call(what, fetch)
        return found

    async def budgets(self) -> list[dict[str, Any]]:
        """Every PodDisruptionBudget with the disruption controller's status, as JSON."""
        return await self._items("list poddisruptionbudgets", lambda: self._policy
                                 .list_pod_disruption_budget_for_all_namespaces(
                                     _preload_content=False))

    async def drain_forecast(self, node: str, settings: DrainSettings,
                             budgets: list[dict[str, Any]]) -> NodeForecast:
        """What draining node would meet now (domain/nodes/forecast.py): its pods, the
        budgets given (`budgets`, read once for a whole plan) and the replica count of each
        evicted pod's ReplicaSet. Reads only."""
        pods = await self.pods_on(node)
        owners = {(p["metadata"].get("namespace", ""), o["name"]): o["uid"] for p in pods
                  for o in p["metadata"].get("ownerReferences") or []
                  if o.get("controller") and o.get("kind") == "ReplicaSet"}
        found = await asyncio.gather(*(self._replicaset(namespace, name)
                                       for namespace, name in owners))
        replicas = {uid: int((rs.get("spec") or {}).get("replicas", 1))
                    for uid, rs in zip(owners.values(), found, strict=True) if rs is not None}
        return forecast(node, pods, budgets, replicas, settings)

    async def not_back(self, workloads: Sequence[str]) -> list[str]:
        """What of the workloads a drain evicted is not available again
        (domain/nodes/recovery.py): each ReplicaSet read now, and its namespace's budgets."""
        found = await asyncio.gather(*(self._replicaset(*workload_name(w)) for w in workloads))
        namespaces = {workload_name(w)[0] for w in workloads}
        budgets = [b for b in await self.budgets() if b["metadata"]["namespace"] in namespaces]
        return not_back(dict(zip(workloads, found, strict=True)), budgets)

    async def _replicaset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ReplicaSet with its status, as JSON (None: gone)."""
        return await self._found(f"get replicaset {namespace}/{name}", partial(
            self._apps.read_namespaced_replica_set, name, namespace, _preload_content=False))

    async def node_ready(self, node: str) -> tuple[bool, str]:
        """Whether the node's Ready condition is True, and the condition as a phrase (status,
        reason, message: what the kubelet says is wrong)."""
        condition = ready_condition(await self.node(node))
        return condition[0] == "True", condition_text(*condition)

    async def system_workloads(self) -> SystemWorkloads:
        """kube-system's Deployments and DaemonSets, and which fall short of available."""
        deployments = await self._items(f"list deployments in {NAMESPACE}", lambda: self._apps
                                        .list_namespaced_deployment(NAMESPACE, _preload_content=False))
        daemonsets = await self._items(f"list daemonsets in {NAMESPACE}", lambda: self._apps
                                       .list_namespaced_daemon_set(NAMESPACE, _preload_content=False))
        return short_of_available(deployments, daemonsets)

    async def node(self, node: str) -> dict[str, Any]:
        """The node as JSON."""
        found: dict[str, Any] = await self._json(f"get node {node}", lambda: self._core.read_node(
            node, _preload_content=False))
        return found

    async def patch_node(self, node: str, patch: dict[str, Any]) -> None:
        """A merge patch of the node's labels, annotations and taints (nodes.metadata_patch)."""
        await self._call(f"label and taint node {node}", lambda: self._core.patch_node(node, patch))

    async def _json(self, what: str, request: Callable[[], Awaitable[Any]]) -> Any:
        """A call's answer as JSON, without building a model object."""
        async def fetch() -> Any:
            response = await request()
            async with response:
                if response.status != 200:
                    raise KubeError(f"{what}: {response.status} {response.reason}")
                return await response.json()
        return await self._call(what, fetch)

    async def _items(self, what: str, request: Callable[[], Awaitable[Any]]) -> list[dict[str, Any]]:
        """A list call's items as JSON: parsed once, without building a model object each."""
        items: list[dict[str, Any]] = (await self._json(what, request))["items"]
        return items

    async def pods_on(self, node: str) -> list[dict[str, Any]]:
        """The node's pods as JSON."""
        return await self._items(f"list pods on {node}", lambda: self._core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False))

    async def find_node(self, cluster: str, machine_id: str) -> str | None:
        """The name of the machine's Node (domain/nodes/nodes.py says how it is marked), or None
        while no node carries its mark."""
        labelled = await self._items(f"find the node of machine {machine_id}",
                                     lambda: self._core.list_node(
                                         label_selector=f"{MACHINE_ID_LABEL}={machine_id}",
                                         _preload_content=False))
        found = node_of(labelled, cluster, machine_id)
        if found is not None:
            return found
        every = await self._items(f"find the node of machine {machine_id}",
                                  lambda: self._core.list_node(_preload_content=False))
        return node_of(every, cluster, machine_id)

    async def marked_nodes(self, cluster: str, every: bool = False) -> dict[str, Marked]:
        """Each machine's Node (its name and Ready condition), by machine id: the Nodes that
        carry the machine-id label (every: all Nodes, for those marked by providerID alone),
        listed in pages of NODE_PAGE, each reduced before the next is asked for (a machine
        marked on Nodes of two pages: the first page's)."""
        found: dict[str, Marked] = {}
        token: str | None = None
        selector = None if every else MACHINE_ID_LABEL
        while True:
            page = await self._json("list the marked nodes", partial(
                self._core.list_node, label_selector=selector, limit=NODE_PAGE,
                _continue=token, _preload_content=False))
            found = {**marked_nodes(page["items"], cluster), **found}
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return found

    async def delete_node(self, node: str) -> None:
        """Delete the Node (what `kubectl delete node` does: its pods go with it); a Node
        already gone is no error, so a retried deletion succeeds."""
        async def request() -> None:
            try:
                await self._core.delete_node(node)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        await self._call(f"delete node {node}", request)

    async def machine_node(self, cluster: str, machine_id: str, hostname: str) -> str:
        """find_node, for an operation that needs the node: KubeError while there is none."""
        found = await self.find_node(cluster, machine_id)
        if found is None:
            raise KubeError(f"no node of machine {hostname} is registered (none labelled "
                            f"{MACHINE_ID_LABEL}={machine_id} or with providerID "
                            f"{provider_id(cluster, machine_id)})")
        return found

    async def drain(self, node: str, settings: DrainSettings, deadline: float, force: bool = False,
                    clock: Clock = time.time, progress: OnProgress | None = None,
                    rand: random.Random | None = None,
                    refused: Callable[[], None] | None = None) -> DrainResult:
        """Evict the pods of a node the coordinator holds (`hold`: held and cordoned); True in
        .drained once every evictable pod is gone.

        Not drained, with the pods and budgets in the way: pods the settings do not allow to
        move, or pods still protected by a budget (or not gone) at the deadline. refused is
        called on every eviction a budget refuses (a 429), as it happens."""
        pods = await self.pods_on(node)
        plan = classify(pods, settings)
        if (blocked := blocked_at_once(plan, force)) is not None:
            return blocked
        evictable = plan.evict + [p for p, _ in plan.blocking]
        drain = _Drain(self, settings, deadline, force, clock, rand or random.Random(), refused)
        watcher = asyncio.create_task(drain.report_waits(progress)) if progress else None
        try:
            outcomes = await asyncio.gather(*(drain.evict(pod) for pod in evictable))
        finally:
            if watcher is not None:
                watcher.cancel()
        gone = [pod for pod, went in zip(evictable, outcomes, strict=True) if went]
        left = await drain.wait_gone(node, gone + plan.terminating)
        result = drain_outcome(plan, gone, drain.waits, drain.budgets, left)
        return replace(result, workloads=evicted_workloads(pods, gone)) if result.drained \
            else result


class _Drain:
    """One drain's evictions, as domain/nodes/draining.py decides each next step from the answers:
    what each pod still waits for, and the shared deadline."""

    def __init__(self, kube: Kube, settings: DrainSettings, deadline: float, force: bool,
                 clock: Clock, rand: random.Random, refused: Callable[[], None] | None) -> None:
        self.kube = kube
        self.refused = refused
        self.settings = settings
        self.deadline = deadline
        self.force = force
        self.clock = clock
        self.rand = rand
        self.waits: dict[PodRef, str] = {}  # pod -> the budget or error it waits on
        self.budgets: dict[PodRef, str] = {}  # pod -> the budget that refused it last

    def _eviction(self, pod: PodRef) -> client.V1Eviction:
        grace = self.settings.grace_period_seconds
        return client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
            delete_options=None if grace is None else client.V1DeleteOptions(
                grace_period_seconds=grace))

    async def evict(self, pod: PodRef) -> bool:
        """True once the pod is evicted (or deleted, or already gone)."""
        core, failures = self.kube._core, 0
        while True:
            evicted, budget = False, None
            try:
                async with self.kube._limit:
                    await core.create_namespaced_pod_eviction(pod.name, pod.namespace,
                                                              self._eviction(pod))
                evicted = True
            except ApiException as exc:
                evicted = exc.status == 404
                budget = _budget_of(exc, pod.namespace) if exc.status == 429 else None
                if not evicted:
                    self.waits[pod] = f"budget {budget}" if budget else _describe(exc)
                if budget:
                    self.budgets[pod] = budget
                    if self.refused is not None:
                        self.refused()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                self.waits[pod] = f"API server unreachable: {exc}"
            failures += not evicted
            step = eviction_step(evicted, budget, failures, self.settings, self.force,
                                 self.deadline - self.clock(), 0.0 if evicted else self.rand.random())
            if step.action == "evicted":
                self.waits.pop(pod, None)
                return True
            if step.action == "delete":
                return await self._delete(pod)
            if step.action == "give-up":
                return False
            await asyncio.sleep(step.wait)

    async def _delete(self, pod: PodRef) -> bool:
        """Bypass the budget: delete the pod (still with its grace period)."""
        grace = self.settings.grace_period_seconds
        try:
            async with self.kube._limit:
                await self.kube._core.delete_namespaced_pod(
                    pod.name, pod.namespace, grace_period_seconds=grace)
        except ApiException as exc:
            if exc.status != 404:
                self.waits[pod] = f"delete refused: {_describe(exc)}"
                return False
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            self.waits[pod] = f"API server unreachable: {exc}"
            return False
        self.waits.pop(pod, None)
        return True

    async def wait_gone(self, node: str, pods: list[PodRef]) -> list[PodRef]:
        """Poll the node's pods until these uids are gone or the deadline passes; the ones left."""
        waiting = {p.uid: p for p in pods}
        interval = 0.02
        while waiting:
            present = {ref(p).uid for p in await self.kube.pods_on(node)}
            waiting = {uid: p for uid, p in waiting.items() if uid in present}
            if not waiting or self.clock() >= self.deadline:
                break
            await asyncio.sleep(min(interval, max(0.0, self.deadline - self.clock())))
            interval = min(MAX_POLL_SECONDS, interval * 1.5)
        return sorted(waiting.values(), key=str)

    async def report_waits(self, progress: OnProgress) -> None:
        """Tell the caller, at most every 2 seconds, which pods wait on which budgets."""
        shown: dict[PodRef, str] = {}
        while True:
            await asyncio.sleep(2)
            if self.waits != shown:
                shown = dict(self.waits)
                await progress(waiting(shown, self.budgets))
