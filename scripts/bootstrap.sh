#!/usr/bin/env bash
# Creates .venv with the project and its test tools; installs missing Debian packages
# listed in scripts/system-packages.txt (as root, or through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done < scripts/system-packages.txt
if ((${#missing[@]})); then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
if [[ ! -f .venv/.installed || pyproject.toml -nt .venv/.installed ]]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test,package]'
  touch .venv/.installed
fi
