"""Entry point of the frozen coordinator bundle (/opt/coordinator/coordinator)."""

from coordinator.cli import main

main()
