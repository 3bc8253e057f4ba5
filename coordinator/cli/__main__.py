"""`python -m coordinator.cli`: how `serve --artifact-port` starts its child outside the
frozen bundle (whose binary is the CLI itself)."""

from coordinator.cli import main

main()
