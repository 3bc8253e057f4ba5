#!/bin/sh
# @NAME@ pre-remove. deb: "remove", "upgrade NEW_VERSION", ...; rpm: 0 (erase) or 1 (upgrade).
# Stops the service when the package goes; an upgrade restarts it in post-install instead.
set -e
case "$1" in remove|0) ;; *) exit 0 ;; esac
if [ -d /run/systemd/system ]; then
    systemctl stop @NAME@.service || true
fi
if [ "$1" = 0 ] && command -v systemctl >/dev/null 2>&1; then
    systemctl --no-reload disable @NAME@.service || true
fi
