#!/usr/bin/env bash
# The whole test suite: lint, then unit, integration and end-to-end tests.
# Integration tests need root (network namespaces) and the packages in system-packages.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check .
exec .venv/bin/pytest "$@"
