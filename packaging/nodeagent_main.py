"""Entry point of the frozen nodeagent bundle (/opt/nodeagent/nodeagent)."""

from nodeagent.cli import main

main()
