#!/bin/sh
# coordinator pre-install (deb: "install"/"upgrade"; rpm: 1 or 2): the service's own user.
set -e
if ! getent passwd coordinator >/dev/null; then
    useradd --system --user-group --no-create-home --home-dir /var/lib/coordinator \
        --shell /usr/sbin/nologin --comment "nodeagent coordinator" coordinator
fi
