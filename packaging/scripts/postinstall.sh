#!/bin/sh
# @NAME@ post-install. deb calls it with "configure [OLD_VERSION]", rpm with 1 (install)
# or 2 (upgrade). Enables the unit always; starts (or, on upgrade, restarts) it only when
# systemd runs and the service is configured.
set -e
@READY@
case "$1" in configure|1|2) ;; *) exit 0 ;; esac
unit=@NAME@.service
if command -v deb-systemd-helper >/dev/null 2>&1; then
    deb-systemd-helper enable "$unit"
elif command -v systemctl >/dev/null 2>&1; then
    systemctl --no-reload enable "$unit"
else
    echo "@NAME@: this system has no systemd; start '@BIN@ @RUN@' with its init system"
    exit 0
fi
if [ ! -d /run/systemd/system ]; then
    echo "@NAME@: systemd is not running here; $unit is enabled and starts at the next boot"
    exit 0
fi
systemctl daemon-reload
if why=$(ready); then
    systemctl restart "$unit"
else
    echo "@NAME@: $unit enabled but not started: $why"
fi
