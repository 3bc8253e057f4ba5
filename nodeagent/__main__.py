"""`python -m nodeagent`: how the daemon runs its own prechecks and facts in a child."""

from nodeagent.cli import main

main(prog_name="nodeagent")
