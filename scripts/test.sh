#!/usr/bin/env bash
# The whole test suite: lint, then unit, integration and end-to-end tests.
# Integration tests need root (network namespaces) and the packages in system-packages.txt.
# Tests run in parallel (pytest-xdist): most wait on timers and daemons rather than on a CPU,
# so one worker more than the machine has cores, at most 8 (NODEAGENT_TEST_WORKERS=N sets
# it; 0 runs them all in this process). Each file's tests run in one worker
# (tests/conftest.py); later options win, e.g. `bash scripts/test.sh -n 0 tests/unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check .
cores=$(nproc 2>/dev/null || echo 1)
workers=${NODEAGENT_TEST_WORKERS:-$(( cores + 1 < 8 ? cores + 1 : 8 ))}
exec .venv/bin/pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
