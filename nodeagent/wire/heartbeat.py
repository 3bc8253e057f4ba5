"""How an agent shows the coordinator it is alive on one connection: the coordinator counts
each long-poll of the assignment as a heartbeat and says so on its answer (POLL_HEARTBEAT:
POLL_COUNTED). An agent that is told so polls at its heartbeat interval and sends a separate
heartbeat only when no poll went out for a while; a parked poll and a heartbeat would
otherwise hold two connections per agent. An agent of an earlier version ignores the header
and keeps heartbeating beside its polls; a coordinator of an earlier version does not send
it, and the agent keeps heartbeating too (docs/agent.md, "Liveness")."""

POLL_HEARTBEAT = "Nodeagent-Heartbeat"
POLL_COUNTED = "poll"
