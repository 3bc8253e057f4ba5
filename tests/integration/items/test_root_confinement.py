"""The agent's promise, kept against hostile paths: whatever an item names (a file or
download target, a command's cwd, the file of its kubeconfig or of an output), `..` and
symbolic links included, stays under the agent's root; an escape fails the item naming the
path, and nothing outside the root is read, written or changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.journal import Journal
from nodeagent.wire.protocol import RetryPolicy
from tests.support.blob import BLOB, BLOB_SHA
from tests.support.items import Recorder, apply, artifact_source, exec_item, make_item, run

pytestmark = pytest.mark.integration

SHADOW = "root:$6$salt$hash:19000:0:99999:7:::\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root, holding a file the items must never reach."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "shadow").write_text(SHADOW)
    (path / "shadow").chmod(0o600)
    return path


def link(root: Path, machine_path: str, target: Path) -> None:
    """A symbolic link at machine_path under root, pointing at target outside it."""
    at = root / machine_path.lstrip("/")
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target)


def untouched(outside: Path) -> list[str]:
    """What outside holds besides the one file it started with, and whether that changed."""
    extra = sorted(p.name for p in outside.iterdir() if p.name != "shadow")
    shadow = outside / "shadow"
    changed = [] if (shadow.read_text(), shadow.stat().st_mode & 0o777) == (SHADOW, 0o600) \
        else ["shadow changed"]
    return extra + changed


def file_item(path: str) -> dict[str, str]:
    return {"type": "file", "path": path, "content": "owned\n", "mode": "0644"}


@pytest.mark.parametrize("path", ["/../outside/app.conf", "/etc/../../outside/app.conf",
                                  "/etc/link/app.conf"])
async def test_a_file_item_never_writes_outside_the_root(
        root: Path, outside: Path, path: str) -> None:
    link(root, "/etc/link", outside)
    outcome = await apply(make_item("f", file_item(path)), root)
    assert not outcome.succeeded
    assert outcome.error == (f"{path} is outside the agent's root {root} (it resolves to "
                             f"{outside}/app.conf): an item's paths stay under it")
    assert untouched(outside) == []


async def test_a_link_in_a_files_place_is_replaced_not_written_through(
        root: Path, outside: Path) -> None:
    link(root, "/etc/shadow", outside / "shadow")
    outcome = await apply(make_item("f", file_item("/etc/shadow")), root)
    assert outcome.succeeded, outcome.error
    assert (root / "etc/shadow").read_text() == "owned\n"
    assert not (root / "etc/shadow").is_symlink()
    assert untouched(outside) == []


def download(path: str) -> dict[str, str]:
    return {"type": "download", "path": path, "sha256": BLOB_SHA, "mode": "0755",
            "artifact": "tool"}


async def test_a_download_never_writes_or_changes_a_file_outside_the_root(
        root: Path, outside: Path) -> None:
    (outside / "tool").write_bytes(BLOB)  # already the content: today it would only chmod it
    (outside / "tool").chmod(0o600)
    link(root, "/opt/bin/tool", outside / "tool")
    link(root, "/opt/lib", outside)
    for path in ("/opt/lib/tool", "/../outside/tool"):
        outcome = await apply(make_item("d", download(path)), root,
                              artifacts=artifact_source([BLOB]))
        assert outcome.error.startswith(f"{path} is outside the agent's root {root}")
    outcome = await apply(make_item("d", download("/opt/bin/tool")), root,
                          artifacts=artifact_source([BLOB]))
    assert outcome.succeeded, outcome.error
    assert outcome.output.startswith("downloaded"), "the link's target counted as current"
    assert not (root / "opt/bin/tool").is_symlink()
    assert (outside / "tool").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in outside.iterdir()) == ["shadow", "tool"]


@pytest.mark.parametrize("cwd", ["/..", "/srv/link"])
async def test_a_command_never_runs_in_a_directory_outside_the_root(
        root: Path, outside: Path, cwd: str) -> None:
    link(root, "/srv/link", outside)
    outcome = await apply(exec_item("x", ["touch", "ran"], cwd=cwd), root)
    assert outcome.error == (f"{cwd} is outside the agent's root {root} (it resolves to "
                             f"{outside if cwd != '/..' else root.parent}): an item's paths "
                             "stay under it")
    assert untouched(outside) == [] and not (root.parent / "ran").exists()


@pytest.mark.parametrize("path", ["/../outside/shadow", "/etc/kubernetes/admin.conf"])
async def test_a_kubeconfig_is_never_read_from_outside_the_root(
        root: Path, outside: Path, tmp_path: Path, path: str) -> None:
    link(root, "/etc/kubernetes/admin.conf", outside / "shadow")
    item = exec_item("init", ["true"], kubeconfigFrom=path, phase="deploy")
    recorder = Recorder()
    assert not await run([item], tmp_journal(tmp_path), recorder, root,
                         RetryPolicy(max_attempts=1))
    failed = recorder.reports[-1]
    assert failed.kubeconfig is None
    assert failed.error == (f"kubeconfigFrom {path}: {path} is outside the agent's root {root} "
                            f"(it resolves to {outside}/shadow): an item's paths stay under it")
    assert all("$6$" not in r.output + r.error for r in recorder.reports)


async def test_an_output_file_is_never_read_from_outside_the_root(
        root: Path, outside: Path, tmp_path: Path) -> None:
    link(root, "/etc/token", outside / "shadow")
    item = exec_item("mint", ["true"], outputs=[{"name": "token", "file": "/etc/token"}])
    recorder = Recorder()
    assert not await run([item], tmp_journal(tmp_path), recorder, root,
                         RetryPolicy(max_attempts=1))
    assert recorder.reports[-1].error.startswith(
        "output token (/etc/token): /etc/token is outside the agent's root")


async def test_with_root_slash_every_path_is_inside(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    outcome = await apply(exec_item("x", ["pwd"], cwd=f"{tmp_path}/work/../work"), Path("/"))
    assert outcome.output == f"{tmp_path}/work\n"


def tmp_journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "journal.json", "m-1")


def swap_for_link(monkeypatch: pytest.MonkeyPatch, module: object, resolver: str,
                  directory: Path, outside: Path) -> None:
    """A hostile process's move: once the item's path is resolved, directory (under the
    root) becomes a link out of it, before anything is written or read there."""
    resolve = getattr(module, resolver)

    def resolved_then_swapped(root: Path, path: str) -> Path:
        found = resolve(root, path)
        directory.rename(directory.with_name("moved-away"))
        directory.symlink_to(outside)
        return found

    monkeypatch.setattr(module, resolver, resolved_then_swapped)


async def test_a_directory_swapped_for_a_link_after_resolution_takes_no_write_out(
        root: Path, outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nodeagent.items.file

    (root / "etc/edge").mkdir(parents=True)
    swap_for_link(monkeypatch, nodeagent.items.file, "machine_path", root / "etc/edge", outside)
    outcome = await apply(make_item("f", file_item("/etc/edge/app.conf")), root)
    assert outcome.error == ("/etc/edge/app.conf: edge became a symbolic link while it was "
                             "resolved: refused")
    assert untouched(outside) == []


async def test_a_directory_swapped_for_a_link_after_resolution_takes_no_read_out(
        root: Path, outside: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nodeagent.items

    (root / "etc/kubernetes").mkdir(parents=True)
    (root / "etc/kubernetes/shadow").write_text("apiVersion: v1\n")
    swap_for_link(monkeypatch, nodeagent.items, "resolved_path", root / "etc/kubernetes",
                  outside)
    item = exec_item("init", ["true"], kubeconfigFrom="/etc/kubernetes/shadow", phase="deploy")
    recorder = Recorder()
    assert not await run([item], tmp_journal(tmp_path), recorder, root,
                         RetryPolicy(max_attempts=1))
    assert recorder.reports[-1].error == (
        "kubeconfigFrom /etc/kubernetes/shadow: /etc/kubernetes/shadow: kubernetes became a "
        "symbolic link while it was resolved: refused")
    assert all("$6$" not in r.output + r.error and r.kubeconfig is None
               for r in recorder.reports)


async def test_an_output_naming_the_root_itself_fails_clearly(root: Path, tmp_path: Path) -> None:
    item = exec_item("mint", ["true"], outputs=[{"name": "token", "file": "/etc/.."}])
    recorder = Recorder()
    assert not await run([item], tmp_journal(tmp_path), recorder, root,
                         RetryPolicy(max_attempts=1))
    assert recorder.reports[-1].error == (
        "output token (/etc/..): /etc/.. is the agent's root, a directory")
