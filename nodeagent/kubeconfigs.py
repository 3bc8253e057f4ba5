"""The kubeconfig files a manager's items reported (kubeconfigFrom), watched after the items
ran: a file that changed on disk since (certificates renewed by hand with `kubeadm certs
renew`, or by kubeadm itself) is sent again, so that the coordinator does not go on draining
through a kubeconfig whose certificate the node replaced. What was sent is remembered in
stateDir/kubeconfigs.json by item, version, path and sha256, never the kubeconfig itself.

Standard library only: the daemon, which stays free of pydantic, watches them."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from nodeagent.atomic import atomic_write
from nodeagent.items import read_left_file
from nodeagent.items.outcome import ItemFailed
from nodeagent.wire.contract import MAX_KUBECONFIG_BYTES

KUBECONFIGS_FILE = "kubeconfigs.json"  # in the state dir


@dataclass(frozen=True)
class Sent:
    """A kubeconfig file as an item's report (or a refresh) last carried it."""

    item: str
    fingerprint: str  # the item's version the machine applied
    path: str  # the item's kubeconfigFrom, under the agent's root
    sha256: str


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class KubeconfigWatch:
    """The files sent, by item; each one compared with what is on disk now."""

    def __init__(self, state_dir: Path, root: Path) -> None:
        self.path = state_dir / KUBECONFIGS_FILE
        self.root = root

    def _load(self) -> dict[str, Sent]:
        try:
            found = json.loads(self.path.read_text())
            return {name: Sent(**entry) for name, entry in found.items()}
        except (OSError, ValueError, TypeError):  # none yet, or unreadable: nothing watched
            return {}

    def _save(self, sent: dict[str, Sent]) -> None:
        atomic_write(self.path, json.dumps({n: asdict(s) for n, s in sent.items()}).encode(),
                     0o600)

    def sent(self, item: str, fingerprint: str, path: str, text: str) -> None:
        """The item's report (or a refresh) carried text, read from path."""
        known = self._load()
        entry = Sent(item, fingerprint, path, digest(text))
        if known.get(item) != entry:
            self._save({**known, item: entry})

    def clear(self) -> None:
        """Nothing watched: the machine whose items reported them is gone."""
        self.path.unlink(missing_ok=True)

    def forget(self, item: str) -> None:
        known = self._load()
        if known.pop(item, None) is not None:
            self._save(known)

    def changed(self) -> list[tuple[Sent, str]]:
        """Each watched file whose content is not what was sent, with that content; a file
        that cannot be read now (gone, too big) is left for a later look."""
        found = []
        for entry in self._load().values():
            with contextlib.suppress(ItemFailed):
                text = read_left_file(self.root, entry.path, MAX_KUBECONFIG_BYTES, entry.path)
                if digest(text) != entry.sha256:
                    found.append((entry, text))
        return found
