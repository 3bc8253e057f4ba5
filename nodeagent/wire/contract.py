"""Words both sides of the wire share, in the standard library only: the agent daemon, which
never loads pydantic, and the coordinator use the same spelling of roles and phases."""

from __future__ import annotations

from typing import Literal

Role = Literal["manager", "worker"]
ROLES: tuple[Role, ...] = ("manager", "worker")
# mint, revoke and leave: jobs a Ready manager runs for another machine (its join material;
# a leaving manager's etcd member removed), each time it is asked; never journaled, since each
# run is for another machine or another minting.
# remedy: what a machine found unhealthy runs before it is replaced (restart the kubelet...),
# each time it is found so; never journaled either.
Phase = Literal["prepare", "deploy", "upgrade", "reconfigure", "reset", "postdeploy", "mint",
                "revoke", "leave", "remedy"]
PHASES: tuple[Phase, ...] = ("prepare", "deploy", "upgrade", "reconfigure", "reset", "postdeploy",
                             "mint", "revoke", "leave", "remedy")
# Phases whose items are jobs run for another machine: not recorded in the journal.
JOB_PHASES: tuple[Phase, ...] = ("mint", "revoke", "leave")
# Phases whose every run is a new one: their items are never recorded in the journal.
UNJOURNALED_PHASES: tuple[Phase, ...] = (*JOB_PHASES, "remedy")
# The largest kubeconfig a report (or a refresh) carries.
MAX_KUBECONFIG_BYTES = 256 * 1024
