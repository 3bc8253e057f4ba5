"""nodeagent: the node side of the cluster lifecycle (prechecks, facts, StateItems)."""

__version__ = "0.1.0"
