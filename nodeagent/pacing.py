"""How long the agent parks each long-poll where polls count as its heartbeat
(nodeagent/wire/heartbeat.py): at most the heartbeat interval, so the coordinator hears from
it that often, and spread so that a fleet's polls do not arrive in bursts.

Polls answered together come back together: a coordinator that stalled for a second (a
restart the agents reconnect after, a long garbage collection) answers every poll that ran
out meanwhile at once, and those agents poll again in lockstep every interval for good. At
19,700 agents such bursts of 3,000-4,000 polls a second set the coordinator's p99
(docs/benchmarks.md). So each poll waits a random 75-100 % of the interval, and the first
poll, and the one after a poll that went unanswered or came back over a second late, a
random 0-100 %: one interval scatters what a stall bunched."""

from __future__ import annotations

import random

LONG_POLL_SECONDS = 30.0  # a poll's wait where polls do not count as heartbeats, and the most
JITTER = 0.25  # an ordinary poll waits 1 - JITTER to all of the interval
LATE_SECONDS = 1.0  # an answer this much past the wait: the coordinator stalled


class PollPace:
    """The waits of one agent's polls, each told how its poll ended."""

    def __init__(self, rand: random.Random) -> None:
        self.rand = rand
        self.scatter = True  # the next wait anywhere in the interval: the first one

    def next(self, heartbeat_seconds: float, counted: bool) -> float:
        """The next poll's wait: paced over the heartbeat interval where the coordinator counts
        polls as heartbeats (`counted`), else LONG_POLL_SECONDS."""
        if not counted:
            return LONG_POLL_SECONDS
        return self.wait(min(heartbeat_seconds, LONG_POLL_SECONDS))

    def wait(self, interval: float) -> float:
        """The next poll's wait."""
        share = self.rand.random() if self.scatter else 1 - JITTER * self.rand.random()
        self.scatter = False
        return interval * share

    def answered(self, waited: float, asked: float) -> None:
        """A poll that asked to wait `asked` seconds was answered after `waited`."""
        if waited > asked + LATE_SECONDS:
            self.scatter = True

    def unanswered(self) -> None:
        """A poll got no answer (the coordinator is away or restarting)."""
        self.scatter = True
