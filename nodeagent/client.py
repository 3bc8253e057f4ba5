"""The agent's side of the coordinator API. Every call after registration names the machine
and carries its own credential.

Bodies and answers are plain JSON documents, not the pydantic wire types of
nodeagent/wire/protocol.py: the daemon that holds this client stays free of pydantic (over a quarter
of its memory, see docs/benchmarks.md); the coordinator validates what it is sent, and the
child process that applies a phase validates what it applies."""

from __future__ import annotations

import hashlib
import io
import json
import random
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode

from nodeagent import http_client
from nodeagent.backoff import Reconnect
from nodeagent.wire.digest import content_digest
from nodeagent.wire.endpoint import Endpoint
from nodeagent.wire.heartbeat import POLL_COUNTED, POLL_HEARTBEAT

Document = dict[str, Any]


class Unreachable(Exception):
    """The coordinator did not answer, or answered 5xx: try again later."""


class Busy(Unreachable):
    """The coordinator answered 429 (registering too fast): back off, not merely reconnect."""


class Rejected(Exception):
    """The coordinator refused the request (4xx): retrying the same request will not help."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class CoordinatorClient:
    """Calls one replica at a time; when it does not answer (or answers 5xx), the next call
    goes to the next replica, round the list. Every answer is noted in `reconnect`, which
    says how long a caller that did not reach the coordinator waits before trying again."""

    def __init__(self, endpoints: Sequence[Endpoint], timeout: float = 10.0,
                 context: ssl.SSLContext | None = None,
                 rand: random.Random | None = None) -> None:
        if not endpoints:
            raise ValueError("no coordinator URL")
        self.endpoints = [Endpoint(e.url.rstrip("/"), e.proxy) for e in endpoints]
        self._current = 0
        self.timeout = timeout
        self.context = context  # whom to trust over https: the coordinator's pinned CA
        self.reconnect = Reconnect(rand or random.Random())
        # Whether the coordinator said its long-polls count as heartbeats (wire/heartbeat.py),
        # and when the last heartbeat and the last poll it counted went out.
        self.polls_beat = False
        self._heartbeat_at = self._poll_at = float("-inf")

    def beat_within(self, seconds: float) -> bool:
        """Whether the coordinator heard from this machine within `seconds`: a heartbeat it
        answered, or a poll it counts (a parked one from when it went out)."""
        return time.monotonic() - max(self._heartbeat_at, self._poll_at) < seconds

    def _forget_beats(self) -> None:
        """Another coordinator, or another replica: whether it counts polls is its to say."""
        self.polls_beat = False
        self._poll_at = float("-inf")

    def move_to(self, endpoints: Sequence[Endpoint], context: ssl.SSLContext | None) -> None:
        """Talk to another coordinator from the next call on (a pivot's target, or back)."""
        self.endpoints = [Endpoint(e.url.rstrip("/"), e.proxy) for e in endpoints]
        self._current = 0
        self.context = context
        self._forget_beats()
        self.reconnect.answered()  # its silence is counted from now

    @property
    def url(self) -> str:
        return self.endpoints[self._current].url

    @property
    def proxy(self) -> str | None:
        return self.endpoints[self._current].proxy

    def _unreachable(self, url: str, message: str) -> Unreachable:
        """Move on to the next replica, unless a concurrent call already moved on from url."""
        if len(self.endpoints) > 1 and url == self.url:
            self._current = (self._current + 1) % len(self.endpoints)
            self._forget_beats()
            message += f"; trying {self.url} next"
        return Unreachable(message)

    def _headers(self, credential: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if credential:
            headers["Authorization"] = f"Bearer {credential}"
        return headers

    async def _call(self, method: str, path: str, credential: str | None = None,
                    body: Document | None = None, params: dict[str, str] | None = None,
                    timeout: float | None = None) -> Any:
        """The JSON answer."""
        return (await self._answered(method, path, credential, body, params, timeout))[0]

    async def _answered(self, method: str, path: str, credential: str | None = None,
                        body: Document | None = None, params: dict[str, str] | None = None,
                        timeout: float | None = None,
                        etag: str | None = None) -> tuple[Any, Mapping[str, str]]:
        """The JSON answer (None for 304 Not Modified when `etag` was sent as If-None-Match)
        and its headers."""
        headers = self._headers(credential)
        if etag is not None:
            headers["If-None-Match"] = etag
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        base, proxy = self.url, self.proxy
        url = base + path + (f"?{urlencode(params)}" if params else "")
        try:
            reply = await http_client.request(method, url, headers=headers, body=data,
                                              proxy=proxy, timeout=timeout or self.timeout,
                                              context=self.context)
        except http_client.TransportError as exc:
            raise self._unreachable(base, f"{method} {base}{path}: {exc}") from None
        if reply.status == 304 and etag is not None:
            self.reconnect.answered()
            return None, reply.headers
        return self._decoded(reply, method, base, path), reply.headers

    def _decoded(self, reply: http_client.Reply, method: str, base: str, path: str) -> Any:
        """The JSON of an answer; Unreachable for 5xx or a body that is not JSON, Busy for
        429, Rejected for any other 4xx."""
        if reply.status >= 500:
            raise self._unreachable(base, f"{method} {base}{path}: HTTP {reply.status} "
                                    f"{reply.reason}")
        if reply.status == 429:  # registering too fast: wait, here
            raise Busy(f"{method} {path}: HTTP {reply.status} {reply.reason}")
        self.reconnect.answered()
        try:
            payload = json.loads(reply.body) if reply.body else None
        except ValueError:
            raise Unreachable(f"{method} {path}: HTTP {reply.status} with a body that is "
                              f"not JSON") from None
        if reply.status >= 400:
            message = payload.get("error") if isinstance(payload, dict) else None
            raise Rejected(reply.status, message or reply.reason)
        return payload

    async def _document(self, method: str, path: str, credential: str | None = None,
                        body: Document | None = None, params: dict[str, str] | None = None,
                        timeout: float | None = None) -> Document:
        """A call whose answer must be a JSON object (a RegisterResponse, an Assignment...)."""
        return _object(await self._call(method, path, credential, body, params, timeout),
                       f"{method} {path}")

    async def register(self, request: Document) -> Document:
        """A RegisterRequest in, a RegisterResponse back. The join token goes in the
        Authorization header too: the coordinator checks it before reading the body."""
        return await self._document("POST", "/v1/agent/register", request.get("join_token"),
                                    body=request)

    async def assignment(self, machine_id: str, credential: str, held: Held,
                         wait: float) -> tuple[Document, Held] | None:
        """The machine's Assignment, with what to hold of it, once it is not the one held;
        None when `wait` ran out and the coordinator says the held one is current. Whether the
        coordinator counted it as a heartbeat is noted (polls_beat)."""
        path = f"/v1/agent/machines/{machine_id}/assignment"
        sent, previous = time.monotonic(), self._poll_at
        if self.polls_beat:
            self._poll_at = sent  # counted on arrival; undone if it never arrived
        try:
            payload, headers = await self._answered(
                "GET", path, credential,
                params={"after": str(held.generation), "wait": str(wait)},
                timeout=wait + self.timeout, etag=held.tag)
        except BaseException:
            self._poll_at = previous
            raise
        self.polls_beat = headers.get(POLL_HEARTBEAT) == POLL_COUNTED
        self._poll_at = sent if self.polls_beat else previous
        if payload is None:
            return None
        assignment = _object(payload, f"GET {path}")
        return assignment, Held(assignment.get("generation", 0), headers.get("ETag"))

    async def report(self, machine_id: str, credential: str, report: Document) -> None:
        """An ItemReport."""
        await self._call("POST", f"/v1/agent/machines/{machine_id}/reports", credential, report)

    async def refresh_kubeconfig(self, machine_id: str, credential: str,
                                 refresh: Document) -> Document:
        """A KubeconfigRefresh: whether the coordinator took it."""
        return await self._document(
            "POST", f"/v1/agent/machines/{machine_id}/kubeconfig", credential, refresh)

    async def precheck(self, machine_id: str, credential: str, report: Document) -> None:
        """A PrecheckReport."""
        await self._call("POST", f"/v1/agent/machines/{machine_id}/precheck", credential, report)

    async def rotate(self, machine_id: str, credential: str, new: str) -> Document:
        """A RotateResponse: when the new credential expires."""
        return await self._document(
            "POST", f"/v1/agent/machines/{machine_id}/credential", credential,
            {"credential": new})

    async def heartbeat(self, machine_id: str, credential: str) -> None:
        sent = time.monotonic()
        await self._call("POST", f"/v1/agent/machines/{machine_id}/heartbeat", credential)
        self._heartbeat_at = sent

    async def upload_etcd_snapshot(self, machine_id: str, credential: str, item: str,
                                   snapshot: BinaryIO) -> Document:
        """The etcd snapshot the item left, sent whole with its size and its SHA-256 (RFC
        9530's Content-Digest), which the coordinator checks before it keeps it; its answer
        names what it kept."""
        size, digest = await http_client.in_thread(_measured, snapshot)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size),
                   "Content-Digest": content_digest(digest)}
        path = f"/v1/agent/machines/{machine_id}/etcd-snapshots/{quote(item)}"
        base = self.url
        try:
            reply = await http_client.request(
                "PUT", base + path, headers={**self._headers(credential), **headers},
                body=snapshot, proxy=self.proxy, context=self.context,
                timeout=self.timeout * 3, keep_alive=False)
        except http_client.TransportError as exc:
            raise self._unreachable(base, f"PUT {base}{path}: {exc}") from None
        return _object(self._decoded(reply, "PUT", base, path), f"PUT {path}")

    async def artifact(self, credential: str, name: str,
                       headers: Mapping[str, str]) -> http_client.Body:
        """An artifact from the coordinator's store, opened to stream; headers may ask for a
        range of it (Range, If-Range)."""
        base = self.url
        try:
            return await http_client.open_body(
                f"{base}/v1/artifacts/{quote(name)}",
                headers={**self._headers(credential), **headers}, proxy=self.proxy,
                timeout=self.timeout * 3, context=self.context)
        except http_client.BadStatus as exc:
            if exc.status >= 500:
                raise self._unreachable(base, f"artifact {name}: {exc}") from None
            raise Rejected(exc.status, f"artifact {name}: {exc.reason}") from None
        except http_client.TransportError as exc:
            raise self._unreachable(base, f"artifact {name}: {exc}") from None


def _measured(snapshot: BinaryIO) -> tuple[int, bytes]:
    """A file's size and SHA-256, read from its start."""
    snapshot.seek(0)
    digest = hashlib.file_digest(snapshot, "sha256")  # a BytesIO's whole buffer, unmoved
    return snapshot.seek(0, io.SEEK_END), digest.digest()


def _object(payload: Any, call: str) -> Document:
    """An answer that must be a JSON object (a RegisterResponse, an Assignment...)."""
    if not isinstance(payload, dict):
        raise Unreachable(f"{call}: the answer is not a JSON object")
    return payload


@dataclass(frozen=True)
class Held:
    """Which assignment an agent holds: its generation (sent as `after`) and the entity tag
    the coordinator sent with it (sent back as If-None-Match). The tag names the state of the
    coordinator's store too (its epoch): after a restore of an older backup the same
    generation comes with another tag, so the agent tells the two apart and the coordinator
    never answers 304 for content the agent has not seen (docs/agent.md). Held() holds
    nothing: generations start at 1."""

    generation: int = 0
    tag: str | None = None
