"""The operators' endpoints: clusters, tokens, machines, upgrades. Each handler parses the
request, calls one service operation and renders its answer."""

from __future__ import annotations

from aiohttp import web

from coordinator.api.bodies import (
    AdminTokenBody,
    ApplyQuery,
    ApproveBody,
    DeleteQuery,
    JoinTokenBody,
    LabelsBody,
    MoveTargetBody,
    ReissueBody,
    RenderQuery,
    RoleBody,
    StatusQuery,
)
from coordinator.api.context import (
    HAND_OUT_AUDIT,
    PRESENTATION,
    bearer,
    body,
    query,
    service,
    text,
)
from coordinator.api.views import (
    admin_token_view,
    cluster_status_view,
    cluster_view,
    etcd_snapshot_view,
    join_token_view,
    machine_view,
    remediation_view,
    removed_view,
    rendering_view,
    upgrade_plan_view,
)
from coordinator.domain.errors import NotFound
from coordinator.domain.machines.tokens import parse_duration
from coordinator.domain.model import POOL, Machine, first_manager
from coordinator.domain.rollout.remedies import DRAIN_ACTIONS
from coordinator.domain.specs.specs import load_spec
from coordinator.domain.views.machinelist import parse_query
from nodeagent.wire import joinstring
from nodeagent.wire.digest import content_digest
from nodeagent.wire.validation import InvalidDocument, Problem


async def apply_cluster(request: web.Request) -> web.Response:
    asked = query(request, ApplyQuery)
    spec = load_spec(await text(request), "request body")
    applied = await service(request).admin.apply_cluster(spec, asked.allow_downgrade)
    return web.json_response({**cluster_view(applied.stored), "changed": applied.changed,
                              "outcome": applied.outcome, "was_paused": applied.was_paused,
                              "warnings": list(applied.warnings)})


async def list_clusters(request: web.Request) -> web.Response:
    return web.json_response([cluster_view(c) for c in await service(request).queries.clusters()])


async def get_cluster(request: web.Request) -> web.Response:
    stored = await service(request).queries.cluster(request.match_info["name"])
    return web.json_response(cluster_view(stored))


async def delete_cluster(request: web.Request) -> web.Response:
    await service(request).admin.delete_cluster(request.match_info["name"])
    return web.json_response({"status": "deleting"}, status=202)


async def cluster_status(request: web.Request) -> web.Response:
    """?machines=false leaves out every machine's view: the dashboard pages them from
    GET /v1/machines, and 10,000 of them would be most of the answer's cost."""
    asked = query(request, StatusQuery)
    c = service(request)
    status = await c.queries.cluster_status(request.match_info["name"], asked.machines)
    moved = c.pivots.pivot if c.pivots.moved else None
    return web.json_response({**cluster_status_view(status, machines=asked.machines),
                              "moved": None if moved is None else moved.to_json()})


async def create_join_token(request: web.Request) -> web.Response:
    """A cluster's join token, or the pool's (the route without a cluster's name)."""
    wanted = await body(request, JoinTokenBody, optional=True)
    secret, token = await service(request).admin.create_join_token(
        request.match_info.get("name", POOL), parse_duration(wanted.ttl) or None,
        wanted.max_uses, wanted.auto_approve)
    presentation = request.app[PRESENTATION]
    join = joinstring.make(presentation.advertise_url, secret, presentation.ca_pem)
    return web.json_response({**join_token_view(token, token.created_at), "token": secret,
                              "join": join},
                             status=201)


async def list_join_tokens(request: web.Request) -> web.Response:
    """A cluster's join tokens, or every one."""
    return await _join_tokens(request, request.match_info.get("name"))


async def list_pool_join_tokens(request: web.Request) -> web.Response:
    return await _join_tokens(request, POOL)


async def _join_tokens(request: web.Request, cluster: str | None) -> web.Response:
    tokens = await service(request).queries.join_tokens(cluster)
    now = service(request).clock()
    return web.json_response([join_token_view(t, now) for t in tokens])


async def revoke_join_token(request: web.Request) -> web.Response:
    token = await service(request).access.revoke_join_token(request.match_info["id"])
    return web.json_response(join_token_view(token, service(request).clock()))


async def create_admin_token(request: web.Request) -> web.Response:
    wanted = await body(request, AdminTokenBody)
    secret, token = await service(request).access.create_admin_token(wanted.name, wanted.role)
    return web.json_response({**admin_token_view(token), "token": secret}, status=201)


async def list_admin_tokens(request: web.Request) -> web.Response:
    tokens = await service(request).queries.admin_tokens()
    return web.json_response([admin_token_view(t) for t in tokens])


async def revoke_admin_token(request: web.Request) -> web.Response:
    token = await service(request).access.revoke_admin_token(request.match_info["id"])
    return web.json_response(admin_token_view(token))


async def whoami(request: web.Request) -> web.Response:
    token = await service(request).access.authorize_admin(bearer(request), changes=False)
    return web.json_response(admin_token_view(token))


async def list_machines(request: web.Request) -> web.Response:
    """One page of the machines the query selects (domain/views/machinelist.py has the rules)."""
    c = service(request)
    wanted = parse_query(request.query.items())
    page = await c.queries.machine_page(wanted)
    now = c.clock()
    return web.json_response({
        "machines": [machine_view(m, page.specs.get(m.cluster), now=now,
                                  peers=page.managers.get(m.cluster, ()))
                     for m in page.machines],
        "total": page.total, "offset": wanted.offset, "limit": wanted.limit})


async def _machine(request: web.Request) -> Machine:
    """The machine the path names (id or hostname), in the query's cluster when one is given:
    a hostname two clusters have needs it."""
    return await service(request).queries.machine(request.match_info["ref"],
                                                  request.query.get("cluster"))


async def removed_machines(request: web.Request) -> web.Response:
    """Deleted machines by id or hostname (query: ref, cluster), the last removed first."""
    ref = request.query.get("ref")
    if not ref:
        raise InvalidDocument([Problem("ref", "required: a deleted machine's id or hostname")])
    found = await service(request).queries.removed(ref, request.query.get("cluster"))
    return web.json_response([removed_view(r) for r in found])


async def get_machine(request: web.Request) -> web.Response:
    c = service(request)
    machine = await _machine(request)
    peers = (await c.queries.machines(machine.cluster))[0]
    first = first_manager(peers, leaving=True)
    return web.json_response({**machine_view(machine, await c.queries.spec_of(machine),
                                             detail=True, now=c.clock(), peers=peers),
                              "first_manager": first is not None and first.id == machine.id})


async def approve(request: web.Request) -> web.Response:
    c = service(request)
    wanted = await body(request, ApproveBody, optional=True)
    machine = await _machine(request)
    approved = await c.admin.approve(machine.id, wanted.role, wanted.labels, wanted.interface,
                                     wanted.ip)
    return web.json_response(machine_view(approved, None))


async def label(request: web.Request) -> web.Response:
    c = service(request)
    wanted = await body(request, LabelsBody)
    machine = await _machine(request)
    return web.json_response(machine_view(await c.admin.label(machine.id, wanted.put,
                                                              wanted.remove), None))


async def set_role(request: web.Request) -> web.Response:
    c = service(request)
    role = (await body(request, RoleBody)).role
    if role is None:
        raise InvalidDocument([Problem("role", "required")])
    machine = await _machine(request)
    return web.json_response(machine_view(await c.admin.set_role(machine.id, role), None))


async def revoke_machine_credential(request: web.Request) -> web.Response:
    c = service(request)
    machine = await _machine(request)
    return web.json_response(machine_view(await c.admin.revoke_credential(machine.id), None))


async def reissue_machine_credential(request: web.Request) -> web.Response:
    """A one-use join string bound to the machine, shown in this answer only."""
    c = service(request)
    wanted = await body(request, ReissueBody, optional=True)
    machine = await _machine(request)
    secret, updated = await c.admin.reissue_credential(machine.id, parse_duration(wanted.ttl))
    presentation = request.app[PRESENTATION]
    join = joinstring.make(presentation.advertise_url, secret, presentation.ca_pem)
    return web.json_response({**machine_view(updated, None), "join": join}, status=201)


async def delete_machine(request: web.Request) -> web.Response:
    c = service(request)
    asked = query(request, DeleteQuery)
    machine = await _machine(request)
    if await c.admin.delete_machine(machine.id, asked.force, asked.skip_reset) is None:
        return web.json_response({"status": "removed", "id": machine.id})
    return web.json_response({"status": "resetting", "id": machine.id}, status=202)


async def upgrade_plan(request: web.Request) -> web.Response:
    """The dry run: the stored spec's upgrade (GET), or the one a new spec in a POST's body
    would start."""
    asked = query(request, ApplyQuery)
    raw = await text(request) if request.method == "POST" else ""
    spec = load_spec(raw, "request body") if raw.strip() else None
    target, plan = await service(request).queries.upgrade_plan(request.match_info["name"], spec,
                                                               asked.allow_downgrade)
    return web.json_response(upgrade_plan_view(target, plan))


async def render(request: web.Request) -> web.Response:
    """What machines would run: the stored spec (GET), or a new spec in a POST's body, which
    need not be stored yet."""
    asked = query(request, RenderQuery)
    raw = await text(request) if request.method == "POST" else ""
    spec = load_spec(raw, "request body") if raw.strip() else None
    rendering = await service(request).queries.rendering(
        request.match_info["name"], spec, asked.fleet, asked.machine, asked.phase)
    return web.json_response(rendering_view(rendering))


async def remediation_plan(request: web.Request) -> web.Response:
    """What the cluster's health policy would do now: its unhealthy machines, the ones it
    replaces and what holds it back."""
    spec, found, plan = await service(request).queries.remediation_plan(
        request.match_info["name"])
    return web.json_response(remediation_view(spec, found, plan))


async def provision(request: web.Request) -> web.Response:
    stored, changed = await service(request).admin.provision(request.match_info["name"])
    return web.json_response({"cluster": stored.spec.name, "provisioned": changed,
                              "held": stored.spec.settings.provision.held})


async def pause(request: web.Request) -> web.Response:
    verb = request.match_info["verb"]
    if verb not in ("pause", "resume"):
        raise NotFound(f"no upgrade verb {verb}: pause or resume")
    paused = verb == "pause"
    stored = await service(request).admin.set_paused(request.match_info["name"], paused)
    return web.json_response({"cluster": stored.spec.name, "paused": paused})


async def drain_action(request: web.Request) -> web.Response:
    c = service(request)
    action = request.match_info["action"]
    if action not in DRAIN_ACTIONS:
        raise NotFound(f"no drain action {action}: retry, skip or force")
    machine = await _machine(request)
    updated = await c.admin.drain_action(machine.id, action)
    return web.json_response(machine_view(updated, await c.queries.spec_of(updated)))


async def retry_items(request: web.Request) -> web.Response:
    c = service(request)
    machine = await _machine(request)
    updated = await c.admin.retry_items(machine.id)
    return web.json_response(machine_view(updated, await c.queries.spec_of(updated),
                                          now=c.clock()))


async def get_move_target(request: web.Request) -> web.Response:
    target = await service(request).move_targets.current()
    return web.json_response(None if target is None else target.model_dump(mode="json"))


async def set_move_target(request: web.Request) -> web.Response:
    wanted = await body(request, MoveTargetBody)
    target = await service(request).move_targets.set(wanted.all_urls, wanted.ca_pin)
    return web.json_response(target.model_dump(mode="json"))


async def clear_move_target(request: web.Request) -> web.Response:
    cleared = await service(request).move_targets.clear()
    return web.json_response(None if cleared is None else cleared.model_dump(mode="json"))


async def list_etcd_snapshots(request: web.Request) -> web.Response:
    snapshots = await service(request).etcd_snapshots.listed(request.match_info["name"])
    return web.json_response([etcd_snapshot_view(s) for s in snapshots])


async def download_etcd_snapshot(request: web.Request) -> web.StreamResponse:
    """A snapshot's bytes, unsealed: they hold every Secret of the cluster, so a POST (admin
    tokens only, audited), as a backup is. Its SHA-256 comes first (Content-Digest) for the
    client to check what it wrote."""
    snapshot, chunks = await service(request).etcd_snapshots.opened(
        request.match_info["name"], request.match_info["id"])
    await request[HAND_OUT_AUDIT]()
    response = web.StreamResponse(headers={
        "Content-Type": "application/octet-stream", "Content-Length": str(snapshot.size),
        "Content-Digest": content_digest(bytes.fromhex(snapshot.sha256)),
        "Content-Disposition": f'attachment; filename="etcd-{snapshot.cluster}-{snapshot.id}.db"'})
    await response.prepare(request)
    try:
        async for chunk in chunks:
            await response.write(chunk)
    except ConnectionResetError:  # the client hung up: nothing more to send it
        return response
    await response.write_eof()
    return response
