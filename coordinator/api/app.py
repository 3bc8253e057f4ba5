"""Routes, authentication and error mapping. Handlers stay thin: the service does the work."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from coordinator import planner
from coordinator.api.openapi import openapi_document
from coordinator.api.views import cluster_view, event_view, machine_view, upgrade_plan_view
from coordinator.model import ROLES, ClusterSpec, Machine
from coordinator.service import Conflict, Coordinator, NotFound, Unauthorized
from coordinator.tokens import same_token
from nodeagent.protocol import ItemReport, PrecheckReport, RegisterRequest
from nodeagent.validation import InvalidDocument, Problem, load_model, problems_from

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

COORDINATOR = web.AppKey("coordinator", Coordinator)
ADMIN_TOKEN = web.AppKey("admin_token", str)
ARTIFACTS = web.AppKey("artifacts", Path)
MAX_WAIT_SECONDS = 60.0
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/v1/agent/register"})


def _error(status: int, message: str, problems: list[Problem] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if problems:
        body["problems"] = [{"path": p.path, "line": p.line, "message": p.message}
                            for p in problems]
    return web.json_response(body, status=status)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except InvalidDocument as exc:
        return _error(422, "invalid document: " + "; ".join(p.render() for p in exc.problems),
                      exc.problems)
    except Unauthorized as exc:
        return _error(401, str(exc))
    except NotFound as exc:
        return _error(404, str(exc))
    except Conflict as exc:
        return _error(409, str(exc))


def _bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token")
    return token.strip()


@web.middleware
async def admin_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Admin routes need the admin token; agent routes authenticate per machine."""
    path = request.path
    if path in OPEN_PATHS or path.startswith(("/v1/agent/", "/v1/artifacts/")):
        return await handler(request)
    if not same_token(_bearer(request), request.app[ADMIN_TOKEN]):
        raise Unauthorized("invalid admin token")
    return await handler(request)


async def _body(request: web.Request, model: type[M]) -> M:
    try:
        data = await request.json()
    except json.JSONDecodeError as exc:
        raise InvalidDocument([Problem("", f"body is not valid JSON: {exc.msg}", exc.lineno)]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidDocument(problems_from(exc, None, data)) from None


def _c(request: web.Request) -> Coordinator:
    return request.app[COORDINATOR]


async def _agent(request: web.Request) -> Machine:
    return await _c(request).authenticate(request.match_info["machine_id"], _bearer(request))


# -- health -----------------------------------------------------------------------------

async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        await _c(request).store.list_clusters()
    except Exception as exc:
        return web.json_response({"status": "store unavailable", "error": str(exc)}, status=503)
    return web.json_response({"status": "ready"})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


# -- agent --------------------------------------------------------------------------------

async def register(request: web.Request) -> web.Response:
    response = await _c(request).register(await _body(request, RegisterRequest))
    return web.json_response(response.model_dump(mode="json"), status=201)


async def assignment(request: web.Request) -> web.Response:
    machine = await _agent(request)
    try:
        after = int(request.query.get("after", "0"))
        wait = min(float(request.query.get("wait", "0")), MAX_WAIT_SECONDS)
    except ValueError:
        return _error(400, "after must be an integer and wait a number of seconds")
    result = await _c(request).wait_assignment(machine.id, after, wait)
    return web.json_response(result.model_dump(mode="json", by_alias=True))


async def report(request: web.Request) -> web.Response:
    machine = await _agent(request)
    await _c(request).report(machine.id, await _body(request, ItemReport))
    return web.json_response({"status": "recorded"})


async def precheck(request: web.Request) -> web.Response:
    machine = await _agent(request)
    await _c(request).update_precheck(machine.id, await _body(request, PrecheckReport))
    return web.json_response({"status": "recorded"})


async def heartbeat(request: web.Request) -> web.Response:
    machine = await _agent(request)
    await _c(request).heartbeat(machine.id)
    return web.json_response({"status": "ok"})


async def artifact(request: web.Request) -> web.StreamResponse:
    """Files from the artifact store, for any registered machine; never outside the store."""
    await _c(request).authenticate_any(_bearer(request))
    store = request.app[ARTIFACTS].resolve()
    target = (store / request.match_info["name"]).resolve()
    if not target.is_relative_to(store) or not target.is_file():
        raise NotFound(f"no artifact {request.match_info['name']}")
    return web.FileResponse(target)


# -- admin --------------------------------------------------------------------------------

async def apply_cluster(request: web.Request) -> web.Response:
    text = await request.text()
    spec = load_model(ClusterSpec, text, "request body")
    stored, changed = await _c(request).apply_cluster(spec)
    return web.json_response({**cluster_view(stored), "changed": changed})


async def list_clusters(request: web.Request) -> web.Response:
    clusters = await _c(request).store.list_clusters()
    return web.json_response([cluster_view(c) for c in clusters])


async def get_cluster(request: web.Request) -> web.Response:
    return web.json_response(cluster_view(await _c(request).cluster(request.match_info["name"])))


async def delete_cluster(request: web.Request) -> web.Response:
    await _c(request).delete_cluster(request.match_info["name"])
    return web.json_response({"status": "deleting"}, status=202)


async def create_join_token(request: web.Request) -> web.Response:
    token = await _c(request).create_join_token(request.match_info["name"])
    return web.json_response({"token": token, "cluster": request.match_info["name"]}, status=201)


async def cluster_status(request: web.Request) -> web.Response:
    coordinator = _c(request)
    stored = await coordinator.cluster(request.match_info["name"])
    machines = await coordinator.store.list_machines(stored.spec.name)
    counts: dict[str, int] = {}
    for machine in machines:
        counts[machine.state.value] = counts.get(machine.state.value, 0) + 1
    host = planner.post_deploy_host(stored.spec, machines)
    return web.json_response({
        "cluster": stored.spec.name,
        "release": stored.spec.release,
        "generation": stored.generation,
        "paused": stored.spec.settings.upgrade.paused,
        "post_deploy": {"items": len(stored.spec.items("manager", "postdeploy")),
                        "running_on": host.hostname if host else None},
        "counts": counts,
        "machines": [machine_view(m, stored.spec) for m in machines],
    })


async def list_machines(request: web.Request) -> web.Response:
    coordinator = _c(request)
    cluster = request.query.get("cluster")
    specs = {c.spec.name: c.spec for c in await coordinator.store.list_clusters()}
    machines = await coordinator.store.list_machines(cluster)
    return web.json_response([machine_view(m, specs.get(m.cluster)) for m in machines])


async def get_machine(request: web.Request) -> web.Response:
    coordinator = _c(request)
    machine = await coordinator.machine(request.match_info["ref"])
    stored = await coordinator.store.get_cluster(machine.cluster)
    return web.json_response(machine_view(machine, stored.spec if stored else None, detail=True))


class RoleBody(BaseModel):
    role: str | None = None


def _role(body: RoleBody, required: bool) -> Any:
    if body.role is None and not required:
        return None
    if body.role not in ROLES:
        raise InvalidDocument([Problem("role", f"must be one of {', '.join(ROLES)}")])
    return body.role


async def approve(request: web.Request) -> web.Response:
    coordinator = _c(request)
    body = await _body(request, RoleBody) if request.can_read_body else RoleBody()
    machine = await coordinator.machine(request.match_info["ref"])
    updated = await coordinator.approve(machine.id, _role(body, required=False))
    return web.json_response(machine_view(updated, None))


async def set_role(request: web.Request) -> web.Response:
    coordinator = _c(request)
    role = _role(await _body(request, RoleBody), required=True)
    machine = await coordinator.machine(request.match_info["ref"])
    return web.json_response(machine_view(await coordinator.set_role(machine.id, role), None))


async def delete_machine(request: web.Request) -> web.Response:
    coordinator = _c(request)
    machine = await coordinator.machine(request.match_info["ref"])
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    result = await coordinator.delete_machine(machine.id, force=force)
    if result is None:
        return web.json_response({"status": "removed", "id": machine.id})
    return web.json_response({"status": "resetting", "id": machine.id}, status=202)


async def upgrade_plan(request: web.Request) -> web.Response:
    """The dry run: the stored spec's upgrade, or (with a body) the one a new spec would start."""
    coordinator = _c(request)
    name = request.match_info["name"]
    text = await request.text() if request.can_read_body else ""
    spec = load_model(ClusterSpec, text, "request body") if text.strip() else None
    result = await coordinator.upgrade_plan(name, spec)
    return web.json_response(upgrade_plan_view(spec or (await coordinator.cluster(name)).spec,
                                               result))


async def pause(request: web.Request) -> web.Response:
    verb = request.match_info["verb"]
    if verb not in ("pause", "resume"):
        raise NotFound(f"no upgrade verb {verb}: pause or resume")
    paused = verb == "pause"
    stored = await _c(request).set_paused(request.match_info["name"], paused)
    return web.json_response({"cluster": stored.spec.name, "paused": paused})


async def drain_action(request: web.Request) -> web.Response:
    coordinator = _c(request)
    action = request.match_info["action"]
    if action not in ("retry", "skip", "force"):
        raise NotFound(f"no drain action {action}: retry, skip or force")
    machine = await coordinator.machine(request.match_info["ref"])
    updated = await coordinator.drain_action(machine.id, action)
    stored = await coordinator.store.get_cluster(updated.cluster)
    return web.json_response(machine_view(updated, stored.spec if stored else None))


async def events(request: web.Request) -> web.Response:
    query = request.query
    try:
        after_id = int(query.get("after_id", "0"))
        since = float(query["since"]) if "since" in query else None
        limit = min(int(query.get("limit", "1000")), 10000)
    except ValueError:
        return _error(400, "after_id and limit must be integers, since a unix time")
    found = await _c(request).store.list_events(
        cluster=query.get("cluster"), machine=query.get("machine"), since_id=after_id,
        since_time=since, limit=limit,
    )
    return web.json_response([event_view(e) for e in found])


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/healthz", healthz),
    ("GET", "/readyz", readyz),
    ("GET", "/openapi.json", openapi),
    ("POST", "/v1/agent/register", register),
    ("GET", "/v1/agent/machines/{machine_id}/assignment", assignment),
    ("POST", "/v1/agent/machines/{machine_id}/reports", report),
    ("POST", "/v1/agent/machines/{machine_id}/heartbeat", heartbeat),
    ("POST", "/v1/agent/machines/{machine_id}/precheck", precheck),
    ("GET", "/v1/artifacts/{name}", artifact),
    ("GET", "/v1/clusters", list_clusters),
    ("PUT", "/v1/clusters", apply_cluster),
    ("GET", "/v1/clusters/{name}", get_cluster),
    ("DELETE", "/v1/clusters/{name}", delete_cluster),
    ("GET", "/v1/clusters/{name}/status", cluster_status),
    ("POST", "/v1/clusters/{name}/join-tokens", create_join_token),
    ("GET", "/v1/machines", list_machines),
    ("GET", "/v1/machines/{ref}", get_machine),
    ("DELETE", "/v1/machines/{ref}", delete_machine),
    ("POST", "/v1/machines/{ref}/approve", approve),
    ("PUT", "/v1/machines/{ref}/role", set_role),
    ("POST", "/v1/clusters/{name}/upgrade-plan", upgrade_plan),
    ("POST", "/v1/clusters/{name}/upgrade/{verb}", pause),
    ("POST", "/v1/machines/{ref}/drain/{action}", drain_action),
    ("GET", "/v1/events", events),
]


def create_app(coordinator: Coordinator, admin_token: str, artifacts: Path) -> web.Application:
    app = web.Application(middlewares=[errors, admin_auth], client_max_size=4 * 1024 * 1024)
    app[COORDINATOR] = coordinator
    app[ADMIN_TOKEN] = admin_token
    app[ARTIFACTS] = artifacts
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    return app
