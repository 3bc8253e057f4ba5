"""Routes, authentication and error mapping. Handlers stay thin: the service does the work."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from coordinator.api.bodies import AdminTokenBody, JoinTokenBody, RoleBody
from coordinator.api.openapi import DRY_RUNS, openapi_document
from coordinator.api.views import (
    admin_token_view,
    cluster_view,
    event_view,
    join_token_view,
    machine_view,
    upgrade_plan_view,
)
from coordinator.domain.errors import Conflict, Forbidden, NotFound, TooManyRequests, Unauthorized
from coordinator.domain.model import ClusterSpec
from coordinator.domain.ratelimit import RateLimiter
from coordinator.domain.records import CredentialOwner, Event
from coordinator.domain.status import HISTORY_KINDS, History, post_deploy, rollout, stages
from coordinator.domain.tokens import parse_duration
from coordinator.metrics import CONTENT_TYPE, METRICS, record_item, record_request
from coordinator.service.coordinator import Coordinator
from nodeagent import joinstring
from nodeagent.client import generation_tag
from nodeagent.protocol import (
    ItemReport,
    PrecheckReport,
    RegisterRequest,
    RotateRequest,
    RotateResponse,
)
from nodeagent.validation import InvalidDocument, Problem, load_model, problems_from

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Presentation:
    """How this coordinator presents itself: the URL agents use (it goes into join strings),
    its CA certificate (None when serving plain HTTP), and the registration rate limit."""

    advertise_url: str
    ca_pem: str | None = None
    register_rate: float = 5.0  # per second and client address; 0 turns the limit off
    register_burst: int = 50


COORDINATOR = web.AppKey("coordinator", Coordinator)
PRESENTATION = web.AppKey("presentation", Presentation)
REGISTER_LIMIT = web.AppKey("register_limit", RateLimiter)
ARTIFACTS = web.AppKey("artifacts", Path)
MAX_WAIT_SECONDS = 60.0
MAX_BODY_BYTES = 4 * 1024 * 1024
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/v1/ca.crt",
                        "/v1/agent/register", "/metrics", "/", "/ui/", "/ui/{name}"})
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DASHBOARD = Path(__file__).with_name("dashboard")
STREAM_KEEPALIVE_SECONDS = 15.0
STREAM_PAGE = 500
CLOSING = web.AppKey("closing", asyncio.Event)


def _error(status: int, message: str, problems: list[Problem] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if problems:
        body["problems"] = [{"path": p.path, "line": p.line, "message": p.message}
                            for p in problems]
    return web.json_response(body, status=status)


STATUSES = ((Unauthorized, 401), (Forbidden, 403), (NotFound, 404), (Conflict, 409))
MAPPED = (InvalidDocument, TooManyRequests, web.HTTPRequestEntityTooLarge,
          *(kind for kind, _ in STATUSES))


def _mapped(exc: Exception) -> web.Response:
    """The answer to an error the service raised."""
    if isinstance(exc, InvalidDocument):
        return _error(422, "invalid document: " + "; ".join(p.render() for p in exc.problems),
                      exc.problems)
    if isinstance(exc, TooManyRequests):
        response = _error(429, str(exc))
        response.headers["Retry-After"] = str(math.ceil(exc.retry_after))
        return response
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return _error(413, f"request body larger than {MAX_BODY_BYTES} bytes")
    status = next(code for kind, code in STATUSES if isinstance(exc, kind))
    return _error(status, str(exc))


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every request: its latency by endpoint (the route's pattern, never the raw path:
    bounded labels), errors mapped to answers, admin routes authorized. One middleware, not
    three: each layer costs every request a coroutine and aiohttp's wrapper (issue 8)."""
    started = time.perf_counter()
    code = 500
    try:
        try:
            resource = request.match_info.route.resource  # OPEN_PATHS are route patterns
            path = request.path
            if (resource.canonical if resource else path) in OPEN_PATHS or \
                    path.startswith(("/v1/agent/", "/v1/artifacts/")):
                response = await handler(request)  # agents authenticate in their handlers
            else:
                response = await _admin(request, handler)
        except MAPPED as exc:
            response = _mapped(exc)
        code = response.status
        return response
    except web.HTTPException as exc:
        code = exc.status
        raise
    finally:
        resource = request.match_info.route.resource
        endpoint = resource.canonical if resource is not None else "unmatched"
        record_request(request.method, endpoint, code, time.perf_counter() - started)


def _bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token")
    return token.strip()


async def _admin(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Admin routes need an admin token (read-only ones may only read, or send a dry run), and
    every change they make is audited."""
    path = request.path
    resource = request.match_info.route.resource
    changes = request.method not in READ_METHODS and \
        (request.method.lower(), resource.canonical if resource else path) not in DRY_RUNS
    token = await _c(request).access.authorize_admin(_bearer(request), changes)
    response = await handler(request)
    if changes and response.status < 400:
        await _c(request).audit(f"{token.name} ({token.id})", request.method, path,
                                response.status, request.match_info.get("name", ""))
    return response


async def _text(request: web.Request) -> str:
    try:
        return (await request.read()).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidDocument([Problem("", f"body is not UTF-8 text (byte {exc.start})")]) \
            from None


async def _body(request: web.Request, model: type[M], optional: bool = False) -> M:
    """The validated JSON body; with optional, an empty body means every field's default."""
    text = await _text(request)
    if optional and not text.strip():
        return model()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidDocument([Problem("", f"body is not valid JSON: {exc.msg}", exc.lineno)]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidDocument(problems_from(exc, None, data)) from None


def _c(request: web.Request) -> Coordinator:
    return request.app[COORDINATOR]


async def _agent(request: web.Request) -> CredentialOwner:
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


async def ca_certificate(request: web.Request) -> web.Response:
    """Public: agents fetch it once and check it against the hash in their join string."""
    pem = request.app[PRESENTATION].ca_pem
    if pem is None:
        raise NotFound("this coordinator serves plain HTTP and has no CA")
    return web.Response(text=pem, content_type="application/x-pem-file")


# -- agent --------------------------------------------------------------------------------

async def register(request: web.Request) -> web.Response:
    limiter = request.app.get(REGISTER_LIMIT)
    if limiter is not None:
        wait = limiter.wait(request.remote or "", time.monotonic())
        if wait:
            raise TooManyRequests("too many registrations from this address; retry later", wait)
    response = await _c(request).register(await _body(request, RegisterRequest))
    return web.json_response(response.model_dump(mode="json"), status=201)


async def assignment(request: web.Request) -> web.Response:
    machine = await _agent(request)
    try:
        after = int(request.query.get("after", "0"))
        wait = min(float(request.query.get("wait", "0")), MAX_WAIT_SECONDS)
    except ValueError:
        return _error(400, "after must be an integer and wait a number of seconds")
    METRICS.poll_opened(machine.machine_id)
    try:
        result = await _c(request).wait_assignment(machine.machine_id, after, wait)
    finally:
        METRICS.poll_closed(machine.machine_id)
    if result is None:  # nothing new: the generation is still `after`
        if any(tag.value == str(after) for tag in request.if_none_match or ()):
            return web.Response(status=304, headers={"ETag": generation_tag(after)})
        result = await _c(request).current_assignment(machine.machine_id)
    return web.json_response(result.model_dump(mode="json", by_alias=True),
                             headers={"ETag": generation_tag(result.generation)})


async def report(request: web.Request) -> web.Response:
    machine = await _agent(request)
    body = await _body(request, ItemReport)
    await _c(request).report(machine.machine_id, body)
    if body.finished_at is not None:
        record_item(machine.cluster, body.phase, body.status, body.finished_at - body.started_at)
    return web.json_response({"status": "recorded"})


async def precheck(request: web.Request) -> web.Response:
    machine = await _agent(request)
    await _c(request).update_precheck(machine.machine_id, await _body(request, PrecheckReport))
    return web.json_response({"status": "recorded"})


async def rotate_credential(request: web.Request) -> web.Response:
    machine = await _agent(request)
    body = await _body(request, RotateRequest)
    expires = await _c(request).rotate_credential(machine.machine_id, body.credential)
    return web.json_response(RotateResponse(credential_expires_at=expires).model_dump(mode="json"))


async def heartbeat(request: web.Request) -> web.Response:
    machine = await _agent(request)
    await _c(request).heartbeat(machine)
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
    text = await _text(request)
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
    body = await _body(request, JoinTokenBody, optional=True)
    cluster = request.match_info["name"]
    secret, token = await _c(request).create_join_token(
        cluster, parse_duration(body.ttl) or None, body.max_uses)
    settings = request.app[PRESENTATION]
    join = joinstring.make(settings.advertise_url, secret, settings.ca_pem)
    return web.json_response({**join_token_view(token), "token": secret, "join": join},
                             status=201)


async def list_join_tokens(request: web.Request) -> web.Response:
    cluster = request.match_info.get("name")
    if cluster is not None:
        await _c(request).cluster(cluster)
    tokens = await _c(request).store.list_join_tokens(cluster)
    return web.json_response([join_token_view(t) for t in tokens])


async def revoke_join_token(request: web.Request) -> web.Response:
    token = await _c(request).access.revoke_join_token(request.match_info["id"])
    return web.json_response(join_token_view(token))


async def create_admin_token(request: web.Request) -> web.Response:
    body = await _body(request, AdminTokenBody)
    secret, token = await _c(request).access.create_admin_token(body.name, body.role)
    return web.json_response({**admin_token_view(token), "token": secret}, status=201)


async def list_admin_tokens(request: web.Request) -> web.Response:
    return web.json_response([admin_token_view(t)
                              for t in await _c(request).store.list_admin_tokens()])


async def revoke_admin_token(request: web.Request) -> web.Response:
    token = await _c(request).access.revoke_admin_token(request.match_info["id"])
    return web.json_response(admin_token_view(token))


async def cluster_status(request: web.Request) -> web.Response:
    coordinator = _c(request)
    stored = await coordinator.cluster(request.match_info["name"])
    machines = await coordinator.store.list_machines(stored.spec.name)
    counts: dict[str, int] = {}
    for machine in machines:
        counts[machine.state.value] = counts.get(machine.state.value, 0) + 1
    history = History(await _all_events(coordinator, cluster=stored.spec.name, kinds=HISTORY_KINDS))
    now = coordinator.clock()
    return web.json_response({
        "cluster": stored.spec.name,
        "release": stored.spec.release,
        "generation": stored.generation,
        "paused": stored.spec.settings.upgrade.paused,
        "post_deploy": asdict(post_deploy(stored.spec, machines)),
        "counts": counts,
        "stages": [asdict(s) for s in stages(stored.spec, stored.created_at, machines, history, now)],
        "rollout": asdict(rollout(stored.spec, machines, history, now)),
        "machines": [machine_view(m, stored.spec, now=now) for m in machines],
    })


async def _all_events(coordinator: Coordinator, **filters: Any) -> list[Event]:
    found: list[Event] = []
    while page := await coordinator.store.list_events(since_id=found[-1].id if found else 0,
                                                      limit=10000, **filters):
        found += page
    return found


async def list_machines(request: web.Request) -> web.Response:
    coordinator = _c(request)
    cluster = request.query.get("cluster")
    specs = {c.spec.name: c.spec for c in await coordinator.store.list_clusters()}
    machines = await coordinator.store.list_machines(cluster)
    now = coordinator.clock()
    return web.json_response([machine_view(m, specs.get(m.cluster), now=now) for m in machines])


async def get_machine(request: web.Request) -> web.Response:
    coordinator = _c(request)
    machine = await coordinator.machine(request.match_info["ref"])
    stored = await coordinator.store.get_cluster(machine.cluster)
    return web.json_response(machine_view(machine, stored.spec if stored else None, detail=True,
                                          now=coordinator.clock()))


async def approve(request: web.Request) -> web.Response:
    coordinator = _c(request)
    body = await _body(request, RoleBody, optional=True)
    machine = await coordinator.machine(request.match_info["ref"])
    updated = await coordinator.approve(machine.id, body.role)
    return web.json_response(machine_view(updated, None))


async def set_role(request: web.Request) -> web.Response:
    coordinator = _c(request)
    role = (await _body(request, RoleBody)).role
    if role is None:
        raise InvalidDocument([Problem("role", "required")])
    machine = await coordinator.machine(request.match_info["ref"])
    return web.json_response(machine_view(await coordinator.set_role(machine.id, role), None))


async def revoke_machine_credential(request: web.Request) -> web.Response:
    coordinator = _c(request)
    machine = await coordinator.machine(request.match_info["ref"])
    return web.json_response(machine_view(await coordinator.revoke_credential(machine.id), None))


async def delete_machine(request: web.Request) -> web.Response:
    coordinator = _c(request)
    machine = await coordinator.machine(request.match_info["ref"])
    force = request.query.get("force", "false").lower() in ("1", "true", "yes")
    result = await coordinator.delete_machine(machine.id, force=force)
    if result is None:
        return web.json_response({"status": "removed", "id": machine.id})
    return web.json_response({"status": "resetting", "id": machine.id}, status=202)


async def upgrade_plan(request: web.Request) -> web.Response:
    """The dry run: the stored spec's upgrade (GET), or the one a new spec in a POST's body
    would start."""
    coordinator = _c(request)
    name = request.match_info["name"]
    text = await _text(request) if request.method == "POST" else ""
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


async def _event_filters(request: web.Request) -> dict[str, Any]:
    """cluster; machine (id or hostname); kind (comma-separated); since (unix time);
    after_id; limit; order (asc, or desc for the newest first)."""
    query = request.query
    try:
        filters: dict[str, Any] = {
            "cluster": query.get("cluster"),
            "since_id": int(query.get("after_id", "0")),
            "since_time": float(query["since"]) if "since" in query else None,
            "limit": min(int(query.get("limit", "1000")), 10000),
        }
    except ValueError:
        raise InvalidDocument([Problem("query", "after_id and limit must be integers, "
                                                "since a unix time in seconds")]) from None
    if query.get("order", "asc") not in ("asc", "desc"):
        raise InvalidDocument([Problem("order", "must be asc or desc")])
    filters["newest_first"] = query.get("order") == "desc"
    if "kind" in query:
        filters["kinds"] = [k for k in query["kind"].split(",") if k]
    if "machine" in query:
        ref = query["machine"]
        with contextlib.suppress(NotFound):  # a removed machine's id still finds its history
            ref = (await _c(request).machine(ref)).id
        filters["machine"] = ref
    return filters


async def events(request: web.Request) -> web.Response:
    found = await _c(request).store.list_events(**await _event_filters(request))
    return web.json_response([event_view(e) for e in found])


async def event_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: each new event as it is recorded (the same filters as /v1/events).
    Starts after `after_id`, or the Last-Event-ID a reconnecting client sends, or else after
    the newest event now: a stream shows what happens from now on."""
    coordinator = _c(request)
    filters = await _event_filters(request)
    filters.update(limit=STREAM_PAGE, newest_first=False)
    resume = request.headers.get("Last-Event-ID", "")
    if resume.isdigit():
        filters["since_id"] = int(resume)
    elif "after_id" not in request.query:
        newest = await coordinator.store.list_events(newest_first=True, limit=1)
        filters["since_id"] = newest[0].id if newest else 0
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    await response.write(b": stream open\n\n")
    closing = request.app[CLOSING]
    with contextlib.suppress(ConnectionError):
        while not closing.is_set():
            changed = coordinator.notifier.changes()  # subscribe before reading
            page = await coordinator.store.list_events(**filters)
            for event in page:
                data = json.dumps(event_view(event), separators=(",", ":"))
                await response.write(f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n"
                                     .encode())
                filters["since_id"] = event.id
            if len(page) == STREAM_PAGE:
                continue
            woken = asyncio.ensure_future(changed.wait())
            stop = asyncio.ensure_future(closing.wait())
            done, _ = await asyncio.wait({woken, stop}, timeout=STREAM_KEEPALIVE_SECONDS,
                                         return_when=asyncio.FIRST_COMPLETED)
            woken.cancel()
            stop.cancel()
            if not done:
                await response.write(b": keepalive\n\n")
    return response


async def metrics(request: web.Request) -> web.Response:
    counts = await _c(request).store.count_machines()
    return web.Response(body=METRICS.exposition(counts), headers={"Content-Type": CONTENT_TYPE})


async def dashboard_root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/index.html")


async def dashboard(request: web.Request) -> web.StreamResponse:
    """The dashboard's static files (HTML, JS, CSS shipped in the package; no build step)."""
    name = request.match_info["name"]
    files = {p.name: p for p in DASHBOARD.iterdir() if p.is_file()}
    if name not in files:
        raise NotFound(f"no dashboard file {name}")
    return web.FileResponse(files[name], headers={"Cache-Control": "no-cache"})


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/healthz", healthz),
    ("GET", "/readyz", readyz),
    ("GET", "/openapi.json", openapi),
    ("GET", "/v1/ca.crt", ca_certificate),
    ("POST", "/v1/agent/register", register),
    ("GET", "/v1/agent/machines/{machine_id}/assignment", assignment),
    ("POST", "/v1/agent/machines/{machine_id}/reports", report),
    ("POST", "/v1/agent/machines/{machine_id}/heartbeat", heartbeat),
    ("POST", "/v1/agent/machines/{machine_id}/precheck", precheck),
    ("POST", "/v1/agent/machines/{machine_id}/credential", rotate_credential),
    ("GET", "/v1/artifacts/{name}", artifact),
    ("GET", "/v1/clusters", list_clusters),
    ("PUT", "/v1/clusters", apply_cluster),
    ("GET", "/v1/clusters/{name}", get_cluster),
    ("DELETE", "/v1/clusters/{name}", delete_cluster),
    ("GET", "/v1/clusters/{name}/status", cluster_status),
    ("POST", "/v1/clusters/{name}/join-tokens", create_join_token),
    ("GET", "/v1/clusters/{name}/join-tokens", list_join_tokens),
    ("GET", "/v1/join-tokens", list_join_tokens),
    ("DELETE", "/v1/join-tokens/{id}", revoke_join_token),
    ("GET", "/v1/admin-tokens", list_admin_tokens),
    ("POST", "/v1/admin-tokens", create_admin_token),
    ("DELETE", "/v1/admin-tokens/{id}", revoke_admin_token),
    ("GET", "/v1/machines", list_machines),
    ("GET", "/v1/machines/{ref}", get_machine),
    ("DELETE", "/v1/machines/{ref}", delete_machine),
    ("POST", "/v1/machines/{ref}/approve", approve),
    ("PUT", "/v1/machines/{ref}/role", set_role),
    ("GET", "/v1/clusters/{name}/upgrade-plan", upgrade_plan),
    ("POST", "/v1/clusters/{name}/upgrade-plan", upgrade_plan),
    ("POST", "/v1/clusters/{name}/upgrade/{verb}", pause),
    ("POST", "/v1/machines/{ref}/drain/{action}", drain_action),
    ("POST", "/v1/machines/{ref}/revoke", revoke_machine_credential),
    ("GET", "/v1/events", events),
    ("GET", "/v1/events/stream", event_stream),
    ("GET", "/metrics", metrics),
    ("GET", "/", dashboard_root),
    ("GET", "/ui/", dashboard_root),
    ("GET", "/ui/{name}", dashboard),
]


def create_app(coordinator: Coordinator, artifacts: Path, settings: Presentation) -> web.Application:
    app = web.Application(middlewares=[middleware], client_max_size=MAX_BODY_BYTES)
    app[CLOSING] = asyncio.Event()
    app[COORDINATOR] = coordinator
    app[PRESENTATION] = settings
    app[ARTIFACTS] = artifacts
    if settings.register_rate > 0:
        app[REGISTER_LIMIT] = RateLimiter(settings.register_rate, settings.register_burst)
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    app.on_shutdown.append(_close_streams)
    return app


async def _close_streams(app: web.Application) -> None:
    """Open event streams end at shutdown instead of holding it up."""
    app[CLOSING].set()
