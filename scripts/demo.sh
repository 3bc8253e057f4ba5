#!/usr/bin/env bash
# The main job on this machine: a coordinator on SQLite and five local agents rolling a
# sample cluster (examples/cluster.yaml) out until every machine is Ready.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
exec $sudo .venv/bin/python scripts/demo.py "$@"
