"""The agent's side of the coordinator API. Every call after registration names the machine
and carries its own credential."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel

from nodeagent.protocol import (
    Assignment,
    ItemReport,
    PrecheckReport,
    RegisterRequest,
    RegisterResponse,
)

M = TypeVar("M", bound=BaseModel)


class Unreachable(Exception):
    """The coordinator did not answer, or answered 5xx: try again later."""


class Rejected(Exception):
    """The coordinator refused the request (4xx): retrying the same request will not help."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class CoordinatorClient:
    def __init__(self, url: str, proxy: str | None = None, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.proxy = proxy
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> CoordinatorClient:
        self._session = aiohttp.ClientSession(trust_env=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(self, method: str, path: str, credential: str | None = None,
                    body: BaseModel | None = None, params: dict[str, str] | None = None,
                    timeout: float | None = None) -> Any:
        assert self._session is not None, "use the client as an async context manager"
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        json_body = body.model_dump(mode="json", by_alias=True) if body is not None else None
        try:
            async with self._session.request(
                method, self.url + path, json=json_body, params=params, headers=headers,
                proxy=self.proxy, timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
            ) as response:
                if response.status >= 500:
                    raise Unreachable(f"{method} {path}: HTTP {response.status}")
                payload = await response.json(content_type=None)
                if response.status >= 400:
                    message = payload.get("error") if isinstance(payload, dict) else None
                    raise Rejected(response.status, message or response.reason or "")
                return payload
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Unreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc

    async def register(self, request: RegisterRequest) -> RegisterResponse:
        return RegisterResponse.model_validate(
            await self._call("POST", "/v1/agent/register", body=request))

    async def assignment(self, machine_id: str, credential: str, after: int,
                         wait: float) -> Assignment:
        data = await self._call(
            "GET", f"/v1/agent/machines/{machine_id}/assignment", credential,
            params={"after": str(after), "wait": str(wait)}, timeout=wait + self.timeout,
        )
        return Assignment.model_validate(data)

    async def report(self, machine_id: str, credential: str, report: ItemReport) -> None:
        await self._call("POST", f"/v1/agent/machines/{machine_id}/reports", credential, report)

    async def precheck(self, machine_id: str, credential: str, report: PrecheckReport) -> None:
        await self._call("POST", f"/v1/agent/machines/{machine_id}/precheck", credential, report)

    async def heartbeat(self, machine_id: str, credential: str) -> None:
        await self._call("POST", f"/v1/agent/machines/{machine_id}/heartbeat", credential)

    async def artifact(self, credential: str, name: str) -> AsyncIterator[bytes]:
        """Stream an artifact from the coordinator's store."""
        assert self._session is not None
        try:
            async with self._session.get(
                f"{self.url}/v1/artifacts/{name}", proxy=self.proxy,
                headers={"Authorization": f"Bearer {credential}"},
                timeout=aiohttp.ClientTimeout(total=None, sock_read=self.timeout * 3),
            ) as response:
                if response.status >= 400:
                    raise Rejected(response.status, f"artifact {name}")
                async for chunk in response.content.iter_chunked(1 << 16):
                    yield chunk
        except aiohttp.ClientError as exc:
            raise Unreachable(f"artifact {name}: {exc}") from exc
