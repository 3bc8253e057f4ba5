"""`coordinator init`: everything a new coordinator needs before its first start: a CA and a
server certificate, the secrets key (made as the store opens), an admin token, and optionally
a first cluster with a join string."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain.model import ClusterSpec
from coordinator.server import datadir, pki
from coordinator.server.serve import ServeOptions, SetupError, open_coordinator
from nodeagent.wire import joinstring


@dataclass(frozen=True)
class Initialized:
    ca_hash: str
    join: str | None  # the first join string, when a cluster was given


async def initialize(options: ServeOptions, names: list[str], spec: ClusterSpec | None,
                     join_ttl: float | None, join_max_uses: int | None) -> Initialized:
    try:
        datadir.make_private(options.data_dir)  # before the PKI makes it, whatever the umask
    except datadir.DataDirError as exc:
        raise SetupError(str(exc)) from None
    layout = options.pki()
    pki.create(layout, names)
    ca_pem = layout.ca_cert.read_text()
    coordinator = await open_coordinator(options)
    try:
        join = None
        if spec is not None:
            await coordinator.admin.apply_cluster(spec)
            secret, _ = await coordinator.admin.create_join_token(spec.name, join_ttl, join_max_uses)
            join = joinstring.make(options.url(), secret, ca_pem)
    finally:
        await coordinator.store.close()
    return Initialized(joinstring.ca_hash(ca_pem), join)
