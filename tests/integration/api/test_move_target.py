"""PUT/DELETE /v1/move-target (issue 22, part 3): the coordinator every agent is told to move
to, carried by every assignment, announced by a new generation that wakes parked long-polls."""

from __future__ import annotations

import asyncio
import json

from tests.support.harness import InProcessCoordinator

PIN = "sha256:" + "b" * 64


async def test_a_move_target_reaches_every_assignment_at_once_and_is_cleared(
        env: InProcessCoordinator) -> None:
    agents = [await env.register(f"w{n}") for n in range(2)]
    first = await env.assignment(agents[0])
    assert first["move_target"] is None
    parked = asyncio.ensure_future(env.assignment(agents[0], first["generation"], 20))
    await env.parked(agents[0])
    target = await env.call("PUT", "/v1/move-target", 200,
                            json={"url": "https://new.example:8443/", "caPin": PIN})
    woken = await asyncio.wait_for(parked, 5)  # not at the end of its 20 s
    assert woken["generation"] > first["generation"]
    assert woken["move_target"] == target == {"urls": ["https://new.example:8443"],
                                              "ca_pin": PIN, "since": target["since"]}
    assert (await env.assignment(agents[1]))["move_target"] == target
    # The same target again keeps its `since`, and is announced again.
    assert await env.call("PUT", "/v1/move-target", 200,
                          json={"url": "https://new.example:8443", "caPin": PIN}) == target
    again = await env.assignment(agents[0])
    assert again["generation"] > woken["generation"] and again["move_target"] == target
    woken = again

    assert await env.call("DELETE", "/v1/move-target", 200) == target
    after = await env.assignment(agents[0])
    assert after["move_target"] is None and after["generation"] > woken["generation"]
    assert await env.call("GET", "/v1/move-target", 200) is None
    assert await env.call("DELETE", "/v1/move-target", 200) is None  # again: none to clear


async def test_a_target_written_before_a_crash_is_announced_when_set_or_cleared_again(
        env: InProcessCoordinator) -> None:
    """The target is written, then every generation bumped: a coordinator killed between the
    two has agents parked on the old generation, untold. Setting (or clearing) it again, as a
    pivot run again or aborted does, must tell them."""
    agent = await env.register("w0")
    written = {"urls": ["https://new.example:8443"], "ca_pin": PIN, "since": 1.0}
    for doc, method, body in ((written, "PUT", {"url": "https://new.example:8443", "caPin": PIN}),
                              (None, "DELETE", None)):
        current = await env.assignment(agent)
        parked = asyncio.ensure_future(env.assignment(agent, current["generation"], 20))
        await env.parked(agent)
        await env.store.set_move_target(doc and json.dumps(doc))  # the kill lands here
        await env.call(method, "/v1/move-target", 200, json=body)
        woken = await asyncio.wait_for(parked, 5)
        assert woken["move_target"] == doc


async def test_a_bad_move_target_is_refused_naming_the_field(env: InProcessCoordinator) -> None:
    for body, field in (({"url": "https://new:8443"}, "caPin"),
                        ({"url": "https://new:8443", "caPin": "sha256:xyz"}, "caPin"),
                        ({"url": "new:8443", "caPin": PIN}, "url"),
                        ({"url": "https://new:8443", "caPin": PIN, "urls": ["x"]}, "urls"),
                        ({"caPin": PIN}, "url")):
        answer = await env.call("PUT", "/v1/move-target", 422, json=body)
        assert field in str(answer), (body, answer)
    assert await env.call("GET", "/v1/move-target", 200) is None


async def test_a_move_target_is_https_on_every_url_and_pinned_or_refused_naming_why(
        env: InProcessCoordinator) -> None:
    """Agents send the target their credential: never in clear text, never unverified."""
    agent = await env.register("w0")
    before = await env.assignment(agent)
    for body, field in (({"url": "http://new:8080"}, "url"),
                        ({"url": "http://new:8080", "caPin": PIN}, "url"),
                        ({"url": "https://new:8443", "urls": ["http://new-2:8080"],
                          "caPin": PIN}, "urls[0]"),
                        ({"url": "https://new:8443", "urls": ["https://new-2:8443"]}, "caPin")):
        answer = await env.call("PUT", "/v1/move-target", 422, json=body)
        assert f"{field}: " in str(answer) and "must be https:// with its CA" in str(answer), \
            (body, answer)
    assert await env.call("GET", "/v1/move-target", 200) is None
    after = await env.assignment(agent)
    assert after["move_target"] is None and after["generation"] == before["generation"]
