#!/usr/bin/env bash
# The main job on this machine: check whether it can join a cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
set +e
.venv/bin/nodeagent precheck "$@"
status=$?
echo
echo "nodeagent precheck exited with $status (0: can join, 1: a hard check failed, 2: bad usage)"
