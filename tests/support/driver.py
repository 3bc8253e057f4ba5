"""One driver for a coordinator under test, whichever way it runs. Every admin call and agent
helper is written once, as the HTTP calls it makes: a generator that yields each Call and is
sent its JSON answer. Two transports run them: SyncDriver (a blocking client: a `coordinator
serve` process, the bench scripts, the demo) and AsyncDriver (an aiohttp client in the test's
own event loop: the in-process coordinator). A simulated agent is its registration's answer
(machine_id, credential), as nodeagent keeps it."""

from __future__ import annotations

import abc
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from tests.support import builders
from tests.support.waiting import wait_until, wait_until_async

T = TypeVar("T")
Registered = dict[str, Any]  # the answer to POST /v1/agent/register: machine_id, credential
AGENT_RETRY_SECONDS = 30  # when a simulated agent that failed an item says it tries again


@dataclass(frozen=True)
class Call:
    """One HTTP call of a driver operation. As the admin unless agent is given (then with that
    agent's credential) or join_token is given (a registration: it carries its join token, as
    the agent does)."""

    method: str
    path: str
    expect: int = 200
    body: Any = None
    agent: Registered | None = None
    join_token: str | None = None


Steps = Generator[Call, Any, T]  # yields calls, is sent their answers, returns its result


def join_token(cluster: str = "lab") -> Steps[str]:
    created = yield Call("POST", f"/v1/clusters/{cluster}/join-tokens", 201)
    return str(created["token"])


def register(hostname: str, failing: bool = False, cluster: str = "lab",
             facts: dict[str, Any] | None = None, **report: Any) -> Steps[Registered]:
    """hostname registered with a fresh join token; failing: its prechecks fail hard; facts:
    what its node reports about itself; report: the rest of its precheck report
    (builders.precheck_report's cpus, memory, role...)."""
    token = yield from join_token(cluster)
    answer: Registered = yield Call("POST", "/v1/agent/register", 201, join_token=token,
                                    body=builders.registration(hostname, token, failing, facts,
                                                               **report))
    return answer


def precheck(agent: Registered, report: dict[str, Any], expect: int = 200) -> Steps[Any]:
    """The agent ran its prechecks again and sends the report, as it does while Pending."""
    answer = yield Call("POST", f"/v1/agent/machines/{agent['machine_id']}/precheck", expect,
                        report, agent=agent)
    return answer


def machine(ref: str) -> Steps[dict[str, Any]]:
    found: dict[str, Any] = yield Call("GET", f"/v1/machines/{ref}")
    return found


def machines(query: str = "") -> Steps[list[dict[str, Any]]]:
    """The machines GET /v1/machines lists: its first page (of up to 1,000 here), which holds
    every machine a test makes."""
    page = yield Call("GET", "/v1/machines?" + "&".join(filter(None, [query, "limit=1000"])))
    assert len(page["machines"]) == page["total"], "more machines than one page"
    return list(page["machines"])


def assignment(agent: Registered, after: int = 0, wait: float = 0) -> Steps[dict[str, Any]]:
    path = f"/v1/agent/machines/{agent['machine_id']}/assignment?after={after}&wait={wait}"
    answer: dict[str, Any] = yield Call("GET", path, agent=agent)
    return answer


def heartbeat(agent: Registered) -> Steps[None]:
    yield Call("POST", f"/v1/agent/machines/{agent['machine_id']}/heartbeat", agent=agent)


def report(agent: Registered, item: dict[str, Any], phase: str, status: str = "succeeded",
           expect: int = 200, **fields: Any) -> Steps[Any]:
    """One item of an assignment reported as the agent's runner does; the answer's body."""
    answer = yield Call("POST", f"/v1/agent/machines/{agent['machine_id']}/reports", expect,
                        builders.item_report(item, phase, status, **fields), agent=agent)
    return answer


def report_item(agent: Registered, name: str, status: str, attempt: int = 1, output: str = "",
                error: str = "", exit_code: int | None = 0, seconds: float = 1.5,
                gave_up: bool = False) -> Steps[None]:
    """The item called name of the agent's current assignment, reported now as having run for
    seconds (finished unless running; a failed one to be retried in AGENT_RETRY_SECONDS, unless
    the agent gave up on it)."""
    current = yield from assignment(agent)
    (found,) = [i for i in current["items"] if i["name"] == name]
    now = time.time()
    finished = status != "running"
    yield from report(agent, found, found["phase"], status, attempt=attempt, output=output,
                      error=error, started_at=now - seconds,
                      finished_at=now if finished else None,
                      exit_code=exit_code if finished else None,
                      next_retry_at=now + AGENT_RETRY_SECONDS
                      if status == "failed" and not gave_up else None, gave_up=gave_up)


def report_all(agent: Registered, kubeconfig: str | None = None) -> Steps[None]:
    """Every item of the current assignment reported applied, as an agent would: each with its
    own phase (an upgrade runs changed deploy items too), with the kubeconfig its file holds
    for an item with kubeconfigFrom."""
    current = yield from assignment(agent)
    for item in current["items"]:
        yield from report(agent, item, item["phase"],
                          kubeconfig=kubeconfig if item.get("kubeconfigFrom") else None)


class SyncDriver(abc.ABC):
    """The operations over a blocking transport."""

    agents: dict[str, Registered]  # by hostname, as registered here

    @abc.abstractmethod
    def send(self, call: Call) -> Any:
        """The JSON answer to call; an answer of another status than call.expect fails."""

    def run(self, steps: Steps[T]) -> T:
        try:
            call = next(steps)
            while True:
                call = steps.send(self.send(call))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def join_token(self, cluster: str = "lab") -> str:
        return self.run(join_token(cluster))

    def register(self, hostname: str, failing: bool = False, cluster: str = "lab",
                 facts: dict[str, Any] | None = None, **report: Any) -> Registered:
        agent = self.agents[hostname] = self.run(register(hostname, failing, cluster, facts,
                                                          **report))
        return agent

    def precheck(self, agent: Registered, report: dict[str, Any], expect: int = 200) -> Any:
        return self.run(precheck(agent, report, expect))

    def machine(self, ref: str) -> dict[str, Any]:
        return self.run(machine(ref))

    def machines(self, query: str = "") -> list[dict[str, Any]]:
        return self.run(machines(query))

    def assignment(self, agent: Registered, after: int = 0, wait: float = 0) -> dict[str, Any]:
        return self.run(assignment(agent, after, wait))

    def heartbeat(self, agent: Registered) -> None:
        self.run(heartbeat(agent))

    def report(self, agent: Registered, item: dict[str, Any], phase: str,
               status: str = "succeeded", expect: int = 200, **fields: Any) -> Any:
        return self.run(report(agent, item, phase, status, expect, **fields))

    def report_item(self, agent: Registered, name: str, status: str, **fields: Any) -> None:
        self.run(report_item(agent, name, status, **fields))

    def report_all(self, agent: Registered, kubeconfig: str | None = None) -> None:
        self.run(report_all(agent, kubeconfig))

    def wait_state(self, hostname: str, state: str, timeout: float = 10) -> None:
        wait_until(lambda: self.machine(hostname)["state"] == state, timeout,
                   f"{hostname} in {state}")


class AsyncDriver(abc.ABC):
    """The operations over an asyncio transport: the same names, awaited."""

    agents: dict[str, Registered]  # by hostname, as registered here

    @abc.abstractmethod
    async def send(self, call: Call) -> Any:
        """The JSON answer to call; an answer of another status than call.expect fails."""

    async def run(self, steps: Steps[T]) -> T:
        try:
            call = next(steps)
            while True:
                call = steps.send(await self.send(call))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def join_token(self, cluster: str = "lab") -> str:
        return await self.run(join_token(cluster))

    async def register(self, hostname: str, failing: bool = False, cluster: str = "lab",
                       facts: dict[str, Any] | None = None, **report: Any) -> Registered:
        agent = self.agents[hostname] = await self.run(
            register(hostname, failing, cluster, facts, **report))
        return agent

    async def precheck(self, agent: Registered, report: dict[str, Any],
                       expect: int = 200) -> Any:
        return await self.run(precheck(agent, report, expect))

    async def machine(self, ref: str) -> dict[str, Any]:
        return await self.run(machine(ref))

    async def machines(self, query: str = "") -> list[dict[str, Any]]:
        return await self.run(machines(query))

    async def assignment(self, agent: Registered, after: int = 0,
                         wait: float = 0) -> dict[str, Any]:
        return await self.run(assignment(agent, after, wait))

    async def heartbeat(self, agent: Registered) -> None:
        await self.run(heartbeat(agent))

    async def report(self, agent: Registered, item: dict[str, Any], phase: str,
                     status: str = "succeeded", expect: int = 200, **fields: Any) -> Any:
        return await self.run(report(agent, item, phase, status, expect, **fields))

    async def report_item(self, agent: Registered, name: str, status: str, **fields: Any) -> None:
        await self.run(report_item(agent, name, status, **fields))

    async def report_all(self, agent: Registered, kubeconfig: str | None = None) -> None:
        await self.run(report_all(agent, kubeconfig))

    async def wait_state(self, hostname: str, state: str, timeout: float = 10) -> None:
        async def reached() -> bool:
            return bool((await self.machine(hostname))["state"] == state)

        await wait_until_async(reached, timeout, f"{hostname} in {state}", interval=0.05)
