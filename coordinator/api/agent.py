"""The agents' endpoints: each request carries the machine's own credential."""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from coordinator.api.context import (
    ARTIFACT_LINKS,
    ARTIFACTS,
    REGISTER_LIMIT,
    REGISTER_TOTAL_LIMIT,
    bearer,
    body,
    error,
    refused,
    service,
)
from coordinator.api.views import etcd_snapshot_view
from coordinator.domain.errors import Conflict, Forbidden, TooManyRequests, Unauthorized
from coordinator.domain.etcdsnapshots import UploadRefused
from coordinator.domain.machines.refusals import REGISTRATION
from coordinator.domain.records import CredentialOwner
from coordinator.edge.ratelimit import RateLimiter
from coordinator.metrics import METRICS, record_item
from coordinator.service.artifacts import locate
from nodeagent.wire.heartbeat import POLL_COUNTED, POLL_HEARTBEAT
from nodeagent.wire.protocol import (
    ItemReport,
    KubeconfigRefresh,
    PrecheckReport,
    RegisterRequest,
    RotateRequest,
    RotateResponse,
)
from nodeagent.wire.validation import InvalidDocument, Problem

MAX_WAIT_SECONDS = 60.0
# A registration without the join token in its header (agents before it) is read up to this:
# a real one is a few KiB.
LEGACY_REGISTRATION_BYTES = 64 * 1024


async def _agent(request: web.Request) -> CredentialOwner:
    return await service(request).credentials.authenticate(request.match_info["machine_id"],
                                                           bearer(request))


async def register(request: web.Request) -> web.Response:
    """The join token comes first, in the Authorization header: a stranger's registration is
    refused before its body is read (it is a 4 MiB JSON document at worst, ~0.12 s of CPU to
    parse and validate). Registrations that pass are also held to a budget for all addresses
    together. Agents from before the header send the token only in the body: theirs is read
    only up to LEGACY_REGISTRATION_BYTES."""
    now = time.monotonic()
    _limit(request.app.get(REGISTER_LIMIT), request.remote or "", now,
           "too many registrations from this address; retry later")
    token = _join_token(request)
    try:
        if token is not None:
            await service(request).access.known_join_token(token)
        if (moved := service(request).pivots.refused_registration()) is not None:
            raise Conflict(moved)
        _limit(request.app.get(REGISTER_TOTAL_LIMIT), "", now,
               "too many registrations at once; retry later")
        if token is None and (request.content_length or LEGACY_REGISTRATION_BYTES + 1) \
                > LEGACY_REGISTRATION_BYTES:
            return error(413, "a registration without its join token in the Authorization "
                         f"header is at most {LEGACY_REGISTRATION_BYTES} bytes, with a "
                         "Content-Length")
        registration = await body(request, RegisterRequest)
        if token is not None:
            registration = registration.model_copy(update={"join_token": token})
        response = await service(request).agents.register(registration)
    except (Unauthorized, Forbidden, Conflict) as exc:  # counted, and logged (a flood: once)
        refused(request, exc, REGISTRATION)
        raise
    return web.json_response(response.model_dump(mode="json"), status=201)


def _join_token(request: web.Request) -> str | None:
    """The join token of the Authorization header; None when there is none (an old agent)."""
    return bearer(request) if "Authorization" in request.headers else None


def _limit(limiter: RateLimiter | None, key: str, now: float, message: str) -> None:
    if limiter is not None and (wait := limiter.wait(key, now)):
        raise TooManyRequests(message, wait)


async def assignment(request: web.Request) -> web.Response:
    """The long-poll of the machine's assignment. Its arrival counts as a heartbeat, so an
    agent that is told so (POLL_HEARTBEAT) needs no second connection for heartbeats."""
    machine = await _agent(request)
    try:
        after = int(request.query.get("after", "0"))
        wait = min(float(request.query.get("wait", "0")), MAX_WAIT_SECONDS)
    except ValueError:
        return error(400, "after must be an integer and wait a number of seconds")
    if not 0 <= wait <= MAX_WAIT_SECONDS:  # nan and negative waits compare false
        raise InvalidDocument([Problem("wait", f"must be from 0 to {MAX_WAIT_SECONDS:g} "
                                               "seconds")])
    held = [tag.value for tag in request.if_none_match or ()]
    service(request).heartbeats.beat(machine)  # the poll is its heartbeat (wire/heartbeat.py)
    METRICS.poll_opened(machine.machine_id)
    try:
        version, result = await service(request).agents.wait_assignment(
            machine.machine_id, after, held, wait)
    finally:
        METRICS.poll_closed(machine.machine_id)
    headers = {"ETag": version.tag, POLL_HEARTBEAT: POLL_COUNTED}
    if result is None:  # nothing new: the agent's tag is current
        return web.Response(status=304, headers=headers)
    return web.json_response(result.model_dump(mode="json", by_alias=True), headers=headers)


async def report(request: web.Request) -> web.Response:
    machine = await _agent(request)
    item = await body(request, ItemReport)
    await service(request).agents.report(machine.machine_id, item)
    if item.finished_at is not None:
        record_item(machine.cluster, item.phase, item.status, item.finished_at - item.started_at)
    return web.json_response({"status": "recorded"})


async def precheck(request: web.Request) -> web.Response:
    machine = await _agent(request)
    await service(request).agents.update_precheck(machine.machine_id,
                                                  await body(request, PrecheckReport))
    return web.json_response({"status": "recorded"})


async def refresh_kubeconfig(request: web.Request) -> web.Response:
    machine = await _agent(request)
    taken = await service(request).agents.refresh_kubeconfig(
        machine.machine_id, await body(request, KubeconfigRefresh))
    return web.json_response({"taken": taken})


async def rotate_credential(request: web.Request) -> web.Response:
    machine = await _agent(request)
    rotate = await body(request, RotateRequest)
    expires = await service(request).agents.rotate_credential(machine.machine_id, rotate.credential)
    return web.json_response(RotateResponse(credential_expires_at=expires).model_dump(mode="json"))


async def etcd_snapshot(request: web.Request) -> web.Response:
    """The etcd snapshot of a manager's item (its etcdSnapshotFrom), streamed into the store;
    refused before its body is read when the machine, the item or the announced size and
    SHA-256 do not qualify (domain/etcdsnapshots.py)."""
    machine = await _agent(request)
    if (moved := service(request).pivots.refused_change(request.path)) is not None:
        raise Conflict(moved)  # kept here, it would not reach the coordinator taking over

    async def read(size: int) -> bytes:
        try:
            return await request.content.read(size)
        except (HttpProcessingError, ConnectionError):  # cut off: fewer bytes than announced
            return b""

    try:
        kept = await service(request).etcd_snapshots.receive(
            machine.machine_id, request.match_info["item"], request.content_length,
            request.headers.get("Content-Digest"), read)
    except UploadRefused as exc:
        return error(exc.status, str(exc))
    return web.json_response(etcd_snapshot_view(kept), status=201)


async def heartbeat(request: web.Request) -> web.Response:
    service(request).heartbeats.beat(await _agent(request))
    return web.json_response({"status": "ok"})


async def artifact(request: web.Request) -> web.StreamResponse:
    """Files from the artifact store, for any registered machine; never outside the store.
    With an artifact port (`serve --artifact-port`), a redirect to a signed link there, whose
    bytes are encrypted in threads rather than in this event loop (docs/architecture.md)."""
    await service(request).credentials.authenticate_any(bearer(request))
    name = request.match_info["name"]
    target = locate(request.app[ARTIFACTS], name)
    links = request.app.get(ARTIFACT_LINKS)
    if links is None:
        return web.FileResponse(target)
    location = request.url.with_port(links.port).with_query(links.query(name, time.time()))
    return web.Response(status=307, headers={"Location": str(location)})
