"""What the agent and the coordinator both speak: the protocol's documents, roles and phases,
the join string, the coordinator's endpoint, redaction, each role's minimums, document
validation, the `${...}` placeholder syntax, the agent's config file, node addresses and the
log line. The coordinator imports nothing else of nodeagent (.importlinter), and the agent
imports these from here too, so each exists once."""

__version__ = "0.1.0"
