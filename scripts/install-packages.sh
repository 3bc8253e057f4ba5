#!/usr/bin/env bash
# Installs the Debian packages in scripts/system-packages.txt that are missing (as root, or
# through sudo). The tests start chronyd, dnsmasq, nginx and PostgreSQL themselves in temp
# dirs on loopback ports, so the packages' own services are kept from starting: a policy-rc.d
# refusing every start stands in while apt-get runs, unless the machine has one already.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done < scripts/system-packages.txt
((${#missing[@]})) || exit 0

sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "installing Debian packages: ${missing[*]}"
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null
  $sudo chmod 755 $policy
  trap '$sudo rm -f $policy' EXIT
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
