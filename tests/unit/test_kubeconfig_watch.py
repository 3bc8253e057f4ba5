"""The kubeconfig files the daemon watches (nodeagent/kubeconfigs.py): a file is sent again only
when its content is not what was sent, is read only under the agent's root, and is no longer
watched once forgotten or once the machine is gone; the kubeconfig itself is never kept."""

from __future__ import annotations

from pathlib import Path

from nodeagent.kubeconfigs import KUBECONFIGS_FILE, KubeconfigWatch

PATH = "/etc/kubernetes/admin.conf"


def test_a_file_is_sent_again_only_when_its_content_changed(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    admin = root / PATH.lstrip("/")
    admin.parent.mkdir(parents=True)
    admin.write_text("first")
    watch = KubeconfigWatch(state, root)
    assert watch.changed() == []  # nothing reported yet: nothing watched
    watch.sent("init", "f1", PATH, "first")
    assert watch.changed() == []
    admin.write_text("renewed")
    [(entry, text)] = watch.changed()
    assert (entry.item, entry.fingerprint, entry.path, text) == ("init", "f1", PATH, "renewed")
    watch.sent("init", "f1", PATH, "renewed")
    assert watch.changed() == []
    assert "renewed" not in (state / KUBECONFIGS_FILE).read_text()  # only its digest
    assert oct((state / KUBECONFIGS_FILE).stat().st_mode & 0o777) == "0o600"

    admin.unlink()  # gone: looked at again later, not sent
    assert watch.changed() == []
    (tmp_path / "outside").write_text("not the node's")
    admin.symlink_to(tmp_path / "outside")  # a link out of the root is never followed
    assert watch.changed() == []

    admin.unlink()
    admin.write_text("third")
    watch.forget("init")
    assert watch.changed() == []
    watch.sent("init", "f1", PATH, "x")
    watch.clear()
    assert watch.changed() == [] and not (state / KUBECONFIGS_FILE).exists()
