#!/bin/sh
# @NAME@ post-remove. deb: "remove", "purge", "upgrade", ...; rpm: 0 (erase) or 1 (upgrade).
# Purge (deb only: rpm has none) also removes the state: identity, journal, database.
set -e
if [ -d /run/systemd/system ] && { [ "$1" = remove ] || [ "$1" = 0 ]; }; then
    systemctl daemon-reload || true
fi
if [ "$1" = purge ]; then
    if command -v deb-systemd-helper >/dev/null 2>&1; then
        deb-systemd-helper purge @NAME@.service
    fi
    rm -rf /var/lib/@NAME@
fi
