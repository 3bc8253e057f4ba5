#!/usr/bin/env bash
# Creates .venv with the project and its test tools, after installing the missing Debian
# packages (scripts/install-packages.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-packages.sh

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
if [[ ! -f .venv/.installed || pyproject.toml -nt .venv/.installed ]]; then
  .venv/bin/pip install -q --no-compile -e '.[test,package]'  # modules compile as imported
  touch .venv/.installed
fi
