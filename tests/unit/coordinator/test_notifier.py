"""Relaying wake-ups between replicas: what one replica's notifier is told reaches the others'
agents, watchers and reconcile loop, in messages a NOTIFY payload can carry."""

from __future__ import annotations

import json

from coordinator.service.notifier import Notifier, encode
from coordinator.store.base import MAX_MESSAGE
from tests.support.waiting import wait_until_async


def test_many_wakes_are_split_into_messages_that_fit_and_carry_every_id() -> None:
    ids = [f"{n:08d}-0000-4000-8000-000000000000" for n in range(1000)]
    messages = encode("r1", ids, changed=True, kick=False)
    assert len(messages) > 1
    assert all(len(m.encode()) <= MAX_MESSAGE for m in messages)
    bodies = [json.loads(m) for m in messages]
    assert [i for b in bodies for i in b["wake"]] == ids
    assert all(b["from"] == "r1" and b["changed"] and not b["kick"] for b in bodies)


async def test_wakes_changes_and_kicks_cross_to_another_replica_but_not_back() -> None:
    sent: list[str] = []
    here, there = Notifier(), Notifier()

    async def publish(message: str) -> None:
        sent.append(message)
        here.deliver(message)  # a replica hears its own NOTIFY too: it must ignore it
        there.deliver(message)

    here.relay(publish)
    agent, watcher = there.subscribe("m1"), there.changes()
    here.wake(["m1"])
    here.kick()
    await wait_until_async(lambda: sent, message="the batch published")
    assert agent.is_set() and watcher.is_set() and there.kicked.is_set()
    assert len(sent) == 1  # batched: one message for both
    here.kicked.clear()
    own = here.subscribe("m2")
    here.deliver(sent[0].replace('"m1"', '"m2"'))
    assert not own.is_set()  # its own message


def test_a_possibly_lost_message_wakes_every_agent_and_the_reconcile_loop() -> None:
    notifier = Notifier()
    agents = [notifier.subscribe(m) for m in ("m1", "m2")]
    notifier.deliver("")
    assert all(a.is_set() for a in agents) and notifier.kicked.is_set()


async def test_written_machines_reach_the_other_replicas_handler_and_a_loss_says_all() -> None:
    here, there = Notifier(), Notifier()
    heard: list[list[str] | None] = []
    there.on_written = lambda ids: heard.append(None if ids is None else list(ids))

    async def publish(message: str) -> None:
        there.deliver(message)

    here.relay(publish)
    agent = there.subscribe("m1")
    here.written(["m1", "m2"])
    await wait_until_async(lambda: heard, message="the written machines heard")
    assert heard == [["m1", "m2"]]
    assert not agent.is_set()  # written is not a wake: the agent's long-poll stays parked
    there.deliver("")
    assert heard[-1] is None


def test_wakes_and_writes_share_the_split_messages() -> None:
    ids = [f"{n:08d}-0000-4000-8000-000000000000" for n in range(600)]
    messages = encode("r1", ids[:300], changed=False, kick=True, written=ids[300:])
    assert len(messages) > 1 and all(len(m.encode()) <= MAX_MESSAGE for m in messages)
    bodies = [json.loads(m) for m in messages]
    assert [i for b in bodies for i in b["wake"]] == ids[:300]
    assert [i for b in bodies for i in b["written"]] == ids[300:]
