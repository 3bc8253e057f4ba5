"""nodeagent: the node side of the cluster lifecycle (prechecks, facts, StateItems)."""

from nodeagent.wire import __version__ as __version__
